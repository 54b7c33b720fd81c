package coherence

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// HostOp is an operation a host asks its DPU for.
type HostOp uint8

// Host operations.
const (
	HostAlloc    HostOp = iota + 1 // allocate a page owned (and homed) here
	HostFree                       // free a page owned here
	HostRef                        // map: ref the page, get a replica
	HostUnref                      // unmap: drop the host's replica
	HostLoad                       // read 1..PageSize bytes of a mapped page
	HostStore                      // write 1..PageSize bytes through to the owner
	HostCAS                        // 64-bit compare-and-swap at the owner
	HostFetchAdd                   // 64-bit fetch-and-add at the owner
	HostAcquire                    // take ownership of a mapped page
	HostRelease                    // end the caller's claim (unpins if it holds the pin)
	HostLock                       // acquire + pin
	HostUnlock                     // unpin
	HostWhere                      // location tier and hops of a page
	numHostOps
)

var hostOpNames = [...]string{"", "alloc", "free", "ref", "unref", "load", "store", "cas", "fetch-add", "acquire", "release", "lock", "unlock", "where", "stat"}

func (o HostOp) String() string {
	if o > 0 && int(o) < len(hostOpNames) {
		return hostOpNames[o]
	}
	return fmt.Sprintf("hostop(%d)", uint8(o))
}

// writes reports whether o is a write or an atomic: a request the owner
// applies, sent (and re-sent) as its own frame (hostWrite, resend.go).
func (o HostOp) writes() bool {
	return o == HostStore || o == HostCAS || o == HostFetchAdd
}

// Request is one host request. GVA carries the byte offset for loads,
// stores and atomics (8-byte aligned for atomics).
type Request struct {
	ID  uint64 // the host's request id, echoed in the Completion
	Op  HostOp
	GVA gva.GVA
	// Huge asks HostAlloc for a 2 MiB page (flag carried; 4 KiB of content
	// in the memory tier).
	Huge bool
	// Len is the number of bytes HostLoad reads.
	Len int
	// Data is what HostStore writes; the engine copies it.
	Data []byte
	// Expected and Operand: CAS compares with Expected and stores Operand;
	// fetch-add adds Operand. 64-bit values are little endian in the page.
	Expected, Operand uint64
	// Holder names the pin holder for lock, unlock and release.
	Holder uint64
	// Priority is the arbitration priority of acquire and lock.
	Priority uint8

	// For the session layer (Hosts): Pages and Attr of an alloc, the
	// request's bound (zero: the engine's RequestTimeout), and Try: a lock
	// that another session of this node holds fails with EBUSY at once
	// instead of waiting its turn.
	Pages   int
	Attr    Attr
	Timeout time.Duration
	Try     bool
	// Cred is the user the request is made for, as this node vouches; the
	// nodes that serve it check it against the page's attributes
	// (cred.go). The zero Cred is root.
	Cred Cred
	// Tag is the caller's, echoed in the Completion and never read by the
	// core (the host interface's task, so that it finds the request a
	// completion ends without a table of its own).
	Tag any
}

// Location answers HostWhere.
type Location struct {
	Tier  gva.Tier
	Speed gva.Speed
	Hops  int        // DPU hops to the owner (0: owned here)
	Owner noc.NodeID // the owner as last known here
}

// Completion ends a host request: Err is nil or a *HostError.
type Completion struct {
	ID      uint64
	Op      HostOp
	Err     error
	GVA     gva.GVA     // HostAlloc: the new page
	Data    []byte      // HostLoad: valid only during Sink.Complete
	Value   uint64      // HostCAS, HostFetchAdd: the previous value
	Swapped bool        // HostCAS: the swap happened
	Version gva.Version // the page version the operation produced or saw
	Where   Location
	Attr    Attr // HostStat
	At      time.Duration
	Tag     any // the Request's
}

// Errno returns the completion's errno (0 on success).
func (c *Completion) Errno() syscall.Errno {
	if c.Err == nil {
		return 0 // first: errors.As's target escapes, and success is the common case
	}
	var he *HostError
	if errors.As(c.Err, &he) {
		return he.Errno
	}
	return syscall.EIO
}

// HostError is an errno-style failure of a host request. It unwraps to its
// syscall.Errno, so errors.Is(err, syscall.EHOSTDOWN) works.
type HostError struct {
	Op    HostOp
	GVA   gva.GVA
	Errno syscall.Errno
	Msg   string
}

func (e *HostError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%v %v: %v: %s", e.Op, e.GVA, e.Errno, e.Msg)
	}
	return fmt.Sprintf("%v %v: %v", e.Op, e.GVA, e.Errno)
}

// Unwrap returns the errno.
func (e *HostError) Unwrap() error { return e.Errno }

// EventKind says what an Event reports.
type EventKind uint8

// Events for the host.
const (
	// EventInvalidated: a replica the host maps became invalid (a large
	// write, or its path to the owner was cut); the next load re-fetches.
	EventInvalidated EventKind = iota + 1
	// EventHostFault: a pin outlived its bound; it was revoked.
	EventHostFault
	// EventOwnershipLost: a page owned here moved to another node.
	EventOwnershipLost
	// EventUpdated: a write-update reached a replica the host maps and was
	// applied to it; Offset and Data are what it wrote (the version before
	// it was Version-1).
	EventUpdated
)

var eventNames = [...]string{"", "invalidated", "host-fault", "ownership-lost", "updated"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is something the host is told without asking.
type Event struct {
	Kind    EventKind
	GVA     gva.GVA
	Version gva.Version
	Holder  uint64              // EventHostFault
	Fault   arbiter.FaultReport // EventHostFault
	// Session is the host session the event concerns (set by Hosts):
	// EventHostFault, the session whose lock was revoked; EventOwnershipLost,
	// one event per session that acquired the page.
	Session SessionID
	At      time.Duration
	// EventUpdated: where in the page the write went and its bytes (valid
	// during the Sink's Event call: a sink that keeps them copies them).
	Offset int
	Data   []byte
	// Lost (EventInvalidated): the replica left the page's tree (cut
	// from the owner, evicted, fenced): no later version will reach it,
	// so a host's copy is stale even at the version it holds.
	Lost bool
}

// Sink receives completions and events, as values, from inside the
// engine's calls. It must not call back into the engine and must copy
// Completion.Data if it keeps it.
type Sink interface {
	Complete(c Completion)
	Event(ev Event)
}

// request is a host request in flight.
type request struct {
	id       uint64 // wire request id (unique per incarnation)
	hr       Request
	data     []byte // owned copy of hr.Data
	key      gva.GVA
	min      gva.Version // loads and refs: content version needed
	start    time.Duration
	deadline arbiter.TimerID
	retry    arbiter.TimerID
	attempts int
	losses   uint16
	lastErr  syscall.Errno
	waiting  bool // in its page's waiters
	// writes and atomics (resend.go): live counts the copies sent and not
	// answered with an error; resends the re-sends so far; resendArmed: the
	// retry timer is a re-send; unknown: an owner answered "outcome
	// unknown"; lastSent: when a copy last left.
	live        int
	resends     int
	resendArmed bool
	unknown     bool
	lastSent    time.Duration
	// orphaned: copies went to an owner that failed (not counted in live,
	// never answered); every later copy is marked re-sent.
	orphaned bool
	mapped   bool // HostRef: the page's map count includes this request
	placed   bool // a placement acquire (placement.go): no host asked, nothing completes
}

// Submit hands the engine one host request. It completes through the Sink,
// possibly before Submit returns, and always within Config.RequestTimeout.
// Like every Engine method it must be called from the goroutine that
// drives the node core (out is that core), never concurrently.
func (e *Engine) Submit(now time.Duration, hr Request, rt noc.Routes) {
	e.rt = rt
	e.stats.HostRequests++
	e.begin(now)
	defer e.endStep(now)
	r := &request{hr: hr, key: hr.GVA.Key(), start: now}
	switch hr.Op {
	case HostAlloc:
		e.alloc(now, r)
		return
	case HostFree:
		e.free(now, r)
		return
	case HostWhere:
		e.where(now, r)
		return
	case HostLoad:
		if hr.Len <= 0 || int(hr.GVA.Offset())+hr.Len > gva.PageSize {
			e.completeErr(now, r, syscall.EINVAL, "load length out of the page")
			return
		}
	case HostStore:
		if len(hr.Data) == 0 || int(hr.GVA.Offset())+len(hr.Data) > gva.PageSize {
			e.completeErr(now, r, syscall.EINVAL, "store length out of the page")
			return
		}
		r.data = append([]byte(nil), hr.Data...)
	case HostCAS, HostFetchAdd:
		if hr.GVA.Offset()%8 != 0 {
			e.completeErr(now, r, syscall.EINVAL, "atomic address not 8-byte aligned")
			return
		}
	case HostRef, HostUnref, HostAcquire, HostRelease, HostLock, HostUnlock, HostStat:
	default:
		e.completeErr(now, r, syscall.EINVAL, "unknown operation")
		return
	}
	if !e.localAllowed(r) {
		e.stats.RefusedLocal++
		e.completeErr(now, r, syscall.EACCES, "refused by the page's attributes")
		return
	}
	e.track(now, r)
	e.start(now, r)
}

// track makes r a request in flight: an id, and a deadline at the
// request's bound.
func (e *Engine) track(now time.Duration, r *request) {
	e.nextReq++
	r.id = e.inc<<40 | e.nextReq&(1<<40-1)
	e.reqs[r.id] = r
	r.deadline = e.schedule(now+e.cfg.RequestTimeout, timer{kind: tDeadline, id: r.id})
}

// start runs (or re-runs, after a retryable failure) a request. A re-run
// is checked again against the page's attributes: the node may have
// learned them since Submit (it took the page, or joined its tree), and
// would otherwise serve its own user unchecked (requests from
// noc.LocalPort are not checked on the way up).
func (e *Engine) start(now time.Duration, r *request) {
	if r.attempts > 0 && !e.localAllowed(r) {
		e.stats.RefusedLocal++
		e.completeErr(now, r, syscall.EACCES, "refused by the page's attributes")
		return
	}
	r.attempts++
	switch r.hr.Op {
	case HostRef:
		e.hostRef(now, r)
	case HostUnref:
		e.hostUnref(now, r)
	case HostLoad:
		e.hostLoad(now, r)
	case HostStore, HostCAS, HostFetchAdd:
		e.hostWrite(now, r)
	case HostAcquire, HostLock:
		e.hostAcquire(now, r)
	case HostRelease, HostUnlock:
		e.hostUnlock(now, r)
	case HostStat:
		e.hostStat(now, r)
	}
}

// retry re-runs a request after a retryable failure.
func (e *Engine) retry(now time.Duration, r *request) {
	e.stats.Retries++
	if r.resendArmed {
		r.resendArmed = false
		r.resends++
		e.stats.Resends++
	}
	e.start(now, r)
}

// retryLater schedules the next attempt with backoff.
func (e *Engine) retryLater(now time.Duration, r *request, errno syscall.Errno) {
	if errno != 0 {
		r.lastErr = errno
	}
	e.cancel(r.retry)
	r.resendArmed = false
	d := e.cfg.RetryInterval / 4 << min(r.attempts, 5)
	d = min(d, 8*e.cfg.RetryInterval)
	r.retry = e.schedule(now+e.jitter(d), timer{kind: tRetry, id: r.id})
}

// expire ends a request at its deadline.
func (e *Engine) expire(now time.Duration, r *request) {
	if r.hr.Op == HostFree {
		e.abortFreeing(now, r)
	}
	if r.live > 0 || r.orphaned {
		// A copy of the write or atomic is unanswered: it may have been
		// applied (resend.go).
		e.completeErr(now, r, syscall.ETIMEDOUT, "no answer within the request's bound: outcome unknown")
		return
	}
	switch r.lastErr {
	case syscall.EHOSTDOWN, syscall.EHOSTUNREACH:
		e.completeErr(now, r, syscall.EHOSTDOWN, "owner unreachable until the request's bound")
	default:
		e.completeErr(now, r, syscall.ETIMEDOUT, "no answer within the request's bound")
	}
}

// finish removes r from the in-flight set and its page's waiters.
func (e *Engine) finish(r *request) {
	e.cancel(r.deadline)
	e.cancel(r.retry)
	r.deadline, r.retry = 0, 0
	if r.id != 0 {
		delete(e.reqs, r.id)
	}
	if r.waiting {
		if pg := e.pages[r.key]; pg != nil {
			for i, w := range pg.waiters {
				if w == r {
					pg.waiters = append(pg.waiters[:i], pg.waiters[i+1:]...)
					break
				}
			}
		}
		r.waiting = false
	}
	if pg := e.pages[r.key]; pg != nil && pg.swap != nil && !pg.swap.out && pg.swap.req == r {
		pg.swap.req = nil
		if pg.swap.stage == stageAcquiring {
			pg.swap = nil
		}
	}
}

func (e *Engine) complete(now time.Duration, r *request, c Completion) {
	e.finish(r)
	if r.placed {
		return
	}
	if c.Err != nil && r.mapped {
		// A failed map leaves no mapping behind.
		if pg := e.pages[r.key]; pg != nil && pg.maps > 0 {
			pg.maps--
			if pg.maps == 0 && !pg.owner {
				e.drops = append(e.drops, r.key)
			}
		}
	}
	c.ID, c.Op, c.At, c.Tag = r.hr.ID, r.hr.Op, now, r.hr.Tag
	if c.GVA.IsZero() {
		c.GVA = r.hr.GVA
	}
	e.persist() // what the completion tells of is on disk first
	if e.durErr != nil {
		return // stopped (durable.go)
	}
	e.sink.Complete(c)
}

func (e *Engine) completeErr(now time.Duration, r *request, errno syscall.Errno, msg string) {
	e.stats.HostErrors++
	e.complete(now, r, Completion{Err: &HostError{Op: r.hr.Op, GVA: r.hr.GVA, Errno: errno, Msg: msg}})
}

func (e *Engine) event(ev Event) {
	if e.durErr != nil {
		return // stopped (durable.go)
	}
	e.sink.Event(ev)
}

// alloc creates a page owned and homed here.
func (e *Engine) alloc(now time.Duration, r *request) {
	pn, ok := e.takePage()
	if !ok {
		e.completeErr(now, r, syscall.ENOSPC, "alloc: this run's allocation space is exhausted; restart the node for a new epoch")
		return
	}
	var fl gva.Flags
	if r.hr.Huge {
		fl = gva.FlagHuge
	}
	g := gva.New(gva.MachineIndex(e.self), pn, 0, fl)
	key := g.Key()
	content, err := e.store.Alloc(key, r.hr.Huge)
	if err != nil {
		e.completeErr(now, r, syscall.ENOMEM, err.Error())
		return
	}
	ent, _, evs, err := e.cache.Upsert(key, now)
	if err != nil {
		e.store.Release(key)
		e.completeErr(now, r, syscall.ENOMEM, err.Error())
		return
	}
	e.evictedLater(evs)
	ent.Owner, ent.Up, ent.Huge = true, noc.NoPort, r.hr.Huge
	ent.Attr, ent.HasAttr = r.hr.Attr, true
	e.pages[key] = &page{key: key, huge: r.hr.Huge, content: content, has: true, owner: true, ownerNode: e.self,
		attr: r.hr.Attr, hasAttr: true}
	e.home[key] = &homeRecord{owner: e.self, ownerInc: e.inc}
	e.home[key].recordAttr(r.hr.Attr)
	e.durMark(key)
	e.durHomeMark(key)
	e.arb.Own(key)
	e.startReplication(now, e.pages[key])
	e.stats.Allocs++
	e.complete(now, r, Completion{GVA: g})
}

// free drops a page owned here: its subtree is detached, its home told.
func (e *Engine) free(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if pg == nil || !pg.owner {
		e.completeErr(now, r, syscall.EINVAL, "free: page not owned here")
		return
	}
	if pg.swap != nil {
		e.completeErr(now, r, syscall.EBUSY, "free: page is swapping")
		return
	}
	if pg.rep != nil {
		// Replicated: the free is a write too. Its backups drop their
		// copies, and confirm it, before it takes effect and is
		// acknowledged (startFreeing); until then the page takes no other
		// write. A page with a write in flight, backups to sync or
		// stand-ins to release is asked again (EBUSY).
		if pg.rep.freeing != nil || e.repBusy(pg) {
			e.completeErr(now, r, syscall.EBUSY, "free: page is replicating")
			return
		}
		if len(pg.rep.backups) > 0 {
			e.startFreeing(now, pg, r)
			return
		}
	}
	e.commitFree(now, pg, r)
}

// commitFree ends the free of pg, owned here, and acknowledges it.
func (e *Engine) commitFree(now time.Duration, pg *page, r *request) {
	if pg.rep != nil {
		pg.rep.freeing = nil
	}
	if ent, ok := e.cache.Peek(r.key); ok {
		e.detachBelow(now, ent)
		e.cache.Remove(r.key)
	}
	e.endReplication(now, pg)
	e.copyAnswers(e.arb.Disown(now, r.key))
	e.store.Release(r.key)
	delete(e.pages, r.key)
	e.durMark(r.key)
	pg.epoch++
	if h := homeOf(r.key); h == e.self {
		if rec := e.home[r.key]; rec != nil {
			rec.freed, rec.epoch = true, pg.epoch
			e.durHomeMark(r.key)
		}
	} else {
		e.notify(now, r.key, &notice{owner: noc.BroadcastNode, epoch: pg.epoch})
	}
	e.stats.Frees++
	e.complete(now, r, Completion{})
	e.processAnswers(now)
}

// where reports where a page's primary lives as seen from this node: on
// this machine (owned here) or hops DPU hops away. Whether the asking
// process maps a valid replica (gva.TierLocal) is the host interface's to
// say: it knows the process's mappings, the engine only the node's refs,
// which include the refs a lock or acquisition takes for itself.
func (e *Engine) where(now time.Duration, r *request) {
	pg := e.pages[r.key]
	loc := Location{Speed: e.store.Speed(r.key), Owner: noc.BroadcastNode}
	switch {
	case pg != nil && pg.owner:
		loc.Tier, loc.Owner = gva.TierMachine, e.self
	default:
		owner := e.guessOwner(r.key)
		loc.Owner = owner
		_, hops, ok := e.rt.NextHop(owner)
		if !ok {
			e.completeErr(now, r, syscall.EHOSTDOWN, "where: no route to the owner")
			return
		}
		loc.Hops, loc.Tier = hops, gva.TierForHops(hops)
	}
	// The version: the page's own where it is held here, else the newest
	// this node's path cache has seen (the owner may be ahead of it).
	c := Completion{Where: loc}
	if pg != nil && pg.has {
		c.Version = pg.version
	} else if ent, ok := e.cache.Peek(r.key); ok {
		c.Version = ent.Version
	}
	e.complete(now, r, c)
}

// hostRef maps a page: the host gets a replica (or the primary, here).
func (e *Engine) hostRef(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if r.attempts == 1 {
		if pg == nil {
			content, err := e.store.Alloc(r.key, r.hr.GVA.Huge())
			if err != nil {
				e.completeErr(now, r, syscall.ENOMEM, err.Error())
				return
			}
			pg = &page{key: r.key, huge: r.hr.GVA.Huge(), content: content, ownerNode: homeOf(r.key)}
			e.pages[r.key] = pg
		}
		pg.maps++
		r.mapped = true
	}
	if pg == nil {
		e.completeErr(now, r, syscall.EINVAL, "ref: page unmapped while mapping")
		return
	}
	r.min = pg.seen
	e.awaitContent(now, pg, r)
}

// hostLoad reads a mapped page.
func (e *Engine) hostLoad(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if pg == nil || (!pg.owner && pg.maps == 0) {
		e.completeErr(now, r, syscall.EINVAL, "load: page not mapped (ref it first)")
		return
	}
	e.noteAccess(now, pg, e.self, false)
	r.min = pg.seen
	if ent, ok := e.cache.Peek(r.key); ok && ent.Version > r.min {
		r.min = ent.Version
	}
	e.awaitContent(now, pg, r)
}

// awaitContent completes r if pg holds content at r.min or later, and
// otherwise queues r on the page and makes sure a fetch is on its way.
func (e *Engine) awaitContent(now time.Duration, pg *page, r *request) {
	if e.contentReady(pg, r) {
		e.completeContent(now, pg, r)
		return
	}
	if !r.waiting {
		pg.waiters = append(pg.waiters, r)
		r.waiting = true
	}
	if pg.swap != nil && !pg.swap.out && pg.swap.stage >= stageGranted {
		return // the swap brings the content
	}
	if r.attempts > 1 {
		e.closeFetch(r.key) // a re-sent ref must not merge into a lost one
	}
	e.sendRef(now, pg, r.id, r.hr.Cred, r.min)
	e.retryLater(now, r, 0)
}

// contentReady: the page can answer r now.
func (e *Engine) contentReady(pg *page, r *request) bool {
	if pg.owner {
		return (pg.swap == nil || pg.swap.out) && !e.settling(pg)
	}
	if !pg.has || pg.version < r.min || (pg.swap != nil && !pg.swap.out && pg.swap.stage >= stageGranted) {
		return false
	}
	ent, ok := e.cache.Peek(pg.key)
	return ok && ent.Down.Has(noc.LocalPort) && pg.version >= ent.Version
}

// replicaValid: a mapped replica in the tree and current.
func (e *Engine) replicaValid(pg *page) bool {
	if !pg.has {
		return false
	}
	ent, ok := e.cache.Peek(pg.key)
	return ok && ent.Down.Has(noc.LocalPort) && pg.version >= ent.Version
}

func (e *Engine) completeContent(now time.Duration, pg *page, r *request) {
	switch r.hr.Op {
	case HostLoad:
		off := int(r.hr.GVA.Offset())
		e.complete(now, r, Completion{Data: e.pageBytes(pg)[off : off+r.hr.Len], Version: pg.version})
	case HostRef:
		e.complete(now, r, Completion{Version: pg.version})
	default:
		e.complete(now, r, Completion{Version: pg.version})
	}
}

// wake completes the waiters the page can now answer.
func (e *Engine) wake(now time.Duration, pg *page) {
	for i := 0; i < len(pg.waiters); {
		r := pg.waiters[i]
		if !e.contentReady(pg, r) {
			i++
			continue
		}
		e.completeContent(now, pg, r) // removes r from pg.waiters
	}
}

// hostUnref unmaps a page.
func (e *Engine) hostUnref(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if pg == nil || pg.maps == 0 {
		e.completeErr(now, r, syscall.EINVAL, "unref: page not mapped")
		return
	}
	if pg.swap != nil {
		e.completeErr(now, r, syscall.EBUSY, "unref: page is swapping")
		return
	}
	pg.maps--
	if pg.maps > 0 || pg.owner {
		e.complete(now, r, Completion{Version: pg.version})
		return
	}
	for len(pg.waiters) > 0 {
		e.completeErr(now, pg.waiters[0], syscall.EINVAL, "page unmapped")
	}
	e.dropReplica(now, pg)
	e.complete(now, r, Completion{})
}

// dropReplica releases the local replica and prunes its entry.
func (e *Engine) dropReplica(now time.Duration, pg *page) {
	if e.dbg != nil {
		e.debugf(pg.key, "drop replica")
	}
	e.store.Release(pg.key)
	delete(e.pages, pg.key)
	if ent, ok := e.cache.Peek(pg.key); ok {
		ent.Down = ent.Down.Remove(noc.LocalPort)
		ent.Replica = 0
		if fe := e.fetches[pg.key]; fe != nil {
			fe.ports = fe.ports.Remove(noc.LocalPort)
		}
		e.prune(now, ent)
	}
}

// hostWrite sends a store or an atomic toward the owner.
func (e *Engine) hostWrite(now time.Duration, r *request) {
	g := r.hr.GVA
	var f noc.Frame
	switch r.hr.Op {
	case HostStore:
		p := appendUpHead(e.hostPay[:0], 0, r.hr.Cred)
		p = append(p, r.data...)
		f = newFrame(noc.ClassStore, OpStore, 0, e.self, e.guessOwner(r.key), r.id, g, 0, p)
	case HostCAS:
		if bugsCompiled && e.cfg.Bug == BugStaleCAS && e.staleCAS(now, r) {
			return
		}
		f = newFrame(noc.ClassAtomic, OpCAS, 0, e.self, e.guessOwner(r.key), r.id, g, 0,
			appendAtomic(e.hostPay[:0], OpCAS, 0, r.hr.Cred, r.hr.Expected, r.hr.Operand))
	case HostFetchAdd:
		f = newFrame(noc.ClassAtomic, OpFetchAdd, 0, e.self, e.guessOwner(r.key), r.id, g, 0,
			appendAtomic(e.hostPay[:0], OpFetchAdd, 0, r.hr.Cred, 0, r.hr.Operand))
	}
	f.Flags |= noc.FlagPath
	if g.Huge() {
		f.Flags |= noc.FlagHuge
	}
	if r.live > 0 || r.orphaned {
		f.PageVersion = resentMark // an earlier copy may still be answered, or was applied
	}
	r.live++
	r.lastSent = now
	e.handleUp(now, noc.LocalPort, &f)
	if e.reqs[r.id] == r && r.retry == 0 && e.resendable(now, r) {
		d := e.cfg.ResendInterval << min(r.resends, 4)
		r.retry = e.schedule(now+e.jitter(d), timer{kind: tRetry, id: r.id})
		r.resendArmed = true
	}
}
