package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/internal/procid"
)

// Options tune an Accountant. Zero fields mean their defaults.
type Options struct {
	// Now is the clock, a time since an arbitrary epoch (default: the
	// monotonic time since New).
	Now func() time.Duration
	// Command names a process for display (default: /proc/PID/comm).
	Command func(pid int32) string
	// Cgroup is a process's cgroup path (default: from /proc/PID/cgroup).
	Cgroup func(pid int32) string
	// Alive reports whether a process exists (default: /proc/PID), for
	// limits restored from the state file.
	Alive func(pid int32) bool
	// Process is the identity of the process that opened connection conn
	// (whose SO_PEERCRED pid is pid), as read when it connected: the host
	// socket's (hostif.Server.ProcessOf); false when unknown, and the
	// connection's GPU ops are refused (ESRCH). Default: the process that
	// has pid when the connection's first GPU op comes, which is another
	// one if the first exited and its pid was reused.
	Process func(conn uint64, pid int32) (procid.ID, bool)
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
	// StateName is how messages name Config.StateFile (default: as it
	// is), for a state file opened through a directory's descriptor
	// (/proc/self/fd/N/...).
	StateName string
}

// Accountant is the agent's GPU accounting service: a Ledger behind a mutex
// and a clock. It serves the GPU ops of the host interface (it is a
// hookwire.Handler: set it as hostif.Options.GPU) and the control socket's
// GPU objects (it is a gpuctl.Service: gpuctl.Commands serves it on the
// control socket).
type Accountant struct {
	now     func() time.Duration
	command func(int32) string
	cgroup  func(int32) string
	process func(uint64, int32) (procid.ID, bool)
	log     *slog.Logger
	state   string // Config.StateFile
	shown   string // Options.StateName

	mu     sync.Mutex
	ledger *Ledger
	names  map[uint64]peerInfo // each connection that sent a GPU op
	gen    uint64              // bumped by every change of the run-time limits

	saveMu sync.Mutex // one state file write at a time
	saved  uint64     // the gen last written
}

type peerInfo struct {
	proc    procid.ID
	command string
	id      Identity
}

var (
	_ hookwire.Handler = (*Accountant)(nil)
	_ gpuctl.Service   = (*Accountant)(nil)
)

// New returns an Accountant applying cfg.
func New(cfg Config, opts Options) (*Accountant, error) {
	l, err := NewLedger(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		start := time.Now()
		opts.Now = func() time.Duration { return time.Since(start) }
	}
	if opts.Command == nil {
		opts.Command = procCommand
	}
	if opts.Cgroup == nil {
		opts.Cgroup = procCgroup
	}
	if opts.Alive == nil {
		opts.Alive = procAlive
	}
	if opts.Process == nil {
		opts.Process = func(_ uint64, pid int32) (procid.ID, bool) {
			id, err := procid.Of(pid)
			return id, err == nil
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Accountant{now: opts.Now, command: opts.Command, cgroup: opts.Cgroup, process: opts.Process, log: opts.Logger, state: cfg.StateFile, shown: cmp.Or(opts.StateName, cfg.StateFile),
		ledger: l, names: make(map[uint64]peerInfo)}
	if a.state != "" {
		saved, err := LoadState(a.state)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.shown, err)
		}
		if err := l.RestoreLimits(saved, opts.Alive); err != nil {
			return nil, fmt.Errorf("gpu state %s: %w", a.shown, err)
		}
		if len(saved) > 0 {
			a.log.Info("gpu limits restored", "file", a.shown, "limits", len(l.SetLimits()))
		}
	}
	return a, nil
}

// ServeGPU answers one GPU op of the host interface.
func (a *Accountant) ServeGPU(ctx context.Context, peer hookwire.Peer, op hookwire.Op, body, reply []byte) ([]byte, error) {
	p, err := a.peer(peer)
	if err != nil {
		return nil, err
	}
	switch op {
	case hookwire.OpMemLimit:
		d, err := hookwire.DecodeLimitRequest(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		l, err := a.ledger.Limits(a.now(), p, d)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return l.Append(reply), nil
	case hookwire.OpMemUpdate:
		d, u, err := hookwire.DecodeUpdate(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		l, err := a.ledger.Update(a.now(), p, d, u)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if u.Kind == hookwire.UpdateSync {
			a.log.Info("gpu totals re-reported", "pid", p.PID, "device", d.Ordinal, "memory", u.Total, "kernel", u.Kernel)
		}
		return l.Append(reply), nil
	case hookwire.OpMemProcs:
		d, err := hookwire.DecodeProcsRequest(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		ps, err := a.ledger.Procs(a.now(), p, d)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return ps.Append(reply), nil
	case hookwire.OpKernelQuota:
		d, ask, err := hookwire.DecodeTokenAsk(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		t, err := a.ledger.Token(a.now(), p, d, ask)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return t.Append(reply), nil
	}
	return nil, fmt.Errorf("gpu op %d: %w", uint16(op), syscall.ENOSYS)
}

// GPUClosed releases what the connection's process had accounted.
func (a *Accountant) GPUClosed(peer hookwire.Peer) {
	a.mu.Lock()
	before := len(a.ledger.limits)
	gone := a.ledger.Closed(a.now(), peer.Conn)
	delete(a.names, peer.Conn)
	if len(a.ledger.limits) != before {
		a.gen++
	}
	a.mu.Unlock()
	if len(gone) > 0 {
		a.log.Info("gpu accounts released", "pid", peer.PID, "conn", peer.Conn, "accounts", len(gone))
	}
	a.save()
}

// Processes returns every account for dpuctl gpu show.
func (a *Accountant) Processes() []gpuctl.Process {
	accts := a.Accounts()
	out := make([]gpuctl.Process, len(accts))
	for i, ac := range accts {
		out[i] = gpuctl.Process{
			PID: uint32(ac.PID), UID: ac.UID, Device: ac.Device, Command: ac.Command,
			MemoryUsed: ac.Memory, MemoryLimit: ac.Limit.Memory,
			KernelTime: ac.Kernel, KernelQuota: ac.Limit.Quota,
			Cgroup: ac.Cgroup, Pod: ac.Pod, Container: ac.Container, LimitOf: ac.LimitOf, Others: ac.Others,
		}
	}
	return out
}

// SetLimit sets a limit (dpuctl gpu set): of a process, cgroup, pod or
// container, on one device or all. Limits are written to the state file
// before SetLimit returns.
func (a *Accountant) SetLimit(l gpuctl.Limit) error {
	if l.PID > math.MaxInt32 {
		return fmt.Errorf("gpu limit: process id %d: %w", l.PID, syscall.EINVAL)
	}
	t := Target{PID: int32(l.PID), Cgroup: l.Cgroup, Pod: l.Pod, Container: l.Container}
	a.mu.Lock()
	err := a.ledger.SetTargetLimit(t, l.Device, Limit{Memory: l.MemoryLimit, Quota: l.KernelQuota})
	if err == nil {
		a.gen++
	}
	a.mu.Unlock()
	if err != nil {
		return err
	}
	a.log.Info("gpu limit set", "target", t.String(), "device", int64(int32(l.Device)), "memory", l.MemoryLimit, "quota", l.KernelQuota)
	if err := a.save(); err != nil {
		return fmt.Errorf("gpu limit set, not saved: %w", err)
	}
	return nil
}

// Limits returns the limits set at run time (dpuctl gpu limits).
func (a *Accountant) Limits() []gpuctl.Limit {
	a.mu.Lock()
	set := a.ledger.SetLimits()
	a.mu.Unlock()
	out := make([]gpuctl.Limit, len(set))
	for i, s := range set {
		out[i] = gpuctl.Limit{PID: uint32(s.PID), Cgroup: s.Cgroup, Pod: s.Pod, Container: s.Container,
			Device: s.Device, MemoryLimit: s.Memory, KernelQuota: s.Quota}
	}
	return out
}

// save writes the run-time limits to the state file when they changed.
func (a *Accountant) save() error {
	if a.state == "" {
		return nil
	}
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	gen, set := a.gen, a.ledger.SetLimits()
	a.mu.Unlock()
	if gen == a.saved {
		return nil
	}
	if err := SaveState(a.state, set); err != nil {
		a.log.Warn("gpu limits not saved", "file", a.shown, "err", err)
		return err
	}
	a.saved = gen
	return nil
}

// Accounts returns a snapshot of every account.
func (a *Accountant) Accounts() []Account {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ledger.Accounts()
}

// peer resolves the process of a connection once: its identity (pid and
// start time), its name and its cgroup. The name and cgroup are read from
// /proc only while the pid still names that process; otherwise they stay
// unknown (another process's would put the account under its limits).
func (a *Accountant) peer(p hookwire.Peer) (Peer, error) {
	a.mu.Lock()
	info, ok := a.names[p.Conn]
	a.mu.Unlock()
	if !ok {
		proc, known := a.process(p.Conn, p.PID)
		if !known {
			return Peer{}, fmt.Errorf("gpu: the process that opened this connection (pid %d) is not known: %w", p.PID, syscall.ESRCH)
		}
		info.proc = proc
		if now, err := procid.Of(p.PID); err == nil && now == proc {
			info.command, info.id = a.command(p.PID), IdentityOf(a.cgroup(p.PID))
			if again, err := procid.Of(p.PID); err != nil || again != proc {
				info.command, info.id = "", Identity{} // it exited as they were read
			}
		}
		a.mu.Lock()
		a.names[p.Conn] = info
		a.mu.Unlock()
	}
	return Peer{Conn: p.Conn, PID: p.PID, Start: info.proc.Start, UID: p.UID, Command: info.command, Identity: info.id}, nil
}

func invalid(err error) error {
	if errors.Is(err, hookwire.ErrMalformed) {
		return fmt.Errorf("%w (%w)", err, syscall.EINVAL)
	}
	return err
}

func procCommand(pid int32) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func procCgroup(pid int32) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/cgroup")
	if err != nil {
		return ""
	}
	return CgroupOf(string(b))
}

func procAlive(pid int32) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(int(pid)))
	return err == nil
}
