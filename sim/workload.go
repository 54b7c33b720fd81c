package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Layout of a simulated page: atomicWords 64-bit words at the start are
// touched only by CAS and fetch-add (their histories are checked for
// linearizability); stores write anywhere after them.
const (
	atomicWords = 4
	storeBase   = 64
	// lockWord is the word a client holding a page's lock reads and then
	// writes back plus one (a critical section): nothing else writes it,
	// and a load of it under the lock must see every acknowledged write
	// (checker.lockedRead).
	lockWord = 40
)

// simPage is one page of the workload.
type simPage struct {
	g    gva.GVA
	home noc.NodeID
	hot  bool
}

// client is one host thread issuing requests on one node.
type client struct {
	idx     int
	node    noc.NodeID
	rng     *rand.Rand
	holder  uint64
	session coherence.SessionID
	gen     int // sessions opened so far
	mapped  map[int]bool
	locked  int // page index, -1: none
	lockOps int
	pending *pendingOp
	last    map[[2]int]uint64 // last value seen per (page, word)
	// ur draws the client's requests on the guarded pages (users.go);
	// intruder: the client tries them as a user their mode keeps out.
	ur       *rand.Rand
	intruder bool
	lr       *rand.Rand // the lifecycle workload's draws (lifecycle.go)
	// A critical section on the lock word of the page it locked: phase 1
	// loads the word, phase 2 stores next (what it read plus one); wr
	// draws whether a lock has one.
	wordPhase int
	wordNext  uint64
	wr        *rand.Rand
}

// pendingOp is a request in flight.
type pendingOp struct {
	c     *client // nil for the final checks
	req   coherence.Request
	page  int
	start time.Duration
	hist  *histOp // linearizability history entry, if recorded
	guard *guardedOp
	life  *lifeOp
	done  func(coherence.Completion)
	// lockRead: a load of the lock word under the lock, with the newest
	// version acknowledged writes had made when it began
	lockRead   bool
	readSince  gva.Version
	lockedWord bool // a store of the lock word under the lock
	// flood: the flooder whose burst it is (flood.go); floodClosed: its
	// session closed since
	flood       *flooder
	floodClosed bool
	// garble: the garbler whose burst it is (garbage.go); floodClosed
	// too when its session closed
	garble *garbler
	// reload: an attempt of a host copy's reload (views.go)
	reload bool
	// xfer: the transfer whose piece it is (transfers.go)
	xfer *xferPiece
}

// setup allocates the workload's pages on random homes.
func (w *World) setup() error {
	n := w.cfg.HotPages + w.cfg.ColdPages
	for i := range n {
		home := w.nodes[w.workRNG.IntN(len(w.nodes))]
		var got coherence.Completion
		w.submit(home, &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostAlloc}, done: func(c coherence.Completion) { got = c }})
		if got.Err != nil || got.GVA.IsZero() {
			return fmt.Errorf("sim: alloc on node %v: %v", home.id, got.Err)
		}
		w.pages = append(w.pages, &simPage{g: got.GVA, home: home.id, hot: i < w.cfg.HotPages})
		if w.pageIdx == nil {
			w.pageIdx = map[gva.GVA]int{}
		}
		w.pageIdx[got.GVA.Key()] = len(w.pages) - 1
		w.check.addPage(got.GVA.Key())
	}
	for i := range w.nodes {
		for range w.cfg.ClientsPerNode {
			c := &client{idx: len(w.clients), node: noc.NodeID(i), locked: -1}
			c.rng = derive(w.cfg.Seed, 1000+uint64(c.idx))
			c.last = map[[2]int]uint64{}
			w.clients = append(w.clients, c)
			w.connect(c)
		}
	}
	return nil
}

func (w *World) startClients() {
	for _, c := range w.clients {
		w.push(event{at: w.now + time.Duration(c.rng.Int64N(int64(w.cfg.Think))), kind: evClient, n: c.idx})
	}
}

// submit hands a request to a node's engine and moves its output.
func (w *World) submit(n *simNode, po *pendingOp) {
	w.reqID++
	po.req.ID = w.reqID
	po.start = w.now
	n.reqs[po.req.ID] = po
	sid := checkSession
	switch {
	case po.c != nil:
		sid = po.c.session
	case po.flood != nil:
		sid = po.flood.session
	case po.garble != nil:
		sid = po.garble.session
	case po.xfer != nil:
		sid = po.xfer.t.session
	}
	n.hosts.Submit(w.now, sid, po.req, n.core)
	w.settle(n)
}

// closedSession is a session a client closed, checked at the end: the
// core must have released everything it held and forgotten it.
type closedSession struct {
	n  *simNode
	h  *coherence.Hosts
	id coherence.SessionID
}

// checkSessions checks, after the quiet period, that every closed session
// on a node that has not restarted since holds nothing and is forgotten,
// and the open ones (checkOpenSessions).
func (w *World) checkSessions() {
	w.checkOpenSessions()
	for _, cs := range w.closed {
		if cs.n.hosts != cs.h || !cs.n.alive {
			continue // the node restarted: its sessions went with it
		}
		if refs, acq, locks := cs.h.Held(cs.id); refs+acq+locks != 0 || cs.h.Known(cs.id) {
			w.check.violate("node %v: closed session %#x still holds %d refs, %d acquisitions, %d locks (known %v)",
				cs.n.id, cs.id, refs, acq, locks, cs.h.Known(cs.id))
		}
	}
}

// checkOpenSessions checks, after the quiet period, that no open session
// holds a lock its client does not know it holds (an abandoned lock that
// was not undone, say), nor more than one.
func (w *World) checkOpenSessions() {
	for _, c := range w.clients {
		n := w.nodes[c.node]
		if !n.alive || !n.hosts.Known(c.session) {
			continue
		}
		if _, _, locks := n.hosts.Held(c.session); locks > 1 || locks == 1 && c.locked < 0 {
			w.check.violate("node %v: client %d's session holds %d locks, the client knows of %v", n.id, c.idx, locks, c.locked >= 0)
		}
	}
}

// checkSession is the host session of the simulator's own requests (setup
// and final checks) on every node; clients have sessions of their own.
const checkSession coherence.SessionID = 1 << 30

// connect opens a new host session for c on its node (a new holder).
func (w *World) connect(c *client) {
	c.gen++
	c.session = coherence.SessionID(c.idx+1) | coherence.SessionID(c.gen)<<16
	c.holder = uint64(c.session)
	c.mapped, c.locked, c.lockOps = map[int]bool{}, -1, 0
	if err := w.nodes[c.node].hosts.Open(c.session); err != nil {
		w.check.violate("client %d: open session: %v", c.idx, err)
	}
	w.res.Connects++
}

// disconnect closes c's session: its request in flight is abandoned and the
// core releases what the session held. A lock it held is released at some
// point after: the lock history gets an unlock of unknown time.
func (w *World) disconnect(c *client) {
	n := w.nodes[c.node]
	if po := c.pending; po != nil {
		if po.hist != nil {
			w.check.abandon(po.hist)
		}
		delete(n.reqs, po.req.ID)
		if po.req.Op == coherence.HostLock {
			w.check.abandon(w.check.lockOp(po.page, c.holder, false, w.now))
		}
		c.pending = nil
	}
	if c.locked >= 0 {
		w.check.abandon(w.check.lockOp(c.locked, c.holder, false, w.now))
	}
	w.closed = append(w.closed, closedSession{n: n, h: n.hosts, id: c.session})
	for page := range c.mapped {
		w.viewUnmapped(n, page) // the close drops the session's maps
	}
	n.hosts.Close(w.now, c.session, n.core)
	w.settle(n)
	w.res.Disconnects++
	w.connect(c)
}

// abort abandons c's request in flight (its caller gave up): the core
// completes it no more and undoes what it takes if it succeeds.
func (w *World) abort(c *client) {
	po := c.pending
	n := w.nodes[c.node]
	if po.hist != nil {
		w.check.abandon(po.hist)
	}
	if po.req.Op == coherence.HostLock {
		// undone if it was taken: an unlock of unknown time
		w.check.abandon(w.check.lockOp(po.page, c.holder, false, w.now))
	}
	delete(n.reqs, po.req.ID)
	n.hosts.Abandon(w.now, c.session, po.req.ID, n.core)
	w.settle(n)
	c.pending = nil
	if po.req.Op == coherence.HostRef {
		delete(c.mapped, po.page) // undone if it was taken
	}
	w.res.Aborts++
	w.push(event{at: w.now + time.Duration(c.rng.Int64N(int64(w.cfg.Think))), kind: evClient, n: c.idx})
}

// clientStep issues the client's next request.
func (w *World) clientStep(c *client) {
	n := w.nodes[c.node]
	if w.stopped || c.pending != nil || !n.alive {
		return
	}
	r := c.rng
	if !w.cfg.NoChurn && r.IntN(200) == 0 {
		w.disconnect(c)
	}
	po := &pendingOp{c: c}
	if c.locked >= 0 {
		p := w.pages[c.locked]
		if c.wordPhase != 0 {
			w.lockWordOp(c, po, p)
			c.pending = po
			w.submit(n, po)
			return
		}
		if c.lockOps > 0 && r.IntN(10) < 7 {
			c.lockOps--
			po.page = c.locked
			w.atomicOp(c, po, p, r)
		} else {
			po.page = c.locked
			po.req = coherence.Request{Op: coherence.HostUnlock, GVA: p.g, Holder: c.holder}
			po.hist = w.check.lockOp(c.locked, c.holder, false, w.now)
		}
		c.pending = po
		w.submit(n, po)
		return
	}
	if w.guardedStep(c, po) || w.lifeStep(c, po) {
		c.pending = po
		w.submit(n, po)
		return
	}
	pi := w.pickPage(c, r)
	p := w.pages[pi]
	po.page = pi
	x := r.IntN(100)
	if w.cfg.ReadMostly {
		if x < 95 {
			x = 0
		} else {
			x = r.IntN(100)
		}
	}
	switch {
	case !c.mapped[pi]:
		po.req = coherence.Request{Op: coherence.HostRef, GVA: p.g}
	case x < 25:
		off := r.IntN(gva.PageSize - 8)
		po.req = coherence.Request{Op: coherence.HostLoad, GVA: p.g.WithOffset(uint16(off)), Len: 1 + r.IntN(8)}
	case x < 45:
		size := 1 + r.IntN(64)
		switch y := r.IntN(20); {
		case y < 3:
			size = 65 + r.IntN(300)
		case y == 3:
			size = 512 + r.IntN(1536)
		}
		off := storeBase + r.IntN(gva.PageSize-storeBase-size+1)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		po.req = coherence.Request{Op: coherence.HostStore, GVA: p.g.WithOffset(uint16(off)), Data: data}
	case x < 75:
		w.atomicOp(c, po, p, r)
	case x < 79:
		po.req = coherence.Request{Op: coherence.HostUnref, GVA: p.g}
	case x < 86 && p.hot:
		po.req = coherence.Request{Op: coherence.HostLock, GVA: p.g, Holder: c.holder, Priority: uint8(r.IntN(2))}
		po.hist = w.check.lockOp(pi, c.holder, true, w.now)
	case x < 89:
		po.req = coherence.Request{Op: coherence.HostAcquire, GVA: p.g, Priority: uint8(r.IntN(2))}
	default:
		po.req = coherence.Request{Op: coherence.HostWhere, GVA: p.g}
	}
	c.pending = po
	w.submit(n, po)
	if !w.cfg.NoChurn && c.pending == po && r.IntN(100) < 3 {
		switch po.req.Op {
		case coherence.HostRef, coherence.HostLock, coherence.HostCAS, coherence.HostFetchAdd:
			w.push(event{at: w.now + time.Duration(r.Int64N(int64(300*time.Microsecond))), kind: evAbort, n: c.idx, op: po})
		}
	}
}

func (w *World) pickPage(c *client, r *rand.Rand) int {
	if k := w.cfg.Neighbourhood; k > 0 && w.cfg.ColdPages > 0 && r.IntN(100) != 0 {
		first := int(c.node) * w.cfg.ColdPages / len(w.nodes)
		return w.cfg.HotPages + (first+r.IntN(k))%w.cfg.ColdPages
	}
	if r.IntN(10) < 7 || w.cfg.ColdPages == 0 {
		return r.IntN(w.cfg.HotPages)
	}
	return w.cfg.HotPages + r.IntN(w.cfg.ColdPages)
}

// atomicOp makes po a CAS or fetch-add on one of the page's atomic words.
func (w *World) atomicOp(c *client, po *pendingOp, p *simPage, r *rand.Rand) {
	word := r.IntN(atomicWords)
	g := p.g.WithOffset(uint16(8 * word))
	if r.IntN(2) == 0 {
		exp := c.last[[2]int{po.page, word}]
		if r.IntN(8) == 0 {
			exp = wide(uint64(r.IntN(4)))
		}
		nv := exp + wide(1+uint64(r.IntN(3)))
		po.req = coherence.Request{Op: coherence.HostCAS, GVA: g, Expected: exp, Operand: nv}
		po.hist = w.check.atomicOp(po.page, word, true, exp, nv, w.now)
	} else {
		d := wide(uint64(1 + r.IntN(5)))
		po.req = coherence.Request{Op: coherence.HostFetchAdd, GVA: g, Operand: d}
		po.hist = w.check.atomicOp(po.page, word, false, 0, d, w.now)
	}
}

// wordWritten is the 64-bit word a compare-and-swap or fetch-add that
// completed (cp) wrote, and whether it wrote one (a CAS that found
// another value did not).
func wordWritten(req coherence.Request, cp coherence.Completion) (uint64, bool) {
	if req.Op == coherence.HostFetchAdd {
		return cp.Value + req.Operand, cp.Swapped
	}
	return req.Operand, cp.Swapped
}

// lockWordOp makes po the next step of c's critical section on the lock
// word of page p, which it locked.
func (w *World) lockWordOp(c *client, po *pendingOp, p *simPage) {
	po.page = c.locked
	g := p.g.WithOffset(lockWord)
	if c.wordPhase == 1 {
		po.req = coherence.Request{Op: coherence.HostLoad, GVA: g, Len: 8}
		po.lockRead, po.readSince = true, w.check.ackedMax(p.g.Key())
		return
	}
	po.req = coherence.Request{Op: coherence.HostStore, GVA: g, Data: binary.LittleEndian.AppendUint64(nil, c.wordNext)}
	po.lockedWord = true
}

// wrng is c's source for its critical sections.
func (w *World) wrng(c *client) *rand.Rand {
	if c.wr == nil {
		c.wr = derive(w.cfg.Seed, 7000+uint64(c.idx))
	}
	return c.wr
}

// wide maps a small count v (what the workload draws: CAS steps, stale
// guesses, fetch-add deltas) to the 64-bit value the atomic words hold:
// v·wideScale mod 2⁶⁴. The map keeps sums (wide(a)+wide(b) = wide(a+b)) and,
// for counts below 2³⁴, equality, so a seed makes the same CAS succeed or
// fail as it would with the counts themselves: the runs' traffic and
// timing, hence their scenarios, do not depend on it. The values fill the
// high half and differ in the low half only in bits 30 and 31: two counts
// that are equal mod 4 give values with the same low half, so an atomic
// that compared or added only the low 32 bits answers wrongly often, and
// adds carry into the high half all the time.
func wide(v uint64) uint64 { return v * wideScale }

// wideScale is the golden-ratio constant 0x9e3779b97f4a7c15 shifted left
// by 30 (mod 2⁶⁴).
const wideScale = 0x5fd29f0540000000

// completed ends a request: checks, history, the client's next step.
func (w *World) completed(n *simNode, cp coherence.Completion) {
	po := n.reqs[cp.ID]
	if po == nil {
		return
	}
	delete(n.reqs, cp.ID)
	errno := cp.Errno()
	w.res.Ops++
	if errno != 0 {
		w.res.Errors++
		if w.res.ErrorsBy == nil {
			w.res.ErrorsBy = map[syscall.Errno]int{}
		}
		w.res.ErrorsBy[errno]++
		// (The lifecycle's requests on freed extents answer so by design.)
		// (A host copy's reloads are counted apart.)
		if (errno == syscall.EHOSTDOWN || errno == syscall.ESTALE) && po.req.Op != coherence.HostWhere && po.life == nil {
			if po.reload {
				w.res.ReloadsGone++
			} else {
				w.res.Gone++
			}
		}
	}
	w.traceCompletion(n.id, po.req.Op, po.req.GVA, errno, cp.Version, cp.Value, cp.Swapped)
	if w.scale != nil && po.c != nil && !w.stopped {
		w.scale.observe(w, n, po, cp, errno)
	}
	if bound := engineTiming.RequestTimeout + time.Millisecond; cp.At-po.start > bound {
		w.check.violate("request %v on node %v took %v (bound %v)", po.req.Op, n.id, cp.At-po.start, bound)
	}
	if po.done != nil {
		po.done(cp)
	}
	if po.page >= 0 && errno == 0 {
		key := w.pages[po.page].g.Key()
		switch po.req.Op {
		case coherence.HostStore:
			w.check.acked(key, cp.Version, int(po.req.GVA.Offset()), po.req.Data)
		case coherence.HostCAS, coherence.HostFetchAdd:
			if nv, ok := wordWritten(po.req, cp); ok {
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], nv)
				w.check.acked(key, cp.Version, int(po.req.GVA.Offset()), b[:])
			}
		}
	}
	if po.hist != nil {
		w.check.finish(po.hist, cp, errno, w.now)
	}
	if po.guard != nil {
		w.guardedDone(n, po, cp, errno)
	}
	if po.life != nil {
		w.lifeDone(n, po, cp, errno)
	}
	if po.flood != nil {
		w.floodDone(n, po)
	}
	if po.garble != nil {
		w.garbleDone(n, po, cp, errno)
	}
	if po.xfer != nil {
		w.xferDone(n, po, cp, errno)
	}
	c := po.c
	if c == nil || c.pending != po {
		return
	}
	c.pending = nil
	w.clientDone(c, po, cp, errno)
	if !w.stopped {
		w.push(event{at: w.now + time.Duration(c.rng.Int64N(int64(w.cfg.Think))), kind: evClient, n: c.idx})
	}
}

// clientDone updates what the client knows after a completion.
func (w *World) clientDone(c *client, po *pendingOp, cp coherence.Completion, errno syscall.Errno) {
	switch po.req.Op {
	case coherence.HostRef:
		if errno == 0 && !c.mapped[po.page] {
			c.mapped[po.page] = true
			w.viewMapped(w.nodes[c.node], po.page, cp)
		}
	case coherence.HostUnref:
		if errno == 0 && c.mapped[po.page] {
			delete(c.mapped, po.page)
			w.viewUnmapped(w.nodes[c.node], po.page)
		}
	case coherence.HostLock:
		if errno == 0 {
			w.checkOneLocker(c, po.page)
			c.locked, c.lockOps = po.page, 1+c.rng.IntN(3)
			c.wordPhase = 0
			if w.wrng(c).IntN(2) == 0 {
				c.wordPhase = 1
			}
		}
	case coherence.HostLoad:
		if po.lockRead {
			c.wordPhase = 0
			if errno == 0 && c.locked == po.page {
				w.check.lockedRead(w.nodes[c.node].id, w.pages[po.page].g.Key(), po.readSince, cp)
				c.wordPhase, c.wordNext = 2, binary.LittleEndian.Uint64(cp.Data)+1
			}
		}
	case coherence.HostStore:
		if po.lockedWord {
			c.wordPhase = 0
		}
	case coherence.HostUnlock:
		c.locked = -1
	case coherence.HostCAS, coherence.HostFetchAdd:
		if errno == 0 {
			word := int(po.req.GVA.Offset() / 8)
			v := cp.Value
			if nv, ok := wordWritten(po.req, cp); ok {
				v = nv
			}
			c.last[[2]int{po.page, word}] = v
		}
	}
	if errno == syscall.EHOSTDOWN && po.req.Op == coherence.HostRef && c.mapped[po.page] {
		delete(c.mapped, po.page)
		w.viewUnmapped(w.nodes[c.node], po.page)
	}
	if errno == 0 && po.page >= 0 {
		w.viewOwnWrite(w.nodes[c.node], po, cp)
	}
}

// checkOneLocker checks, as c is granted the lock of page, that no other
// client of its node believes it holds that lock: the core hands a node's
// lock to one of its sessions at a time.
func (w *World) checkOneLocker(c *client, page int) {
	for _, o := range w.clients {
		if o != c && o.node == c.node && o.locked == page {
			w.check.violate("node %v: client %d granted the lock of page %d that client %d of the node holds", c.node, c.idx, page, o.idx)
		}
	}
}

// event takes a node's host events: a revoked pin (EventHostFault) ends
// the lock of the client whose session held it, at an unknown time.
func (w *World) event(n *simNode, ev coherence.Event) {
	w.viewEvent(n, ev)
	if ev.Kind != coherence.EventHostFault {
		return
	}
	for _, c := range w.clients {
		if c.node == n.id && c.session == ev.Session && c.locked >= 0 && w.pages[c.locked].g.Key() == ev.GVA.Key() {
			w.check.abandon(w.check.lockOp(c.locked, c.holder, false, w.now))
			c.locked = -1
		}
	}
}

// crashClients drops the requests of the clients of a failed node: their
// outcome is unknown.
func (w *World) crashClients(n *simNode) {
	for _, c := range w.clients {
		if c.node != n.id {
			continue
		}
		if po := c.pending; po != nil && po.hist != nil {
			w.check.abandon(po.hist)
		}
		if po := c.pending; po != nil && po.req.Op == coherence.HostLock {
			w.check.abandon(w.check.lockOp(po.page, c.holder, false, w.now))
		}
		if c.locked >= 0 {
			// A lock is a pin at the locker's own node, which is the page's
			// owner: the pin died with the node. With replicas the page
			// lives on at a backup without it: the lock was released at some
			// point after the crash.
			w.check.abandon(w.check.lockOp(c.locked, c.holder, false, w.now))
		}
		c.pending = nil
		c.locked = -1
		c.mapped = map[int]bool{}
	}
	w.crashTransfers(n)
	n.reqs = map[uint64]*pendingOp{}
}

// restartClients resumes the clients of a restarted node.
func (w *World) restartClients(n *simNode) {
	for _, c := range w.clients {
		if c.node != n.id {
			continue
		}
		w.connect(c) // the node's sessions went with it
		if !w.stopped {
			w.push(event{at: w.now + time.Millisecond + time.Duration(c.rng.Int64N(int64(w.cfg.Think))), kind: evClient, n: c.idx})
		}
	}
}
