package sim

import (
	"math/rand/v2"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Flooders: sessions that flood their node and vanish.
//
// Besides its clients, the workload has Config.Flooders hostile sessions,
// each on a node its own source draws. Now and then a flooder opens a
// session, submits floodBurst requests at once (loads, stores to the
// store region, refs, locks and acquires of random shared pages) and
// closes the session while most of them are in flight, as a host program
// that floods the socket and dies would. What its requests do is checked
// like everyone's (acknowledged stores, every request's bound); a request
// of a session that closed must never complete; and its closed sessions
// must hold nothing at the end (checkSessions): it ends alone, with
// everything it held released, and the clients' requests keep their
// bounds meanwhile.

// floodBurst is how many requests a flooder submits at once.
const floodBurst = 48

type flooder struct{ hostile }

// hostile is what a flooder and a garbler (garbage.go) are alike: a
// session on a node that it opens with a burst and closes (vanishes)
// with requests in flight.
type hostile struct {
	idx     int
	node    noc.NodeID
	rng     *rand.Rand
	session coherence.SessionID
	gen     int
	open    bool
	reqs    []*pendingOp // the session's requests in flight
}

// vanish closes h's session: its requests in flight must never complete
// (floodClosed), and the session is checked at the end (checkSessions).
func (w *World) vanish(h *hostile) {
	n := w.nodes[h.node]
	h.open = false
	for _, po := range h.reqs {
		po.floodClosed = true
	}
	h.reqs = h.reqs[:0]
	if n.alive && n.hosts.Known(h.session) {
		w.closed = append(w.closed, closedSession{n: n, h: n.hosts, id: h.session})
		n.hosts.Close(w.now, h.session, n.core)
		w.settle(n)
	}
}

// reopen opens a new session for h (its id tagged with tag), reporting
// whether it did.
func (w *World) reopen(h *hostile, tag uint64, what string) bool {
	h.gen++
	h.session = coherence.SessionID(tag | uint64(h.idx) | uint64(h.gen)<<20)
	if err := w.nodes[h.node].hosts.Open(h.session); err != nil {
		w.check.violate("%s %d: open session: %v", what, h.idx, err)
		return false
	}
	h.open = true
	return true
}

// done takes po, answered, out of h's requests in flight; it reports
// whether po's session closed before (a violation the caller names).
func (h *hostile) done(po *pendingOp) bool {
	if po.floodClosed {
		return false
	}
	for i, o := range h.reqs {
		if o == po {
			h.reqs = append(h.reqs[:i], h.reqs[i+1:]...)
			break
		}
	}
	return true
}

// setupFlooders places the flooders; each starts after a think time of
// its own.
func (w *World) setupFlooders() {
	for i := range max(w.cfg.Flooders, 0) {
		f := &flooder{hostile{idx: i, rng: derive(w.cfg.Seed, 8000+uint64(i))}}
		f.node = noc.NodeID(f.rng.IntN(len(w.nodes)))
		w.flooders = append(w.flooders, f)
		w.push(event{at: w.now + time.Duration(f.rng.Int64N(int64(4*w.cfg.Think))), kind: evFlood, n: i})
	}
}

// floodStep floods (a closed flooder) or vanishes (an open one), and
// schedules the next step.
func (w *World) floodStep(f *flooder) {
	n := w.nodes[f.node]
	if w.stopped {
		return
	}
	if f.open {
		w.vanish(&f.hostile)
		w.push(event{at: w.now + time.Duration(f.rng.Int64N(int64(20*w.cfg.Think))), kind: evFlood, n: f.idx})
		return
	}
	if !n.alive {
		w.push(event{at: w.now + time.Duration(f.rng.Int64N(int64(20*w.cfg.Think))), kind: evFlood, n: f.idx})
		return
	}
	if !w.reopen(&f.hostile, 1<<40, "flooder") {
		return
	}
	for range floodBurst {
		po := &pendingOp{flood: f}
		w.floodOp(f, po)
		f.reqs = append(f.reqs, po)
		w.submit(n, po)
	}
	// It vanishes with most of its burst in flight.
	w.push(event{at: w.now + time.Duration(f.rng.Int64N(int64(w.cfg.Think))), kind: evFlood, n: f.idx})
}

// floodOp draws one request of a flooder's burst.
func (w *World) floodOp(f *flooder, po *pendingOp) {
	r := f.rng
	po.page = r.IntN(len(w.pages) - len(w.shift.pages)) // not the shifting workload's (shifting.go)
	p := w.pages[po.page]
	switch x := r.IntN(10); {
	case x < 3:
		po.req = coherence.Request{Op: coherence.HostLoad, GVA: p.g.WithOffset(uint16(storeBase + r.IntN(gva.PageSize-storeBase-8))), Len: 8}
	case x < 6:
		size := 1 + r.IntN(16)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		po.req = coherence.Request{Op: coherence.HostStore, GVA: p.g.WithOffset(uint16(storeBase + r.IntN(gva.PageSize-storeBase-size+1))), Data: data}
	case x < 8:
		po.req = coherence.Request{Op: coherence.HostRef, GVA: p.g}
	case x < 9:
		po.req = coherence.Request{Op: coherence.HostLock, GVA: p.g, Holder: uint64(f.session)}
	default:
		po.req = coherence.Request{Op: coherence.HostAcquire, GVA: p.g}
	}
}

// floodDone checks the completion of a flooder's request.
func (w *World) floodDone(n *simNode, po *pendingOp) {
	if !po.flood.done(po) {
		w.check.violate("node %v: %v of flooder %d completed after its session closed", n.id, po.req.Op, po.flood.idx)
	}
}
