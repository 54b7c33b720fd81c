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

type flooder struct {
	idx     int
	node    noc.NodeID
	rng     *rand.Rand
	session coherence.SessionID
	gen     int
	open    bool
	reqs    []*pendingOp // the session's requests in flight
}

// setupFlooders places the flooders; each starts after a think time of
// its own.
func (w *World) setupFlooders() {
	for i := range max(w.cfg.Flooders, 0) {
		f := &flooder{idx: i, rng: derive(w.cfg.Seed, 8000+uint64(i))}
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
		f.open = false
		for _, po := range f.reqs {
			po.floodClosed = true
		}
		f.reqs = f.reqs[:0]
		if n.alive && n.hosts.Known(f.session) {
			w.closed = append(w.closed, closedSession{n: n, h: n.hosts, id: f.session})
			n.hosts.Close(w.now, f.session, n.core)
			w.settle(n)
		}
		w.push(event{at: w.now + time.Duration(f.rng.Int64N(int64(20*w.cfg.Think))), kind: evFlood, n: f.idx})
		return
	}
	if !n.alive {
		w.push(event{at: w.now + time.Duration(f.rng.Int64N(int64(20*w.cfg.Think))), kind: evFlood, n: f.idx})
		return
	}
	f.gen++
	f.session = coherence.SessionID(1<<40 | uint64(f.idx) | uint64(f.gen)<<20)
	if err := n.hosts.Open(f.session); err != nil {
		w.check.violate("flooder %d: open session: %v", f.idx, err)
		return
	}
	f.open = true
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
	if po.floodClosed {
		w.check.violate("node %v: %v of flooder %d completed after its session closed", n.id, po.req.Op, po.flood.idx)
		return
	}
	f := po.flood
	for i, o := range f.reqs {
		if o == po {
			f.reqs = append(f.reqs[:i], f.reqs[i+1:]...)
			break
		}
	}
}
