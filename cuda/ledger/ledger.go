package ledger

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/aitherion/dpu/cuda/hookwire"
)

// Key names one account: a host process on one of its devices. A process
// is its pid and its start time (internal/procid): a later process that
// gets the same pid never inherits the account.
type Key struct {
	PID    int32
	Start  uint64 // the process's start time, clock ticks since boot
	Device uint32 // ordinal, as the process numbers its devices
}

// Peer is where a request comes from: the host interface connection it
// came on and the credentials the kernel gave for it.
type Peer struct {
	Conn     uint64
	PID      int32
	Start    uint64 // the process's start time (with PID, its identity)
	UID      uint32
	Command  string // the process's name, for display
	Identity        // its cgroup, pod and container, when known
}

// Limit is what one process may use of one device. Zero fields mean
// unlimited.
type Limit struct {
	Memory uint64 `json:"memory,omitempty"` // bytes
	Quota  uint32 `json:"quota,omitempty"`  // percent of the device's time, 1..100
}

// Account is a snapshot of one process's use of one device.
type Account struct {
	Key
	Identity
	UID      uint32
	Command  string
	LimitOf  string // where Limit comes from: a run-time limit's target, "device", "default"
	UUID     hookwire.UUID
	Conn     uint64 // the connection that reported last
	Limit    Limit
	Memory   uint64        // bytes in use
	Peak     uint64        // most bytes in use at once
	Kernel   time.Duration // kernel time accounted (grants and overuse)
	Allocs   uint64
	Frees    uint64
	Syncs    uint64 // totals re-reported after a reconnect
	Over     uint64 // allocations reported beyond the limit
	Grants   uint64 // quota tokens granted
	Deferred uint64 // quota requests answered "wait"
	Overuse  time.Duration
	Others   uint64 // in use by the other processes under the same shared limit
}

// Ledger is the agent's GPU accounting: per (process, device) memory in
// use, kernel time and quota tokens, and the limits that apply. It is a
// deterministic state machine: it does no I/O, reads no clock (every verb
// takes now, a time since an arbitrary epoch) and is not safe for
// concurrent use; Accountant is its concurrent, clocked front.
//
// Kernel-time quotas are token buckets: a process with quota q% of a
// device earns q% of elapsed time as kernel time, up to q% of Window;
// a grant spends from the bucket, reported overuse is charged to it (down
// to DebtWindows buckets of debt, so one runaway kernel costs the process
// at most about DebtWindows windows of waiting), and an ask the bucket
// cannot cover is told how long to wait.
type Ledger struct {
	cfg      Config
	accounts map[Key]*account
	limits   map[limitKey]Limit // set at run time (a process's: until it leaves)
	groups   map[groupKey]*bucket
	pids     map[int32]int // accounts per process
}

// DebtWindows bounds a quota bucket's debt, in buckets.
const DebtWindows = 10

type account struct {
	Account
	bucket            // its own quota bucket
	governor limitKey // the run-time limit that applies, when governed
	governed bool
}

// bucket is a kernel-time token bucket: a process's, or one a group's
// processes share on a device.
type bucket struct {
	level    time.Duration // kernel time available
	refilled time.Duration // when level was last brought to now
	quota    uint32        // the quota level was computed for
}

// groupKey names the bucket a group's processes share on one device.
type groupKey struct {
	limitKey
	device uint32
}

// NewLedger returns an empty ledger applying cfg.
func NewLedger(cfg Config) (*Ledger, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Ledger{cfg: cfg, accounts: make(map[Key]*account), limits: make(map[limitKey]Limit), groups: make(map[groupKey]*bucket), pids: make(map[int32]int)}, nil
}

// Limits answers GPU_MEM_LIMIT: the process's limits on d and what it
// has in use. The first request of a process on a device opens its
// account.
func (l *Ledger) Limits(now time.Duration, p Peer, d hookwire.Device) (hookwire.Limits, error) {
	a, err := l.account(p, d)
	if err != nil {
		return hookwire.Limits{}, err
	}
	return l.limitsOf(a), nil
}

// Update applies a GPU_MEM_UPDATE. The process is the authority on its own
// use: the total it reports replaces the account's. An allocation beyond
// the limit is still recorded (the memory exists) and counted in Over.
func (l *Ledger) Update(now time.Duration, p Peer, d hookwire.Device, u hookwire.MemUpdate) (hookwire.Limits, error) {
	a, err := l.account(p, d)
	if err != nil {
		return hookwire.Limits{}, err
	}
	switch u.Kind {
	case hookwire.UpdateAlloc:
		a.Allocs++
		if lim := a.Limit.Memory; lim != 0 && u.Total+l.limitsOf(a).Others > lim {
			a.Over++
		}
	case hookwire.UpdateFree:
		a.Frees++
	case hookwire.UpdateSync:
		a.Syncs++
		a.Kernel = max(a.Kernel, u.Kernel)
	default:
		return hookwire.Limits{}, fmt.Errorf("mem-update %v: %w", u.Kind, syscall.EINVAL)
	}
	a.Memory = u.Total
	a.Peak = max(a.Peak, a.Memory)
	return l.limitsOf(a), nil
}

// Procs answers GPU_MEM_PROCS: the processes whose use counts against
// p's memory limit on d, p first; p alone unless the limit is shared.
func (l *Ledger) Procs(now time.Duration, p Peer, d hookwire.Device) (hookwire.Procs, error) {
	a, err := l.account(p, d)
	if err != nil {
		return nil, err
	}
	out := hookwire.Procs{{PID: uint32(a.PID), Memory: a.Memory}}
	if !a.governed || !a.governor.Shared() {
		return out, nil
	}
	var rest []*account
	for _, o := range l.accounts {
		if o != a && o.Device == a.Device && o.governed && o.governor == a.governor {
			rest = append(rest, o)
		}
	}
	slices.SortFunc(rest, func(x, y *account) int { return compareKeys(x.Key, y.Key) })
	for _, o := range rest {
		out = append(out, hookwire.ProcUse{PID: uint32(o.PID), Memory: o.Memory})
	}
	return out, nil
}

// Token answers GPU_KERNEL_QUOTA: a grant of kernel time from the
// process's bucket, or how long to wait for one. Reported overuse is
// accounted first.
func (l *Ledger) Token(now time.Duration, p Peer, d hookwire.Device, ask hookwire.TokenAsk) (hookwire.Token, error) {
	a, err := l.account(p, d)
	if err != nil {
		return hookwire.Token{}, err
	}
	window := l.cfg.Window
	a.Kernel += ask.Overuse
	a.Overuse += ask.Overuse
	q := a.Limit.Quota
	b := l.bucketOf(a)
	if q == 0 {
		b.quota = 0
		return hookwire.Token{Grant: ask.Want, Window: window}, nil
	}
	capacity := window * time.Duration(q) / 100
	b.refill(now, capacity, q)
	b.level = max(b.level-ask.Overuse, -DebtWindows*capacity)
	want := min(max(ask.Want, min(l.cfg.MinGrant, capacity)), capacity)
	if b.level >= want {
		b.level -= want
		a.Kernel += want
		a.Grants++
		return hookwire.Token{Grant: want, Quota: q, Window: window}, nil
	}
	a.Deferred++
	wait := (want - b.level) * 100 / time.Duration(q)
	return hookwire.Token{Wait: max(wait, 1), Quota: q, Window: window}, nil
}

// bucketOf is the bucket a's launches draw from: its group's on its device
// when a shared limit with a quota governs it, else its own.
func (l *Ledger) bucketOf(a *account) *bucket {
	if !a.governed || !a.governor.Shared() {
		return &a.bucket
	}
	k := groupKey{a.governor, a.Device}
	b := l.groups[k]
	if b == nil {
		b = &bucket{}
		l.groups[k] = b
	}
	return b
}

// refill brings b to now under quota q with the given capacity.
func (b *bucket) refill(now, capacity time.Duration, q uint32) {
	if b.quota == 0 { // a new bucket, or one that was unlimited: full
		b.level, b.refilled, b.quota = capacity, now, q
		return
	}
	if dt := now - b.refilled; dt > 0 {
		b.level += dt * time.Duration(q) / 100
		b.refilled = now
	}
	b.quota = q
	b.level = min(b.level, capacity)
}

// dropIdleGroups forgets the buckets no account draws from.
func (l *Ledger) dropIdleGroups() {
	if len(l.groups) == 0 {
		return
	}
	used := make(map[groupKey]bool)
	for _, a := range l.accounts {
		if a.governed && a.governor.Shared() {
			used[groupKey{a.governor, a.Device}] = true
		}
	}
	for k := range l.groups {
		if !used[k] {
			delete(l.groups, k)
		}
	}
}

// Closed releases every account of connection conn: the process died or
// closed the host interface. It returns the keys released.
func (l *Ledger) Closed(now time.Duration, conn uint64) []Key {
	var gone []Key
	for k, a := range l.accounts {
		if a.Conn == conn {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, compareKeys)
	defer l.dropIdleGroups()
	for _, k := range gone {
		delete(l.accounts, k)
		if l.pids[k.PID]--; l.pids[k.PID] <= 0 {
			delete(l.pids, k.PID)
			for lk := range l.limits {
				if lk.PID == k.PID {
					delete(l.limits, lk)
				}
			}
			l.relimit()
		}
	}
	return gone
}

// SetLimit sets the limits of process pid on device dev, until the process
// leaves. ESRCH: no such process has an account; EINVAL: a quota above
// 100 or a device out of range.
func (l *Ledger) SetLimit(pid int32, dev uint32, lim Limit) error {
	return l.SetTargetLimit(Target{PID: pid}, dev, lim)
}

// SetTargetLimit sets the limit of a target on device dev (AnyDevice: on
// each of its devices). A process's limit lasts until it leaves and needs
// an account (ESRCH otherwise); a cgroup's, pod's or container's lasts
// until it is set again, and a zero limit removes it (its processes fall
// back to the configured limits). EINVAL: a malformed target, a quota
// above 100, a device out of range; ENOSPC: too many limits.
func (l *Ledger) SetTargetLimit(t Target, dev uint32, lim Limit) error {
	if err := t.check(); err != nil {
		return err
	}
	if lim.Quota > 100 || (dev > hookwire.HostDevice && dev != AnyDevice) || (dev == hookwire.HostDevice && lim.Quota != 0) {
		return fmt.Errorf("gpu limit of %s on device %d: quota %d%%: %w", t, dev, lim.Quota, syscall.EINVAL)
	}
	if t.PID != 0 && l.pids[t.PID] == 0 {
		return fmt.Errorf("no GPU process %d: %w", t.PID, syscall.ESRCH)
	}
	k := limitKey{Target: t, Device: dev}
	if t.Shared() && lim == (Limit{}) {
		delete(l.limits, k)
	} else {
		if _, ok := l.limits[k]; !ok && len(l.limits) >= l.cfg.MaxAccounts {
			return fmt.Errorf("gpu limits: %d set: %w", len(l.limits), syscall.ENOSPC)
		}
		l.limits[k] = lim
	}
	l.relimit()
	return nil
}

// RestoreLimits puts back limits saved before a restart (SetLimits'
// output). A process's limit is kept only while alive says it lives.
func (l *Ledger) RestoreLimits(saved []SetLimit, alive func(pid int32) bool) error {
	for _, s := range saved {
		if err := s.Target.check(); err != nil {
			return err
		}
		if s.Quota > 100 || (s.Device > hookwire.HostDevice && s.Device != AnyDevice) {
			return fmt.Errorf("gpu limit of %s on device %d: %w", s.Target, s.Device, syscall.EINVAL)
		}
		if s.PID != 0 && !alive(s.PID) {
			continue
		}
		if len(l.limits) >= l.cfg.MaxAccounts {
			return fmt.Errorf("gpu limits: %d saved: %w", len(saved), syscall.ENOSPC)
		}
		l.limits[limitKey{Target: s.Target, Device: s.Device}] = s.Limit
	}
	l.relimit()
	return nil
}

// SetLimits returns the limits set at run time, in a stable order.
func (l *Ledger) SetLimits() []SetLimit {
	keys := make([]limitKey, 0, len(l.limits))
	for k := range l.limits {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareLimitKeys)
	out := make([]SetLimit, len(keys))
	for i, k := range keys {
		out[i] = SetLimit{Target: k.Target, Device: k.Device, Limit: l.limits[k]}
	}
	return out
}

// relimit recomputes which limit governs every account.
func (l *Ledger) relimit() {
	for _, a := range l.accounts {
		l.applyLimit(a)
	}
	l.dropIdleGroups()
}

// Accounts returns a snapshot of every account, by process then device.
func (l *Ledger) Accounts() []Account {
	out := make([]Account, 0, len(l.accounts))
	for _, a := range l.accounts {
		out = append(out, a.Account)
	}
	slices.SortFunc(out, func(a, b Account) int { return compareKeys(a.Key, b.Key) })
	return out
}

// Get returns the account of k.
func (l *Ledger) Get(k Key) (Account, bool) {
	a, ok := l.accounts[k]
	if !ok {
		return Account{}, false
	}
	return a.Account, true
}

// account returns the account of p on d, opening it if needed. The account
// follows the connection that reported last, so a reconnected process
// keeps it when its old connection's close arrives late.
func (l *Ledger) account(p Peer, d hookwire.Device) (*account, error) {
	k := Key{PID: p.PID, Start: p.Start, Device: d.Ordinal}
	a := l.accounts[k]
	if a == nil {
		if len(l.accounts) >= l.cfg.MaxAccounts {
			return nil, fmt.Errorf("gpu accounts: %d open: %w", len(l.accounts), syscall.ENOSPC)
		}
		a = &account{Account: Account{Key: k}}
		l.accounts[k] = a
		l.pids[k.PID]++
	}
	a.Conn, a.UID = p.Conn, p.UID
	if p.Command != "" {
		a.Command = p.Command
	}
	if !d.UUID.IsZero() {
		a.UUID = d.UUID
	}
	if p.Identity != (Identity{}) {
		a.Identity = p.Identity
	}
	l.applyLimit(a)
	return a, nil
}

// applyLimit sets a's limit: a run-time limit, else the configured one.
func (l *Ledger) applyLimit(a *account) {
	if k, lim, ok := l.governing(a); ok {
		a.Limit, a.governor, a.governed = lim, k, true
		a.LimitOf = k.Target.String()
		return
	}
	a.governed = false
	a.Limit, a.LimitOf = l.limitOf(a.Key, a.UUID)
}

// limitOf is the configured limit of k: the device's (by UUID, then
// ordinal), else the default; and where it comes from. Host memory has
// only its own ("host"): the default is a GPU's.
func (l *Ledger) limitOf(k Key, uuid hookwire.UUID) (Limit, string) {
	if k.Device == hookwire.HostDevice {
		if lim, ok := l.cfg.Devices["host"]; ok {
			return lim, "host"
		}
		return Limit{}, "host"
	}
	if !uuid.IsZero() {
		if lim, ok := l.cfg.Devices[uuid.String()]; ok {
			return lim, "device " + uuid.String()
		}
	}
	if lim, ok := l.cfg.Devices[strconv.FormatUint(uint64(k.Device), 10)]; ok {
		return lim, "device " + strconv.FormatUint(uint64(k.Device), 10)
	}
	return l.cfg.Default, "default"
}

func (l *Ledger) limitsOf(a *account) hookwire.Limits {
	a.Others = 0
	if a.governed && a.governor.Shared() {
		a.Others = l.others(a.governor, a)
	}
	return hookwire.Limits{Memory: a.Limit.Memory, MemoryUsed: a.Memory, Quota: a.Limit.Quota, Window: l.cfg.Window,
		Kernel: a.Kernel, Others: a.Others}
}

func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.PID, b.PID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Start, b.Start); c != 0 {
		return c
	}
	return cmp.Compare(a.Device, b.Device)
}
