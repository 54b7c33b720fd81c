package coherence

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// Hosts is the host-session half of a node's core: it sits in front of the
// Engine, inside the same step, and turns what a host asks for into the
// engine's primitive requests. A session is one user of the node: the host
// socket opens one per connection, the simulator one per client. A session
// holds refs, acquisitions and locks of its own; Hosts keeps what is per
// allocation (attributes, extents) and the node's lock of each page
// between its sessions.
//
// What it adds to the Engine's requests:
//
//   - Alloc of n pages: n consecutive pages in one step, or none;
//     attributes and extents recorded for Stat and Free.
//   - Free of an extent, at its allocator only (elsewhere ENOENT), by the
//     allocation's owner or root (else EPERM): every page of it is freed
//     wherever it went, a page another node owns now (a lock or an acquire
//     moved it) taken back first with a ref and an acquire, within the
//     request's bound (a page locked elsewhere is waited for). A Free that
//     runs out of time frees what it could and keeps the rest of the
//     extent for the next one; what it took is given back.
//   - Where answers only for a page that exists (held here, allocated
//     here, or so its home says: else ENOENT, or ESTALE for a page of an
//     earlier run of its home) and names the primary's distance (this
//     machine, neighbour, remote); whether a process maps a valid replica
//     of it (tier local) is the host interface's to add.
//   - Ref = ref + read of the whole page; a Load of a page the session does
//     not hold refs it for the read and drops it after.
//   - Acquire and Lock first ref the page (the ownership protocol follows
//     the cached path), then retry a busy page (EBUSY, EAGAIN, ETIMEDOUT)
//     with a pause until the request's own bound; a failed claim drops its
//     ref. Release and Unlock drop it after. An Unref lets the session's
//     hold go at once and is answered so; the engine's unref runs on by
//     itself (refused during a swap, EBUSY, it is retried within
//     unrefBound). Refs and acquisitions are
//     counted per session (the engine counts the node's refs), so one
//     session's unref or close never drops what another still holds (the
//     engine's release comes with the node's last acquiring session's); a
//     Release without an acquisition of the session, an Unlock of a lock
//     it does not hold, fail with EPERM and reach no engine.
//   - Locks between the node's sessions: at most one session holds, is
//     being granted or is giving back the node's lock of a page. A Lock
//     of a page another session holds waits here, first come first
//     served, within its own bound (ETIMEDOUT at the bound), and is handed
//     the lock when the holder's unlock completes, its claim fails, its
//     pin is revoked or its session closes (Close gives the lock back).
//     A Try lock of such a page fails with EBUSY at once; a session that
//     locks a page it holds (or is being granted) fails with EDEADLK. A
//     waiter whose caller gives up (Abandon) or whose session closes
//     leaves the queue. Free of an allocation with a page locked here
//     fails with EBUSY.
//   - Abandon: a request whose caller gave up completes no more; if it
//     succeeds later, what it took (a ref, a lock, an acquisition) is given
//     back. Close releases everything a session holds.
//   - Events: EventOwnershipLost reaches the host only for pages a
//     session acquired, once per such session (Event.Session, in session
//     order); EventHostFault names the session whose pin was revoked.
//
// Hosts is a node core's handler wrapping the Engine: the node core steps it, and
// the continuations of compound requests run at the end of each step with
// that step's Sender. Its timers (retry pauses, request bounds) are read
// from now like everything else in the core, so the simulator runs exactly
// this code.
type Hosts struct {
	e    *Engine
	sink Sink

	sessions map[SessionID]*session
	locks    map[gva.GVA]*nodeLock // the node's locks between its sessions
	steps    map[uint64]*hostReq   // engine request id -> the compound request waiting for it
	nextStep uint64
	ready    []readyStep // completions to act on at the end of the step
	attrs    map[gva.GVA]Attr
	extents  map[gva.GVA]int
	// freeRuns: extents a Free runs on, with the Frees of the same
	// extent that wait for it to end (nextFree).
	freeRuns map[gva.GVA][]*hostReq
	// known: attributes of pages homed elsewhere learned for the
	// permission check (admit.go)
	known *simplelru.LRU[gva.GVA, Attr]
	// pulled: pages homed elsewhere that an acquire or a lock of a user
	// here brought here, charged to that user's page quota until they
	// leave (pull.go)
	pulled   map[gva.GVA]uint32
	timers   hostTimers
	revoked  []revokedPin // pins revoked in the step: their claims' refs go back at its end
	free     []*hostReq   // finished requests, for reuse (a request a step: no garbage)
	lockStat LocalLockStats
}

// LocalLockStats counts what the node's locks between its sessions did.
type LocalLockStats struct {
	Waits    uint64 // Lock requests that queued behind another session
	HandOffs uint64 // locks handed to the first waiter as their holder let go
	Expired  uint64 // waiters whose bound passed in the queue
	Left     uint64 // waiters that left the queue: abandoned, or their session closed
}

// LocalLocks returns the counts of the node's locks between its sessions.
func (h *Hosts) LocalLocks() LocalLockStats { return h.lockStat }

type revokedPin struct {
	s   *session
	key gva.GVA
}

// PageQuota is a ledger of pages per user: Take charges uid n pages or
// refuses (an error wrapping a syscall.Errno: EDQUOT, the user's own
// limit; EBUSY, the node's share of ordinary users), Release gives n back.
type PageQuota interface {
	Take(uid uint32, pages int) error
	Release(uid uint32, pages int)
}

// SessionID names a host session of a node.
type SessionID uint64

// nodeLock is the node's lock of one page between its sessions: the
// session that holds it (or is being granted it, or is giving it back),
// the Lock request being granted it (nil once it holds it), and the Lock
// requests waiting for it, in arrival order.
type nodeLock struct {
	holder  *session
	claim   *hostReq
	waiters []*hostReq
}

// Attr is the owner and permission of a page, fixed at Alloc (mode: the
// permission bits, 0o777; read 4, write 2 per class). Path cache entries
// carry it (cred.go).
type Attr = pathcache.PageAttr

// Host-session operations beyond the Engine's.
const (
	HostStat HostOp = numHostOps + iota // the attributes of a page
)

// Bounds of the session layer.
const (
	claimPause = 2 * time.Millisecond // between attempts of a busy claim
	unrefBound = time.Second          // an unref refused during a swap is retried this long
)

// session is one user of the node.
type session struct {
	id       SessionID
	refs     map[gva.GVA]int // engine refs held (maps, and the refs claims take)
	acquired map[gva.GVA]int // acquisitions held
	// owedRefs, owedAcq: of refs and acquired, those that requests still
	// running give back themselves (or hand to the session) when they
	// finish, whether or not the caller abandoned them: Close leaves them
	// to those requests.
	owedRefs map[gva.GVA]int
	owedAcq  map[gva.GVA]int
	locked   map[gva.GVA]bool // locks held
	reqs     map[uint64]*hostReq
	closed   bool
}

// hostReq is a host request in the session layer: one or more engine
// requests in sequence.
type hostReq struct {
	s         *session
	hr        Request
	stage     int
	deadline  time.Duration
	pending   int // engine steps outstanding (Alloc, Free: many)
	results   []Completion
	err       error
	data      []byte // Ref, Load: what was read
	version   gva.Version
	abandon   bool // the caller gave up (or its bound passed): undo a success
	done      bool
	lastErr   syscall.Errno // the last failure of one of its engine requests
	drop      bool          // a Load of a page it ref'd: drop after
	owesRef   bool          // counted in its session's owedRefs until it finishes
	owesAcq   bool          // counted in its session's owedAcq until it finishes
	pulls     bool          // an Acquire or Lock that took a page of quota for the page it may bring here (pull.go)
	admitting bool          // waiting for its page's attributes to be checked (admit.go)
	statted   bool          // its page's home answered for it (admit.go): it exists
	checked   bool          // admission checked its user against the page's attributes (admit.go)
	unsure    syscall.Errno // why the page's home could not say, when admission let it out unchecked (admit.go)
	waiting   bool          // a Lock in its page's nodeLock waiters
	freeing   []freePage    // Free: the pages of its extent, each on its way
	// bound is the timer of the request's bound, in the session layer's
	// timer heap from Submit until it fires or the request finishes (a
	// finished request takes it out: the heap holds only live timers).
	bound hostTimer
}

type readyStep struct {
	r *hostReq
	c Completion
}

// NewHosts builds a node's engine with the session layer in front of it;
// sink receives the sessions' completions and the events.
func NewHosts(cfg Config, sink Sink) (*Hosts, error) {
	h := &Hosts{sink: sink, sessions: map[SessionID]*session{}, locks: map[gva.GVA]*nodeLock{}, steps: map[uint64]*hostReq{},
		attrs: map[gva.GVA]Attr{}, extents: map[gva.GVA]int{}, freeRuns: map[gva.GVA][]*hostReq{}, pulled: map[gva.GVA]uint32{}}
	cfg.Sink = h.engineSink()
	e, err := New(cfg)
	if err != nil {
		return nil, err
	}
	h.e = e
	if h.known, err = simplelru.NewLRU[gva.GVA, Attr](e.cfg.AttrCache, nil); err != nil {
		return nil, fmt.Errorf("coherence: attribute cache: %w", err)
	}
	return h, nil
}

// Engine is the engine behind the sessions.
func (h *Hosts) Engine() *Engine { return h.e }

// Open starts session id (a fresh one; an open id is an error).
func (h *Hosts) Open(id SessionID) error {
	if _, ok := h.sessions[id]; ok {
		return fmt.Errorf("coherence: session %d already open", id)
	}
	h.sessions[id] = &session{id: id, refs: map[gva.GVA]int{}, acquired: map[gva.GVA]int{},
		owedRefs: map[gva.GVA]int{}, owedAcq: map[gva.GVA]int{},
		locked: map[gva.GVA]bool{}, reqs: map[uint64]*hostReq{}}
	return nil
}

// Known reports whether session id is open, or closed and still giving
// back what it held.
func (h *Hosts) Known(id SessionID) bool { _, ok := h.sessions[id]; return ok }

// Held reports what session id holds: engine refs, acquisitions, locks.
func (h *Hosts) Held(id SessionID) (refs, acquired, locks int) {
	s := h.sessions[id]
	if s == nil {
		return 0, 0, 0
	}
	for _, n := range s.refs {
		refs += n
	}
	for _, n := range s.acquired {
		acquired += n
	}
	return refs, acquired, len(s.locked)
}

// Charged reports, for checkers, the pages allocated here and not freed,
// per allocating user: what the node's page quota must be charged.
func (h *Hosts) Charged() map[uint32]int {
	m := map[uint32]int{}
	for _, a := range h.attrs {
		m[a.UID]++
	}
	for _, uid := range h.pulled {
		m[uid]++
	}
	return m
}

// EachPulled calls fn, for checkers, with every page homed elsewhere that
// is charged here to the user whose acquire or lock brought it.
func (h *Hosts) EachPulled(fn func(key gva.GVA, uid uint32)) {
	for k, uid := range h.pulled {
		fn(k, uid)
	}
}

// PageHeld reports, for checkers and tests, what this node's sessions hold
// of page key: their refs added up, whether one of them has acquired it,
// and whether one holds the node's lock of it.
func (h *Hosts) PageHeld(key gva.GVA) (refs int, acquired, locked bool) {
	key = key.Key()
	for _, s := range h.sessions {
		refs += s.refs[key]
		acquired = acquired || s.acquired[key] > 0
		locked = locked || s.locked[key]
	}
	return refs, acquired, locked
}

// Submit hands the session layer one request of session id; it completes
// through the sink (Completion.ID = hr.ID), possibly before Submit returns,
// within its bound: hr.Timeout, else the engine's RequestTimeout (an unref
// a little later: it may wait out a swap).
func (h *Hosts) Submit(now time.Duration, id SessionID, hr Request, rt noc.Routes) {
	h.e.rt = rt
	s := h.sessions[id]
	r := h.newReq(s, hr)
	bound := hr.Timeout
	if bound <= 0 {
		bound = h.e.cfg.RequestTimeout
	}
	r.deadline = now + bound
	if s == nil || s.closed {
		h.deliver(now, r, Completion{Err: &HostError{Op: hr.Op, GVA: hr.GVA, Errno: syscall.EBADF, Msg: "no such session"}})
		return
	}
	s.reqs[hr.ID] = r
	if hr.Timeout > 0 || !oneStep(hr.Op) {
		// A request of one engine step within the engine's own bound
		// needs no bound here: the engine completes it by then.
		r.bound = hostTimer{at: r.deadline, r: r, bound: true}
		heap.Push(&h.timers, &r.bound)
	}
	if h.admit(now, r) {
		h.start(now, r)
	}
	h.endStep(now)
}

// Abandon tells the session layer the caller of request reqID gave up: it
// completes no more, and what it takes if it succeeds later is given back.
func (h *Hosts) Abandon(now time.Duration, id SessionID, reqID uint64, rt noc.Routes) {
	h.e.rt = rt
	if s := h.sessions[id]; s != nil {
		if r := s.reqs[reqID]; r != nil {
			r.abandon = true
			delete(s.reqs, reqID)
			if r.waiting {
				h.leaveQueue(now, r) // it took nothing yet
			}
		}
	}
}

// Close ends session id: its requests are abandoned and everything it
// holds is released (locks unlocked, acquisitions released, refs dropped).
func (h *Hosts) Close(now time.Duration, id SessionID, rt noc.Routes) {
	h.e.rt = rt
	s := h.sessions[id]
	if s == nil || s.closed {
		return
	}
	s.closed = true
	for _, rid := range slices.Sorted(maps.Keys(s.reqs)) {
		r := s.reqs[rid]
		r.abandon = true
		delete(s.reqs, rid)
		if r.waiting {
			h.leaveQueue(now, r) // it took nothing yet
		}
	}
	// Counted before anything is given back, and in key order (the core
	// must replay exactly): the refs of claims go back with their release.
	locked := slices.SortedFunc(maps.Keys(s.locked), gva.Compare)
	acquired := slices.SortedFunc(maps.Keys(s.acquired), gva.Compare)
	refs := slices.SortedFunc(maps.Keys(s.refs), gva.Compare)
	// A ref or an acquisition a running request took (or gives back
	// after its release or unlock) is that request's to give back.
	drops := make([]int, len(refs))
	for i, key := range refs {
		drops[i] = s.mapRefs(key)
	}
	acqs := make([]int, len(acquired))
	for i, key := range acquired {
		acqs[i] = s.acquired[key] - s.owedAcq[key]
		if acqs[i] < 0 {
			h.e.broken(now, "session %d closes owing %d acquisitions of %v, holding %d", id, s.owedAcq[key], key, s.acquired[key])
		}
	}
	for i, key := range refs {
		if drops[i] < 0 {
			h.e.broken(now, "session %d closes holding %d refs of %v, fewer than its claims and running requests take (%d owed, %d acquired, locked %v)",
				id, s.refs[key], key, s.owedRefs[key], s.acquired[key], s.locked[key])
		}
	}
	for _, key := range locked {
		h.startRelease(now, s, HostUnlock, key)
	}
	for i, key := range acquired {
		for range acqs[i] {
			h.startRelease(now, s, HostRelease, key)
		}
	}
	for i, key := range refs {
		for range drops[i] {
			h.startDrop(now, s, key)
		}
	}
	h.endStep(now)
	h.reap(s)
}

// reap forgets a closed session once it holds nothing.
func (h *Hosts) reap(s *session) {
	if s.closed && len(s.reqs) == 0 && len(s.refs) == 0 && len(s.acquired) == 0 && len(s.locked) == 0 {
		if len(s.owedRefs) != 0 || len(s.owedAcq) != 0 {
			h.e.broken(h.e.now, "session %d ends owing refs %v, acquisitions %v that it does not hold", s.id, s.owedRefs, s.owedAcq)
		}
		delete(h.sessions, s.id)
	}
}

// Stages of compound requests.
const (
	stFirst = iota
	stSecond
	stThird
)

// start runs the first stage of r.
func (h *Hosts) start(now time.Duration, r *hostReq) {
	hr := &r.hr
	key := hr.GVA.Key()
	switch hr.Op {
	case HostAlloc:
		n := max(hr.Pages, 1)
		if n > h.e.store.Cap() {
			// refused before any per-page work: a request's cost is
			// bounded by the node's capacity, not by what it asks
			h.fail(now, r, syscall.ENOMEM, fmt.Sprintf("alloc: %d pages exceed this node's capacity of %d", n, h.e.store.Cap()))
			return
		}
		if q := h.e.cfg.Quota; q != nil {
			if err := q.Take(hr.Attr.UID, n); err != nil {
				h.fail(now, r, quotaErrno(err), fmt.Sprintf("alloc: %d pages for uid %d: %v", n, hr.Attr.UID, err))
				return
			}
		}
		r.results = make([]Completion, 0, n)
		for range n {
			h.step(now, r, Request{Op: HostAlloc, Huge: hr.Huge, Attr: hr.Attr})
		}
	case HostFree:
		if q, ok := h.freeRuns[key]; ok {
			// Another Free of the extent runs: this one starts when it
			// ends (nextFree), and finds the extent gone if it succeeded.
			// Run side by side, each could free some pages and fail on
			// the others', and neither free the extent.
			h.freeRuns[key] = append(q, r)
			return
		}
		n, ok := h.extents[key]
		if !ok {
			h.fail(now, r, syscall.ENOENT, "free: not an allocation of this node")
			return
		}
		for i := range n {
			if a, ok := h.attrs[key.PageAt(i)]; ok && hr.Cred.UID != 0 && hr.Cred.UID != a.UID {
				// Only the allocation's owner (or root) may free it.
				h.fail(now, r, syscall.EPERM, fmt.Sprintf("free: owned by uid %d", a.UID))
				return
			}
		}
		for i := range n {
			if h.locks[key.PageAt(i)] != nil {
				h.fail(now, r, syscall.EBUSY, fmt.Sprintf("free: page %v is locked on this node", key.PageAt(i)))
				return
			}
			if h.mapped(key.PageAt(i)) {
				h.fail(now, r, syscall.EBUSY, fmt.Sprintf("free: page %v is mapped on this node", key.PageAt(i)))
				return
			}
		}
		h.freeRuns[key] = nil
		h.startFree(now, r, key, n)
	case HostStat:
		a, ok := h.attrs[key]
		switch errno, why := h.absentHere(key); {
		case ok:
			h.finish(now, r, Completion{Attr: a})
		case errno != 0:
			h.fail(now, r, errno, "stat: "+why)
		default:
			// a page homed elsewhere: its home answers (attrs.go)
			h.step(now, r, Request{Op: HostStat, GVA: key})
		}
	case HostWhere:
		// Where answers only for a page that exists: one held here or on
		// this node's path cache, one allocated here, else its home says
		// (ENOENT, ESTALE) before the engine is asked for the owner's
		// distance.
		_, ok := h.attrs[key]
		_, cached := h.e.cache.Peek(key)
		switch errno, why := h.absentHere(key); {
		case ok || cached || h.e.pages[key] != nil || r.statted:
			if h.whereUnchecked(now, r, 0) {
				return
			}
			r.stage = stSecond
			h.step(now, r, hr.engineCopy())
		case errno != 0:
			h.fail(now, r, errno, "where: "+why)
		default:
			h.step(now, r, Request{Op: HostStat, GVA: key})
		}
	case HostRef:
		r.s.refs[key]++ // held from now; the request gives it back if it fails or was abandoned
		r.owe(true, false)
		h.step(now, r, Request{Op: HostRef, GVA: key})
	case HostUnref:
		if r.s.refs[key] == 0 {
			h.fail(now, r, syscall.EINVAL, "unref: the session does not hold the page")
			return
		}
		// The session stops holding the page now, and says so: the
		// engine's unref runs on by itself (retried while the page swaps,
		// within unrefBound), as a close's is. An unref answered with an
		// error after its session had let the page go would leave the host
		// believing it still maps a page whose replica no longer follows
		// the owner (dpu-sim seed 3, 16 nodes, every fault, R = 3: an unref
		// timed out during a swap, and the host's copy stayed valid four
		// versions behind).
		var v gva.Version
		if pg := h.e.pages[key]; pg != nil && pg.has {
			v = pg.version
		}
		h.startDrop(now, r.s, key)
		h.finish(now, r, Completion{Version: v})
	case HostLoad:
		if r.s.refs[key] == 0 && !h.owned(key) {
			r.drop = true
			r.s.refs[key]++
			r.owe(true, false)
			h.step(now, r, Request{Op: HostRef, GVA: key})
			return
		}
		r.stage = stSecond
		h.step(now, r, hr.engineCopy())
	case HostAcquire:
		if !h.chargePull(now, r) {
			return
		}
		r.s.acquired[key]++ // before the grant: a loss right after it is heard
		r.s.refs[key]++
		r.owe(true, true)
		h.step(now, r, Request{Op: HostRef, GVA: key})
	case HostLock:
		if !h.chargePull(now, r) {
			return
		}
		nl := h.locks[key]
		switch {
		case nl == nil:
			h.locks[key] = &nodeLock{holder: r.s, claim: r}
		case nl.holder == r.s && (r.s.locked[key] || nl.claim != nil && !nl.claim.abandon):
			// (A lock of its own that it gave up on, or is giving back,
			// it waits for like any other.)
			h.fail(now, r, syscall.EDEADLK, "lock: this session holds the lock already")
			return
		case hr.Try:
			h.fail(now, r, syscall.EBUSY, "lock: held by another session of this node")
			return
		default:
			// Its turn comes when the holder lets go (within its bound).
			r.waiting = true
			nl.waiters = append(nl.waiters, r)
			h.lockStat.Waits++
			return
		}
		h.startLock(now, r)
	case HostRelease, HostUnlock:
		if hr.Op == HostRelease {
			if r.s.acquired[key] == 0 {
				h.fail(now, r, syscall.EPERM, "release: not acquired by this session")
				return
			}
			r.s.unacquireCount(key)
			if h.acquiredBy(key) {
				// The node's claim stays for its other acquirers: the
				// engine's release waits for the last; only the claim's
				// ref goes back.
				h.startDrop(now, r.s, key)
				h.finish(now, r, Completion{})
				return
			}
		}
		if hr.Op == HostUnlock {
			if nl := h.locks[key]; nl == nil || nl.holder != r.s || !r.s.locked[key] {
				h.fail(now, r, syscall.EPERM, "unlock: not locked by this session")
				return
			}
			delete(r.s.locked, key)
		}
		r.owe(true, false) // the claim's ref: given back after the engine's release
		h.step(now, r, Request{Op: hr.Op, GVA: key, Holder: r.s.holder()})
	default:
		h.step(now, r, hr.engineCopy())
	}
}

// mapped reports whether a session of the node maps page key.
func (h *Hosts) mapped(key gva.GVA) bool {
	for _, s := range h.sessions {
		if s.mapRefs(key) > 0 {
			return true
		}
	}
	return false
}

// mapRefs is how many refs of key s holds as maps (Ref): its refs beyond
// those its acquisitions and lock hold and those its running requests
// took or give back themselves.
func (s *session) mapRefs(key gva.GVA) int {
	n := (s.refs[key] - s.owedRefs[key]) - (s.acquired[key] - s.owedAcq[key])
	if s.locked[key] {
		n--
	}
	return n
}

// acquiredBy reports whether a session of the node holds an acquisition of
// key.
func (h *Hosts) acquiredBy(key gva.GVA) bool {
	for _, s := range h.sessions {
		if s.acquired[key] > 0 {
			return true
		}
	}
	return false
}

// startLock starts the claim of a Lock whose session holds the node's lock
// of the page: ref, then the engine's lock.
func (h *Hosts) startLock(now time.Duration, r *hostReq) {
	r.s.refs[r.hr.GVA.Key()]++
	r.owe(true, false)
	h.step(now, r, Request{Op: HostRef, GVA: r.hr.GVA.Key()})
}

// letGo ends session s's hold of the node's lock of key (its unlock
// completed, its claim failed, its pin was revoked) and hands the lock to
// the first waiter. A session that has more than one Lock of the page
// waiting gets the lock once: its others fail with EDEADLK.
func (h *Hosts) letGo(now time.Duration, s *session, key gva.GVA) {
	nl := h.locks[key]
	if nl == nil || nl.holder != s {
		return
	}
	if len(nl.waiters) == 0 {
		delete(h.locks, key)
		return
	}
	w := nl.waiters[0]
	nl.waiters = slices.Delete(nl.waiters, 0, 1)
	w.waiting = false
	nl.holder, nl.claim = w.s, w
	h.lockStat.HandOffs++
	for i := 0; i < len(nl.waiters); {
		if o := nl.waiters[i]; o.s == w.s {
			nl.waiters = slices.Delete(nl.waiters, i, i+1)
			o.waiting = false
			h.fail(now, o, syscall.EDEADLK, "lock: this session holds the lock already")
			continue
		}
		i++
	}
	h.startLock(now, w)
}

// leaveQueue takes a waiting Lock out of its page's queue and ends it: its
// bound passed (the caller is told ETIMEDOUT), its caller gave up or its
// session closed (abandoned: nothing is told).
func (h *Hosts) leaveQueue(now time.Duration, r *hostReq) {
	key := r.hr.GVA.Key()
	if nl := h.locks[key]; nl != nil {
		if i := slices.Index(nl.waiters, r); i >= 0 {
			nl.waiters = slices.Delete(nl.waiters, i, i+1)
		}
	}
	r.waiting = false
	if r.abandon {
		h.lockStat.Left++
	} else {
		h.lockStat.Expired++
	}
	h.fail(now, r, syscall.ETIMEDOUT, "lock: waited its bound for another session of this node to unlock")
}

// oneStep reports whether requests of op are one engine request (start's
// default case).
func oneStep(op HostOp) bool {
	switch op {
	case HostStore, HostCAS, HostFetchAdd:
		return true
	}
	return false
}

// holder names the session as pin holder.
func (s *session) holder() uint64 { return uint64(s.id) }

// engineCopy is the request as the engine takes it.
func (hr *Request) engineCopy() Request {
	c := *hr
	c.Pages, c.Timeout, c.Attr, c.Tag = 0, 0, Attr{}, nil
	return c
}

// owned reports whether the page is owned here (a load needs no ref).
func (h *Hosts) owned(key gva.GVA) bool {
	pg := h.e.pages[key]
	return pg != nil && pg.owner
}

// unacquireCount takes one acquisition of key off s; the claim's ref is
// given back when the engine's release is done.
func (s *session) unacquireCount(key gva.GVA) { countDown(s.acquired, key) }

// unrefCount takes one ref of key off s.
func (s *session) unrefCount(key gva.GVA) { countDown(s.refs, key) }

// owe counts the ref (and the acquisition) r took, or gives back after
// its release, as r's own until it finishes.
func (r *hostReq) owe(ref, acq bool) {
	key := r.hr.GVA.Key()
	if ref && !r.owesRef {
		r.owesRef = true
		r.s.owedRefs[key]++
	}
	if acq && !r.owesAcq {
		r.owesAcq = true
		r.s.owedAcq[key]++
	}
}

// settle ends what r owed: by the time it finishes, it gave its ref and
// acquisition back, handed them to the session, or left them to an undo
// that starts now.
func (r *hostReq) settle() {
	if r.s == nil {
		return
	}
	key := r.hr.GVA.Key()
	if r.owesRef {
		countDown(r.s.owedRefs, key)
	}
	if r.owesAcq {
		countDown(r.s.owedAcq, key)
	}
	r.owesRef, r.owesAcq = false, false
}

// countDown takes one off m[key], forgetting the key at zero.
func countDown(m map[gva.GVA]int, key gva.GVA) {
	if m[key]--; m[key] <= 0 {
		delete(m, key)
	}
}

// step submits one engine request on behalf of r.
func (h *Hosts) step(now time.Duration, r *hostReq, er Request) {
	h.nextStep++
	er.ID = h.nextStep
	er.Cred = r.hr.Cred
	h.steps[er.ID] = r
	r.pending++
	h.e.Submit(now, er, h.e.rt)
}

// engineSink receives the engine's completions and events.
type engineSinkOf Hosts

func (h *Hosts) engineSink() Sink { return (*engineSinkOf)(h) }

// Complete implements Sink: engine completions wait for the end of the step.
func (s *engineSinkOf) Complete(c Completion) {
	h := (*Hosts)(s)
	r := h.steps[c.ID]
	if r == nil {
		return
	}
	delete(h.steps, c.ID)
	if c.Data != nil {
		c.Data = append([]byte(nil), c.Data...)
	}
	h.ready = append(h.ready, readyStep{r: r, c: c})
}

// Event implements Sink.
func (s *engineSinkOf) Event(ev Event) {
	h := (*Hosts)(s)
	key := ev.GVA.Key()
	switch ev.Kind {
	case EventHostFault:
		// The pin outlived its bound: the lock is no longer the session's,
		// and the ref its claim took goes back (at the end of the step,
		// where the node's lock passes to the next waiter).
		ev.Session = SessionID(ev.Holder)
		if ss := h.sessions[ev.Session]; ss != nil && ss.locked[key] {
			delete(ss.locked, key)
			h.revoked = append(h.revoked, revokedPin{s: ss, key: key})
		}
	case EventOwnershipLost:
		h.pullGone(key)
		// Told to every session that acquired the page, in session order
		// (the core replays exactly).
		var heard []SessionID
		for id, ss := range h.sessions {
			if ss.acquired[key] > 0 {
				heard = append(heard, id)
				// The acquisitions it had are gone; those of its acquires
				// still running are theirs to keep or give back when they
				// end (Close counts on it).
				if n := ss.owedAcq[key]; n > 0 {
					ss.acquired[key] = n
				} else {
					delete(ss.acquired, key)
				}
			}
		}
		slices.Sort(heard)
		for _, id := range heard {
			ev.Session = id
			h.sink.Event(ev)
		}
		return
	}
	h.sink.Event(ev)
}

// endStep acts on the step's engine completions (which may start more
// engine requests, whose completions join the list) and fires due timers.
func (h *Hosts) endStep(now time.Duration) {
	// Indexed, not re-sliced: acting on one may append more, and the
	// lists keep their capacity from step to step.
	ri, vi := 0, 0
	for ri < len(h.ready) || vi < len(h.revoked) {
		if vi < len(h.revoked) {
			rp := h.revoked[vi]
			vi++
			h.startDrop(now, rp.s, rp.key)
			h.letGo(now, rp.s, rp.key)
			continue
		}
		rs := h.ready[ri]
		h.ready[ri] = readyStep{}
		ri++
		h.advance(now, rs.r, rs.c)
	}
	clear(h.revoked)
	h.ready = h.ready[:0]
	h.revoked = h.revoked[:0]
}

// retryable reports whether a claim step failed for a reason that a later
// attempt may not meet.
func retryable(errno syscall.Errno) bool {
	return errno == syscall.EBUSY || errno == syscall.EAGAIN || errno == syscall.ETIMEDOUT
}

// advance moves r on after one of its engine requests completed.
func (h *Hosts) advance(now time.Duration, r *hostReq, c Completion) {
	r.pending--
	if r.admitting {
		h.admitted(now, r, c)
		return
	}
	hr := &r.hr
	key := hr.GVA.Key()
	errno := c.Errno()
	if errno != 0 {
		r.lastErr = errno
	}
	switch hr.Op {
	case HostAlloc:
		r.results = append(r.results, c)
		if r.pending > 0 {
			return
		}
		h.allocDone(now, r)
	case HostFree:
		h.freeStep(now, r, c)
	case HostWhere:
		if r.stage == stFirst {
			switch errno {
			case syscall.ENOENT, syscall.ESTALE, syscall.EFAULT, syscall.EACCES:
				// The home's word: no such page (or not this user's to see).
				h.fail(now, r, errno, "where: "+errMsg(c.Err))
				return
			}
			// 0, or the home could not say (it is down, or restarting):
			// the owner may live on elsewhere (a backup took the page
			// over), so where names what this node knows of it, to a
			// user this node can check.
			if h.whereUnchecked(now, r, errno) {
				return
			}
			r.stage = stSecond
			h.step(now, r, hr.engineCopy())
			return
		}
		h.finish(now, r, c)
	case HostRef:
		if r.stage == stFirst {
			if errno != 0 {
				r.s.unrefCount(key)
				h.finish(now, r, c)
				return
			}
			r.stage = stSecond
			h.step(now, r, Request{Op: HostLoad, GVA: key, Len: gva.PageSize})
			return
		}
		if errno != 0 {
			h.startDrop(now, r.s, key)
		}
		h.finish(now, r, c)
	case HostUnref:
		if errno == syscall.EBUSY && now < r.deadline+unrefBound {
			h.retryLater(now, r, Request{Op: HostUnref, GVA: key})
			return
		}
		h.finish(now, r, c)
	case HostLoad:
		if r.stage == stFirst {
			if errno != 0 {
				r.s.unrefCount(key)
				h.finish(now, r, c)
				return
			}
			r.stage = stSecond
			h.step(now, r, hr.engineCopy())
			return
		}
		if r.drop {
			h.startDrop(now, r.s, key)
		}
		h.finish(now, r, c)
	case HostAcquire, HostLock:
		if errno != 0 {
			if retryable(errno) && now+claimPause < r.deadline && !r.abandon {
				er := Request{Op: HostRef, GVA: key}
				if r.stage == stSecond {
					er = Request{Op: hr.Op, GVA: key, Holder: r.s.holder(), Priority: hr.Priority}
				}
				h.retryLater(now, r, er)
				return
			}
			if hr.Op == HostAcquire {
				r.s.unacquireCount(key)
			}
			if r.stage == stFirst {
				r.s.unrefCount(key)
			} else {
				h.startDrop(now, r.s, key)
			}
			if hr.Op == HostLock {
				h.letGo(now, r.s, key)
			}
			h.finish(now, r, c)
			return
		}
		if r.stage == stFirst {
			r.stage = stSecond
			h.step(now, r, Request{Op: hr.Op, GVA: key, Holder: r.s.holder(), Priority: hr.Priority})
			return
		}
		if hr.Op == HostLock {
			r.s.locked[key] = true
			if nl := h.locks[key]; nl != nil && nl.claim == r {
				nl.claim = nil
			}
		}
		h.finish(now, r, c)
	case HostRelease, HostUnlock:
		// The claim's ref goes back after a release; one run for Close or
		// an undo gives it back whatever the engine said.
		if errno == 0 || r.abandon {
			h.startDrop(now, r.s, key)
		}
		if hr.Op == HostUnlock {
			h.letGo(now, r.s, key) // whatever the engine said: the pin is not this session's now
		}
		h.finish(now, r, c)
	default:
		h.finish(now, r, c)
	}
}

// allocDone ends an Alloc: all pages consecutive, or all freed again.
func (h *Hosts) allocDone(now time.Duration, r *hostReq) {
	var failed error
	for i, c := range r.results {
		if c.Err != nil {
			failed = c.Err
		} else if i > 0 && c.GVA.Page() != r.results[0].GVA.Page()+gva.PageNumber(i) {
			failed = &HostError{Op: HostAlloc, Errno: syscall.EAGAIN, Msg: "pages not consecutive"}
		}
	}
	if failed != nil {
		for _, c := range r.results {
			if c.Err == nil {
				h.freeAlone(now, c.GVA.Key())
			}
		}
		h.uncharge(r.hr.Attr.UID, len(r.results))
		h.finish(now, r, Completion{Err: failed})
		return
	}
	first := r.results[0].GVA.Key()
	for _, c := range r.results {
		h.attrs[c.GVA.Key()] = r.hr.Attr
	}
	h.extents[first] = len(r.results)
	h.finish(now, r, Completion{GVA: first})
}

// freeAlone frees page key in the engine on its own: nobody waits for it
// (an Alloc that failed or was abandoned gives its pages back).
func (h *Hosts) freeAlone(now time.Duration, key gva.GVA) {
	h.nextStep++
	h.e.Submit(now, Request{ID: h.nextStep, Op: HostFree, GVA: key}, h.e.rt)
}

// quotaErrno is the errno a refusal of the page quota carries (EDQUOT
// when it names none).
func quotaErrno(err error) syscall.Errno {
	errno := syscall.EDQUOT
	errors.As(err, &errno)
	return errno
}

// uncharge gives n pages of uid back to the node's page quota.
func (h *Hosts) uncharge(uid uint32, n int) {
	if q := h.e.cfg.Quota; q != nil && n > 0 {
		q.Release(uid, n)
	}
}

// unalloc frees the extent an abandoned Alloc made (its caller gave up):
// its pages go, and their charge with them.
func (h *Hosts) unalloc(now time.Duration, first gva.GVA, uid uint32) {
	n := h.extents[first]
	for i := range n {
		k := first.PageAt(i)
		delete(h.attrs, k)
		h.freeAlone(now, k)
	}
	delete(h.extents, first)
	h.uncharge(uid, n)
}

// startDrop gives one engine ref of key back, on its own (nobody waits).
func (h *Hosts) startDrop(now time.Duration, s *session, key gva.GVA) {
	h.startRelease(now, s, HostUnref, key)
}

// startRelease runs an undo or a Close's release as a request of its own:
// unlock, release or unref of key, then (unlock, release) the unref.
func (h *Hosts) startRelease(now time.Duration, s *session, op HostOp, key gva.GVA) {
	r := h.newReq(s, Request{Op: op, GVA: key})
	r.abandon, r.deadline = true, now+h.e.cfg.RequestTimeout
	switch op {
	case HostUnref:
		s.unrefCount(key)
		h.step(now, r, Request{Op: HostUnref, GVA: key})
	case HostUnlock:
		delete(s.locked, key)
		r.owe(true, false)
		h.step(now, r, Request{Op: HostUnlock, GVA: key, Holder: r.s.holder()})
	case HostRelease:
		s.unacquireCount(key)
		r.owe(true, false)
		h.step(now, r, Request{Op: HostRelease, GVA: key, Holder: r.s.holder()})
	}
}

// undo gives back what an abandoned request took by succeeding.
func (h *Hosts) undo(now time.Duration, r *hostReq, c Completion) {
	key := r.hr.GVA.Key()
	switch r.hr.Op {
	case HostAlloc:
		h.unalloc(now, c.GVA.Key(), r.hr.Attr.UID)
	case HostRef:
		h.startDrop(now, r.s, key)
	case HostLock:
		h.startRelease(now, r.s, HostUnlock, key)
	case HostAcquire:
		h.startRelease(now, r.s, HostRelease, key)
	}
}

func (h *Hosts) fail(now time.Duration, r *hostReq, errno syscall.Errno, msg string) {
	h.finish(now, r, Completion{Err: &HostError{Op: r.hr.Op, GVA: r.hr.GVA, Errno: errno, Msg: msg}})
}

// finish ends r: it completes to the host, or (abandoned) undoes a
// success and completes nothing.
func (h *Hosts) finish(now time.Duration, r *hostReq, c Completion) {
	if r.done {
		return
	}
	r.done = true
	r.settle()
	if r.pulls {
		h.settlePull(r, c.Err == nil)
	}
	if r.bound.idx >= 0 {
		heap.Remove(&h.timers, r.bound.idx)
	}
	if r.abandon {
		if c.Err == nil && r.hr.ID != 0 {
			h.undo(now, r, c)
		}
		h.reap(r.s)
		h.recycle(r)
		return
	}
	delete(r.s.reqs, r.hr.ID)
	h.deliver(now, r, c)
	h.reap(r.s)
	h.recycle(r)
}

// newReq returns a request of session s (nil: none) for hr, reusing a
// finished one.
func (h *Hosts) newReq(s *session, hr Request) *hostReq {
	var r *hostReq
	if n := len(h.free); n > 0 {
		r, h.free = h.free[n-1], h.free[:n-1]
	} else {
		r = &hostReq{}
	}
	r.s, r.hr, r.bound = s, hr, hostTimer{idx: -1}
	return r
}

// recycle keeps a finished request for reuse once nothing refers to it:
// no engine request or retry pause outstanding (pending counts both), out
// of its session's requests and out of the timer heap (finish saw to
// those).
func (h *Hosts) recycle(r *hostReq) {
	if r.pending != 0 || len(h.free) >= 256 {
		return
	}
	*r = hostReq{}
	h.free = append(h.free, r)
}

func (h *Hosts) deliver(now time.Duration, r *hostReq, c Completion) {
	c.ID, c.Op, c.At, c.Tag = r.hr.ID, r.hr.Op, now, r.hr.Tag
	if c.GVA.IsZero() {
		c.GVA = r.hr.GVA
	}
	h.sink.Complete(c)
}

// expire answers a request still running at its bound with ETIMEDOUT (or
// EHOSTDOWN after an unreachable owner); it runs on as abandoned, so what
// it takes by succeeding later is given back.
func (h *Hosts) expire(now time.Duration, r *hostReq) {
	if r.done || r.abandon {
		return
	}
	if r.waiting {
		h.leaveQueue(now, r)
		return
	}
	r.abandon = true
	delete(r.s.reqs, r.hr.ID)
	errno, msg := syscall.ETIMEDOUT, "no answer within the request's bound"
	if r.lastErr == syscall.EHOSTDOWN || r.lastErr == syscall.EHOSTUNREACH {
		errno, msg = syscall.EHOSTDOWN, "owner unreachable until the request's bound"
	}
	h.deliver(now, r, Completion{Err: &HostError{Op: r.hr.Op, GVA: r.hr.GVA, Errno: errno, Msg: msg}})
}

// retryLater re-submits er for r after claimPause.
func (h *Hosts) retryLater(now time.Duration, r *hostReq, er Request) {
	r.pending++ // the retry is outstanding
	heap.Push(&h.timers, &hostTimer{at: now + claimPause, r: r, req: er})
}

// HandleFrame implements node.Handler.
func (h *Hosts) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes) {
	h.e.HandleFrame(now, in, f, rt)
	h.endStep(now)
}

// PortState implements node.Handler.
func (h *Hosts) PortState(now time.Duration, p noc.PortID, up bool, nb noc.NodeID, rt noc.Routes) {
	h.e.PortState(now, p, up, nb, rt)
	h.endStep(now)
}

// Tick implements node.Handler: the engine's timers, then the session
// layer's retries.
func (h *Hosts) Tick(now time.Duration, rt noc.Routes) {
	h.e.Tick(now, rt)
	h.endStep(now)
	for h.timers.Len() > 0 && h.timers[0].at <= now {
		t := heap.Pop(&h.timers).(*hostTimer)
		if t.bound {
			h.expire(now, t.r)
			continue
		}
		t.r.pending--
		if t.r.done {
			continue
		}
		h.step(now, t.r, t.req)
		h.endStep(now)
	}
}

// TakeOutgoing implements node.Handler: the engine's outbox.
func (h *Hosts) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing { return h.e.TakeOutgoing(dst) }

// NextDeadline implements node.Handler.
func (h *Hosts) NextDeadline() (time.Duration, bool) {
	at, ok := h.e.NextDeadline()
	if h.timers.Len() > 0 && (!ok || h.timers[0].at < at) {
		return h.timers[0].at, true
	}
	return at, ok
}

// hostTimer is a pause before a retry.
type hostTimer struct {
	at    time.Duration
	r     *hostReq
	req   Request
	bound bool // the request's bound, not a retry
	idx   int  // its index in the heap; -1 when out of it
}

// hostTimers is a heap of timers that know their index, so that a finished
// request's bound leaves the heap at once: lazily deleted bounds would
// pile up (a request bound of seconds times tens of thousands of requests
// a second) and wake the loop at each stale deadline.
type hostTimers []*hostTimer

func (t hostTimers) Len() int           { return len(t) }
func (t hostTimers) Less(i, j int) bool { return t[i].at < t[j].at }
func (t hostTimers) Swap(i, j int) {
	t[i], t[j] = t[j], t[i]
	t[i].idx, t[j].idx = i, j
}
func (t *hostTimers) Push(x any) {
	ht := x.(*hostTimer)
	ht.idx = len(*t)
	*t = append(*t, ht)
}
func (t *hostTimers) Pop() any {
	old := *t
	x := old[len(old)-1]
	old[len(old)-1] = nil
	x.idx = -1
	*t = old[:len(old)-1]
	return x
}

// absentHere says why a page homed on this node that it has no allocation
// record of is not there: a page of an earlier run of this node (ESTALE),
// or no such page (ENOENT); 0 for a page homed elsewhere (its home says).
func (h *Hosts) absentHere(key gva.GVA) (syscall.Errno, string) {
	switch {
	case key.Machine() != gva.MachineIndex(h.e.self):
		return 0, ""
	case h.e.staleAtHome(key):
		return syscall.ESTALE, "a page of an earlier run of this node"
	default:
		return syscall.ENOENT, "no such page"
	}
}

// freePage is a page of an extent being freed: one owned here is freed;
// one owned elsewhere (a lock or an acquire moved it) is taken back
// first, with a ref and an acquire, within the Free's bound.
type freePage struct {
	key  gva.GVA
	step HostOp // the engine request it waits for: HostRef, HostAcquire, HostFree; 0: ended
	took bool   // the Free took a ref of it (counted in the session's owedRefs)
	refd bool   // that ref is held (the engine's HostRef succeeded)
}

// startFree starts the Free of the extent at key (n pages): every page not
// freed yet (a Free that ran out of time keeps the extent and the pages it
// did not free), each on its own way.
func (h *Hosts) startFree(now time.Duration, r *hostReq, key gva.GVA, n int) {
	r.freeing = r.freeing[:0]
	for i := range n {
		if _, ok := h.attrs[key.PageAt(i)]; ok {
			r.freeing = append(r.freeing, freePage{key: key.PageAt(i)})
		}
	}
	for i := range r.freeing {
		p := &r.freeing[i]
		if pg := h.e.pages[p.key]; pg != nil && pg.owner || bugsCompiled && h.e.cfg.Bug == BugFreeHere {
			h.freeNext(now, r, p, HostFree)
		} else {
			h.freeNext(now, r, p, HostRef)
		}
	}
	if r.pending == 0 {
		h.endFree(now, r)
	}
}

// freeNext sends page p of a Free on to its next engine request.
func (h *Hosts) freeNext(now time.Duration, r *hostReq, p *freePage, op HostOp) {
	if op == HostRef && !p.took {
		p.took = true
		r.s.refs[p.key]++ // the Free's own: given back when it ends
		r.s.owedRefs[p.key]++
	}
	p.step = op
	h.step(now, r, r.freeRequest(p))
}

// freeRequest is the engine request page p of Free r waits for.
func (r *hostReq) freeRequest(p *freePage) Request {
	er := Request{Op: p.step, GVA: p.key}
	if p.step == HostAcquire {
		er.Holder = r.s.holder()
	}
	return er
}

// freeStep moves page c.GVA of a Free on after its engine request
// completed; the Free ends when every page did.
func (h *Hosts) freeStep(now time.Duration, r *hostReq, c Completion) {
	var p *freePage
	for i := range r.freeing {
		if r.freeing[i].key == c.GVA.Key() && r.freeing[i].step != 0 {
			p = &r.freeing[i]
			break
		}
	}
	if p == nil {
		return
	}
	errno := c.Errno()
	again := !r.abandon && now+claimPause < r.deadline
	switch {
	case errno == 0 && p.step == HostRef:
		p.refd = true
		h.freeNext(now, r, p, HostAcquire)
	case errno == 0 && p.step == HostAcquire:
		h.freeNext(now, r, p, HostFree)
	case errno == 0:
		p.step = 0 // freed
		if a, ok := h.attrs[p.key]; ok && !(bugsCompiled && h.e.cfg.Bug == BugQuotaLeak) {
			h.uncharge(a.UID, 1)
		}
		delete(h.attrs, p.key)
	case again && p.step == HostFree && errno == syscall.EINVAL && !(bugsCompiled && h.e.cfg.Bug == BugFreeHere):
		// It moved away after all (an acquire elsewhere won): taken back.
		if p.refd {
			h.freeNext(now, r, p, HostAcquire)
		} else {
			h.freeNext(now, r, p, HostRef)
		}
	case p.step == HostFree && errno == syscall.EINVAL && !r.abandon && !(bugsCompiled && h.e.cfg.Bug == BugFreeHere):
		// Taken back and moved away again until the bound ran out: the
		// page is still this node's allocation to free, not one it may
		// not (dpu-sim seed 63, 13 nodes, line, every fault, R = 3, had
		// the allocator told EINVAL). The extent is kept; the caller may
		// free it again.
		p.step = 0
		if r.err == nil {
			r.err = &HostError{Op: HostFree, GVA: r.hr.GVA, Errno: syscall.ETIMEDOUT,
				Msg: fmt.Sprintf("page %v moved away again each time it was taken back, until the free's bound ran out", p.key)}
		}
	case again && p.step != HostRef && retryable(errno):
		// Locked, or being handed over: asked again within the bound.
		h.retryLater(now, r, r.freeRequest(p))
	default:
		p.step = 0
		if r.err == nil {
			r.err = &HostError{Op: HostFree, GVA: r.hr.GVA, Errno: errno, Msg: fmt.Sprintf("page %v: %s", p.key, errMsg(c.Err))}
		}
	}
	if r.pending == 0 {
		h.endFree(now, r)
	}
}

// endFree ends a Free whose pages all ended: the refs it took go back (a
// freed page's went with it); the extent is forgotten once every page of
// it is freed.
func (h *Hosts) endFree(now time.Duration, r *hostReq) {
	key := r.hr.GVA.Key()
	for _, p := range r.freeing {
		if !p.took {
			continue
		}
		countDown(r.s.owedRefs, p.key)
		if p.refd && h.e.pages[p.key] != nil {
			h.startDrop(now, r.s, p.key)
		} else {
			r.s.unrefCount(p.key)
		}
	}
	r.freeing = r.freeing[:0]
	if r.err == nil {
		delete(h.extents, key)
	}
	h.finish(now, r, Completion{Err: r.err})
	h.nextFree(now, key)
}

// nextFree starts the first Free of the extent at key that waited for
// the one that ended, if any is still wanted.
func (h *Hosts) nextFree(now time.Duration, key gva.GVA) {
	q := h.freeRuns[key]
	delete(h.freeRuns, key)
	for len(q) > 0 {
		r := q[0]
		q = q[1:]
		if r.done || r.abandon {
			continue
		}
		h.start(now, r)
		if _, running := h.freeRuns[key]; running {
			h.freeRuns[key] = append(h.freeRuns[key], q...) // the rest wait for r
			return
		} // else r ended at once: the next goes on
	}
}

// errMsg is the text of an engine error without its op and page (the
// request that reports it names them).
func errMsg(err error) string {
	var he *HostError
	if errors.As(err, &he) {
		if he.Msg != "" {
			return he.Msg
		}
		return he.Errno.Error()
	}
	return err.Error()
}
