package sim

import (
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/noc"
)

type faultKind uint8

const (
	fCut faultKind = iota + 1
	fRestore
	fCrash
	fRestart
)

type fault struct {
	kind faultKind
	link int
	node int
}

// scheduleFaults plans the run's link flaps and node failures.
func (w *World) scheduleFaults(start time.Duration) {
	r := w.faultRNG
	span := int64(w.cfg.Workload)
	add := func(at time.Duration, f fault) {
		w.faults = append(w.faults, f)
		w.push(event{at: at, kind: evFault, n: len(w.faults) - 1})
	}
	if w.cfg.Faults&FaultFlap != 0 && w.wires.NumWires() > 0 {
		for range 1 + r.IntN(3) {
			l := r.IntN(w.wires.NumWires())
			at := start + time.Duration(r.Int64N(span*3/4))
			d := 2*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
			add(at, fault{kind: fCut, link: l})
			add(at+d, fault{kind: fRestore, link: l})
		}
	}
	if w.cfg.Faults&FaultCrash != 0 && r.IntN(10) < 7 {
		n := r.IntN(len(w.nodes))
		at := start + time.Duration(span/5+r.Int64N(span/2))
		d := 5*time.Millisecond + time.Duration(r.Int64N(int64(15*time.Millisecond)))
		add(at, fault{kind: fCrash, node: n})
		add(at+d, fault{kind: fRestart, node: n})
	}
	if w.cfg.Faults&FaultPartition != 0 && w.wires.NumWires() > 0 {
		// One side: the half of the nodes nearest a random node (breadth
		// first); every link to the other side is cut for longer than the
		// link layer's dead interval and the failover grace together.
		side := w.nearestHalf(noc.NodeID(r.IntN(w.graph.N())))
		at := start + time.Duration(span/5+r.Int64N(span/2))
		d := 30*time.Millisecond + time.Duration(r.Int64N(int64(30*time.Millisecond)))
		for i, l := range w.graph.Links() {
			if side[l.A] != side[l.B] {
				add(at, fault{kind: fCut, link: i})
				add(at+d, fault{kind: fRestore, link: i})
			}
		}
	}
}

// nearestHalf marks the half of the nodes (rounded down) nearest from,
// breadth first in node order.
func (w *World) nearestHalf(from noc.NodeID) []bool {
	side := make([]bool, w.graph.N())
	want := w.graph.N() / 2
	side[from] = true
	queue := []noc.NodeID{from}
	for n := 1; len(queue) > 0 && n < want; {
		a := queue[0]
		queue = queue[1:]
		for _, b := range w.graph.Neighbours(a) {
			if !side[b] && n < want {
				side[b] = true
				n++
				queue = append(queue, b)
			}
		}
	}
	return side
}

func (w *World) fault(i int) {
	f := w.faults[i]
	switch f.kind {
	case fCut:
		if !w.ending {
			w.setWire(f.link, false)
			w.tracef("cut link %d", f.link)
		}
	case fRestore:
		w.setWire(f.link, true)
		w.tracef("restore link %d", f.link)
	case fCrash:
		n := w.nodes[f.node]
		if !n.alive || w.ending {
			return
		}
		w.tracef("crash node %d", f.node)
		w.check.crashed(n)
		n.alive = false
		w.kill(n)
		w.crashClients(n)
	case fRestart:
		w.restart(w.nodes[f.node])
	}
}

func (w *World) restart(n *simNode) {
	if n.alive {
		return
	}
	w.tracef("restart node %d", n.id)
	w.revive(n)
	if err := w.boot(n); err != nil {
		w.check.violate("restart of node %d: %v", n.id, err)
		return
	}
	w.allocAfterRestart(n)
	w.restartClients(n)
}

// allocAfterRestart allocates (and frees) a page on a node that just
// restarted: its GVA must be one no incarnation of any node handed out
// before, or a client still holding the old GVA would reach the new page.
func (w *World) allocAfterRestart(n *simNode) {
	var got coherence.Completion
	w.submit(n, &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostAlloc}, done: func(c coherence.Completion) { got = c }})
	if got.Err != nil || got.GVA.IsZero() {
		return // out of pages: nothing handed out
	}
	w.check.allocated(got.GVA.Key())
	w.submit(n, &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostFree, GVA: got.GVA.Key()}, done: func(coherence.Completion) {}})
}

// healAll ends every fault: links restored, failed nodes restarted.
func (w *World) healAll() {
	w.ending = true
	for i := range w.wires.NumWires() {
		if w.wires.Cut(i) {
			w.setWire(i, true)
			w.tracef("restore link %d", i)
		}
	}
	for _, n := range w.nodes {
		w.restart(n)
	}
}
