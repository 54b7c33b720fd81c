// Package quota keeps per-user counts of what users hold in the agent
// (connections, monitor subscriptions, pages) so that one user can never
// take all of a shared resource.
//
// A Ledger has, per Kind, a limit per uid and a total with a reserve:
// ordinary users together may use at most Total-Reserve, each at most
// PerUID; privileged users (root and the agent's own user) have no
// per-uid limit and may use the reserve, so the operator's own tools
// always get in. The Ledger only counts: callers Take before they create
// something and Release when it is gone. It calls nothing and does no I/O.
package quota

import (
	"fmt"
	"sort"
	"sync"
	"syscall"
)

// Kind is a resource counted per user.
type Kind int

// Kinds.
const (
	Conns Kind = iota // connections to a socket
	Subs              // monitor subscriptions
	Pages             // allocated pages (4 KiB each)
	Bytes             // allocated bytes (whole pages)
	Files             // descriptors the agent holds for a user (connections, ring pairs, mapped replica files)
	numKinds
)

var kindNames = [numKinds]string{"conns", "subs", "pages", "bytes", "files"}

func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Remote is the account of what a node holds for other nodes rather than
// for a local user (backup copies of their pages): never privileged, so it
// shares the ordinary users' part of a Total and never takes the reserve.
const Remote uint32 = 0xfffffffe

// Limit bounds one Kind. Zero fields mean unlimited (PerUID, Total) or no
// reserve.
type Limit struct {
	PerUID  int
	Total   int
	Reserve int
}

// Error is a refusal; it unwraps to EDQUOT (the user's own limit),
// EBUSY (all in use, or ordinary users together took all but the
// reserve) or ENOMEM (more asked than exist).
type Error struct {
	UID   uint32
	Kind  Kind
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// Ledger counts per uid. Safe for concurrent use.
type Ledger struct {
	mu         sync.Mutex
	limits     [numKinds]Limit
	perUID     map[uint32]*[numKinds]int // overrides of PerUID
	used       map[uint32]*[numKinds]int
	ordinary   [numKinds]int // used by unprivileged uids together
	total      [numKinds]int
	privileged map[uint32]bool
}

// New returns a ledger with the given limits; uid 0 and the uids listed
// are privileged.
func New(limits map[Kind]Limit, privileged ...uint32) *Ledger {
	l := &Ledger{perUID: map[uint32]*[numKinds]int{}, used: map[uint32]*[numKinds]int{}, privileged: map[uint32]bool{0: true}}
	for k, v := range limits {
		l.limits[k] = v
	}
	for _, u := range privileged {
		l.privileged[u] = true
	}
	return l
}

// Take counts n more of k for uid, or refuses.
func (l *Ledger) Take(uid uint32, k Kind, n int) error {
	if l == nil || n <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.limits[k]
	u := l.used[uid]
	had := 0
	if u != nil {
		had = u[k]
	}
	priv := l.privileged[uid]
	if lim.Total > 0 && n > lim.Total {
		return &Error{UID: uid, Kind: k, Errno: syscall.ENOMEM, Msg: fmt.Sprintf("%s: %d asked, %d exist", k, n, lim.Total)}
	}
	if lim.Total > 0 && l.total[k]+n > lim.Total {
		return &Error{UID: uid, Kind: k, Errno: syscall.EBUSY, Msg: fmt.Sprintf("%s: all %d in use", k, lim.Total)}
	}
	if !priv {
		if per := l.limitOf(uid, k); per > 0 && had+n > per {
			return &Error{UID: uid, Kind: k, Errno: syscall.EDQUOT,
				Msg: fmt.Sprintf("%s: uid %d holds %d of its %d", k, uid, had, per)}
		}
		if lim.Total > 0 && l.ordinary[k]+n > lim.Total-lim.Reserve {
			return &Error{UID: uid, Kind: k, Errno: syscall.EBUSY,
				Msg: fmt.Sprintf("%s: users hold %d; the last %d are kept for root", k, l.ordinary[k], lim.Reserve)}
		}
		l.ordinary[k] += n
	}
	if u == nil {
		u = new([numKinds]int)
		l.used[uid] = u
	}
	u[k] += n
	l.total[k] += n
	return nil
}

// Release gives back n of k that uid took.
func (l *Ledger) Release(uid uint32, k Kind, n int) {
	if l == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.used[uid]
	if u == nil {
		return
	}
	n = min(n, u[k])
	u[k] -= n
	l.total[k] -= n
	if !l.privileged[uid] {
		l.ordinary[k] -= n
	}
	if *u == ([numKinds]int{}) {
		delete(l.used, uid)
	}
}

// SetLimit overrides uid's PerUID limit of k (0: back to the default).
func (l *Ledger) SetLimit(uid uint32, k Kind, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.perUID[uid]
	if o == nil {
		o = new([numKinds]int)
		l.perUID[uid] = o
	}
	o[k] = n
}

func (l *Ledger) limitOf(uid uint32, k Kind) int {
	if o := l.perUID[uid]; o != nil && o[k] > 0 {
		return o[k]
	}
	return l.limits[k].PerUID
}

// Usage is what one uid holds of one Kind, and its limit (0: none).
type Usage struct {
	UID   uint32
	Kind  Kind
	Used  int
	Limit int
}

// Usage lists every uid's holdings, by uid then kind.
func (l *Ledger) Usage() []Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Usage
	for uid, u := range l.used {
		for k := range numKinds {
			if u[k] > 0 {
				lim := l.limitOf(uid, k)
				if l.privileged[uid] {
					lim = 0
				}
				out = append(out, Usage{UID: uid, Kind: k, Used: u[k], Limit: lim})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].UID != out[j].UID {
			return out[i].UID < out[j].UID
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

// Default is k's PerUID limit for uids without an override (0: none).
func (l *Ledger) Default(k Kind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limits[k].PerUID
}

// Override is uid's own PerUID limit of k (0: none, the default applies).
func (l *Ledger) Override(uid uint32, k Kind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.perUID[uid]; o != nil {
		return o[k]
	}
	return 0
}

// Used is how much of k uid holds.
func (l *Ledger) Used(uid uint32, k Kind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := l.used[uid]; u != nil {
		return u[k]
	}
	return 0
}

// Privileged reports whether uid is exempt from per-uid limits.
func (l *Ledger) Privileged(uid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.privileged[uid]
}

// UIDs lists, in order, every uid that holds something or has an
// override.
func (l *Ledger) UIDs() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint32
	for uid := range l.used {
		out = append(out, uid)
	}
	for uid, o := range l.perUID {
		if _, ok := l.used[uid]; !ok && *o != ([numKinds]int{}) {
			out = append(out, uid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
