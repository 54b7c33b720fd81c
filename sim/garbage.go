package sim

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/admit"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/noc"
)

// Garblers: sessions of an ordinary user that send garbage.
//
// Besides its clients and flooders, the workload has Config.Garblers
// sessions of user 4000 (userGarbler), each on a node its own source
// draws (never intruderNode, which vouches for its users unchecked).
// Now and then a garbler opens a session and sends garbleBurst messages
// at once, as a host program would write them on its socket or ring:
// requests of every operation of the host wire, at the shared pages
// (root's, mode 0), the guarded ones (another user's, 0640), its user's
// own allocations and made-up addresses, with random fields, most of them
// then mangled (bytes flipped, cut short or lengthened). Each goes
// through the host wire's decoder (wire.DecodeRequest) and the admission
// the agent's server applies (admit.Request, with the garbler's
// credentials); what comes out is submitted in its session, which it
// closes after a while, often with requests in flight.
//
// The checks, besides everyone's (every request's bound; a closed
// session's requests never complete and it holds nothing at the end,
// checkSessions; the page quota charges what is held, quotaHeld):
//   - nothing a garbler sends succeeds on a page that is not its user's:
//     it may do nothing on the others';
//   - once a free of its user's extent is acknowledged, nothing sent
//     after it succeeds on the freed pages;
//   - its user's page quota (garblerQuota pages a node) is never
//     exceeded: an ALLOC beyond it ends with EDQUOT.

// garbleBurst is how many messages a garbler sends at once.
const garbleBurst = 32

// garblerQuota is how many pages userGarbler may hold on a node.
const garblerQuota = 24

var userGarbler = coherence.Cred{UID: 4000, GID: 4000}

// garbleBounds are the bounds the nodes' admission puts on the garblers'
// requests: the agent's, scaled to the simulated fabric's timing.
var garbleBounds = admit.Bounds{
	Op:          engineTiming.RequestTimeout,
	Lock:        engineTiming.RequestTimeout / 2,
	MaxLock:     engineTiming.RequestTimeout,
	DefaultMode: 0o600,
}

type garbler struct {
	hostile
	msg []byte // the message being garbled
}

// garbledExtent is an allocation of userGarbler: its pages, and when a
// free of it was acknowledged (freed).
type garbledExtent struct {
	start   gva.GVA
	pages   int
	freed   bool
	freedAt time.Duration
}

// GarbageResult is what the garblers sent and what became of it.
type GarbageResult struct {
	Sent        int // messages sent
	Undecodable int // refused by the wire's decoder
	NotCore     int // decoded, of an operation the core does not serve (the server's own)
	Refused     int // refused by admission
	Admitted    int // submitted to the core
	Succeeded   int // of which succeeded (on the garblers' own pages, or allocations)
}

// setupGarblers places the garblers; each starts after a think time of
// its own.
func (w *World) setupGarblers() {
	if len(w.nodes) < 2 {
		return
	}
	for i := range max(w.cfg.Garblers, 0) {
		g := &garbler{hostile: hostile{idx: i, rng: derive(w.cfg.Seed, 9000+uint64(i))}}
		for g.node = noc.NodeID(g.rng.IntN(len(w.nodes))); g.node == intruderNode; {
			g.node = noc.NodeID(g.rng.IntN(len(w.nodes)))
		}
		w.garblers = append(w.garblers, g)
		w.push(event{at: w.now + time.Duration(g.rng.Int64N(int64(4*w.cfg.Think))), kind: evGarble, n: i})
	}
}

// garbleStep sends a burst (a closed garbler) or vanishes (an open one),
// and schedules the next step.
func (w *World) garbleStep(g *garbler) {
	n := w.nodes[g.node]
	if w.stopped {
		return
	}
	next := func(scale int64) {
		w.push(event{at: w.now + time.Duration(g.rng.Int64N(scale*int64(w.cfg.Think))), kind: evGarble, n: g.idx})
	}
	if g.open {
		w.vanish(&g.hostile)
		next(20)
		return
	}
	if !n.alive {
		next(20)
		return
	}
	if !w.reopen(&g.hostile, 1<<41, "garbler") {
		return
	}
	for range garbleBurst {
		w.res.Garbage.Sent++
		var r wire.Request
		if err := wire.DecodeRequest(w.garble(g), &r); err != nil {
			w.res.Garbage.Undecodable++
			continue
		}
		if admit.Core(r.Op) == 0 {
			w.res.Garbage.NotCore++
			continue
		}
		req, err := admit.Request(&r, userGarbler, garbleBounds)
		if err != nil {
			w.res.Garbage.Refused++
			continue
		}
		if req.Data != nil {
			req.Data = append([]byte(nil), req.Data...) // it aliases g.msg
		}
		w.res.Garbage.Admitted++
		po := &pendingOp{page: -1, req: req, garble: g}
		g.reqs = append(g.reqs, po)
		w.submit(n, po)
	}
	next(1) // it vanishes with most of its burst in flight
}

// garble writes one message of g's burst into g.msg: a well-formed
// request of a random operation at a random target, most often mangled.
func (w *World) garble(g *garbler) []byte {
	r := g.rng
	req := wire.Request{Header: wire.Header{Kind: wire.KindRequest, Op: wire.Op(1 + r.IntN(int(wire.OpClock))), ID: r.Uint64()}}
	req.GVA = w.garbleTarget(r)
	switch req.Op {
	case wire.OpHello:
		req.Min, req.Max = 1, uint16(1+r.IntN(3))
	case wire.OpAlloc:
		req.GVA = gva.GVA{}
		req.Bytes = uint64(1 + r.IntN(3*gva.PageSize))
		if r.IntN(8) == 0 {
			req.Bytes = uint64(r.Int64N(wire.MaxAllocBytes)) + 1
		}
		req.Mode = uint32(r.IntN(0o1000))
	case wire.OpFree, wire.OpAcquire, wire.OpRelease, wire.OpLock, wire.OpUnlock:
		req.GVA = req.GVA.Key()
		req.TimeoutMS = uint32(r.IntN(100))
		if r.IntN(2) == 0 {
			req.Flags = wire.LockTry
		}
	case wire.OpLoad:
		req.Len = uint32(1 + r.IntN(64))
	case wire.OpStore:
		req.Data = make([]byte, 1+r.IntN(32))
		for i := range req.Data {
			req.Data[i] = byte(r.Uint32())
		}
	case wire.OpCAS, wire.OpFetchAdd:
		req.GVA = req.GVA.WithOffset(uint16(r.IntN(gva.PageSize/8) * 8))
		req.Expected, req.Desired, req.Delta = r.Uint64N(4), r.Uint64(), r.Uint64N(8)
	case wire.OpMap, wire.OpUnmap:
		req.GVA, req.LVA, req.Bytes = req.GVA.Key(), r.Uint64()&^(gva.PageSize-1), gva.PageSize
	case wire.OpTranslate:
		req.Dir, req.LVA = uint32(r.IntN(2)), r.Uint64()
	case wire.OpSubscribe:
		req.Mask = r.Uint32()
	}
	b := wire.AppendRequest(g.msg[:0], &req)
	switch x := r.IntN(8); {
	case x < 2: // as written
	case x < 6: // bytes flipped
		for range 1 + r.IntN(4) {
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		}
	case x < 7: // cut short
		b = b[:r.IntN(len(b))]
	default: // lengthened
		for range 1 + r.IntN(16) {
			b = append(b, byte(r.Uint32()))
		}
	}
	g.msg = b
	return b
}

// garbleTarget draws the address a garbled request names: a shared or
// guarded page, one of userGarbler's extents, or a made-up address, at a
// random offset.
func (w *World) garbleTarget(r *rand.Rand) gva.GVA {
	off := uint16(r.IntN(gva.PageSize))
	switch x := r.IntN(10); {
	case x < 3 && len(w.pages) > 0:
		return w.pages[r.IntN(len(w.pages))].g.WithOffset(off)
	case x < 4 && len(w.guarded) > 0:
		return w.guarded[r.IntN(len(w.guarded))].g.WithOffset(off)
	case x < 8 && len(w.garbled) > 0:
		e := w.garbled[r.IntN(len(w.garbled))]
		return e.start.PageAt(r.IntN(e.pages)).WithOffset(off)
	case x < 9 && len(w.pages) > 0:
		// a page next to a real one: same node and run, never allocated
		g := w.pages[r.IntN(len(w.pages))].g
		return g.PageAt(1 << 20).WithOffset(off)
	}
	return gva.GVA{Hi: r.Uint64(), Lo: r.Uint64()}
}

// garbleDone checks the completion of a garbler's request.
func (w *World) garbleDone(n *simNode, po *pendingOp, cp coherence.Completion, errno syscall.Errno) {
	g := po.garble
	if !g.done(po) {
		w.check.violate("node %v: %v of garbler %d completed after its session closed", n.id, po.req.Op, g.idx)
		return
	}
	if errno != 0 {
		return
	}
	w.res.Garbage.Succeeded++
	if po.req.Op == coherence.HostAlloc {
		w.garbled = append(w.garbled, &garbledExtent{start: cp.GVA.Key(), pages: po.req.Pages})
		return
	}
	e := w.garbledExtentOf(po.req.GVA.Key())
	switch {
	case e == nil:
		w.check.violate("node %v: %v at %v by uid %d (garbler %d) succeeded on a page that is not its user's",
			n.id, po.req.Op, po.req.GVA, userGarbler.UID, g.idx)
	case e.freed && po.start > e.freedAt:
		w.check.violate("node %v: %v at %v by garbler %d succeeded %v after the page's free was acknowledged",
			n.id, po.req.Op, po.req.GVA, g.idx, po.start-e.freedAt)
	case po.req.Op == coherence.HostFree && po.req.GVA.Key() == e.start && !e.freed:
		e.freed, e.freedAt = true, cp.At
	}
}

// garbledExtentOf is userGarbler's extent that holds page key (nil: none).
func (w *World) garbledExtentOf(key gva.GVA) *garbledExtent {
	for _, e := range w.garbled {
		for i := range e.pages {
			if e.start.PageAt(i) == key {
				return e
			}
		}
	}
	return nil
}

// quotaFor is the page quota's limit of user uid on a node (0: none).
func quotaFor(uid uint32) int {
	if uid == userGarbler.UID {
		return garblerQuota
	}
	return 0
}

var errGarblerQuota = fmt.Errorf("sim: uid %d holds its %d pages: %w", userGarbler.UID, garblerQuota, syscall.EDQUOT)
