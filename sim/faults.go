package sim

import (
	"slices"
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
	fOutageCrash   // the outage's next victim fails (chosen then)
	fOutageRestart // the outage's n-th victim (in failure order) restarts
	fPowercut      // every live node fails (some in the middle of a sync)
)

type fault struct {
	kind faultKind
	link int
	node int
	n    int
}

// outage is what FaultOutage failed: victims in the order they failed,
// and which of them are still down waiting for their own restart.
type outage struct {
	victims []int
	pending map[int]bool
}

// scriptedFault is a node failure or restart a test places at a time
// after the workload's start (World.script).
type scriptedFault struct {
	at      time.Duration
	restart bool
	node    int
}

// scheduleFaults plans the run's link flaps and node failures.
func (w *World) scheduleFaults(start time.Duration) {
	r := w.faultRNG
	span := int64(w.cfg.Workload)
	add := func(at time.Duration, f fault) {
		w.faults = append(w.faults, f)
		w.push(event{at: at, kind: evFault, n: len(w.faults) - 1})
	}
	for _, s := range w.script {
		k := fCrash
		if s.restart {
			k = fRestart
		}
		add(start+s.at, fault{kind: k, node: s.node})
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
	if w.cfg.Faults&FaultPowercut != 0 {
		// One power cut of the whole fabric, somewhere in the middle of
		// the workload; the nodes come back one by one, 5 to 60 ms later,
		// in a random order, the last at most 45 ms after the workload.
		at := start + time.Duration(span/4+r.Int64N(span/2))
		add(at, fault{kind: fPowercut})
		back := at + 5*time.Millisecond
		last := start + time.Duration(span) + 45*time.Millisecond
		for _, v := range r.Perm(len(w.nodes)) {
			back += time.Duration(r.Int64N(int64(4 * time.Millisecond)))
			add(min(back, last), fault{kind: fRestart, node: v})
		}
	}
	if w.cfg.Faults&FaultOutage != 0 && len(w.nodes) >= 2 && r.IntN(10) < 4 {
		w.scheduleOutage(start, add)
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

// scheduleOutage plans the failure of half the nodes or more (one more
// than half in one run of two) and their restarts. They fail at once
// (within 2 ms) or one after another (3 to 30 ms apart: some after the
// takeover of the one before, some before it); the first restarts 5 to
// 75 ms after the last failure (beyond a copy lease in some runs, while
// the rest is down), the first that failed in one run of two, then the
// others 2 to 20 ms apart in a random order, the last at most 45 ms
// after the workload ends (the quiet period that follows is 150 ms by
// default). Who fails is chosen at the time (outageVictim).
func (w *World) scheduleOutage(start time.Duration, add func(time.Duration, fault)) {
	r := w.faultRNG
	span := w.cfg.Workload
	n := len(w.nodes)
	k := max(1, n/2+r.IntN(2))
	if k >= n {
		k = n - 1
	}
	if k == 0 {
		return
	}
	at := start + span/8 + time.Duration(r.Int64N(int64(span/4)))
	together := r.IntN(2) == 0
	for i := range k {
		if i > 0 {
			if together {
				at += time.Duration(r.Int64N(int64(2 * time.Millisecond)))
			} else {
				at += 3*time.Millisecond + time.Duration(r.Int64N(int64(27*time.Millisecond)))
			}
		}
		add(at, fault{kind: fOutageCrash, n: i})
	}
	order := r.Perm(k)
	if r.IntN(2) == 0 {
		// The first to fail (an owner whose pages the others took over,
		// or could not) comes back first, while the rest is down.
		j := slices.Index(order, 0)
		order[0], order[j] = order[j], order[0]
	}
	last := start + span + 45*time.Millisecond
	at += 5*time.Millisecond + time.Duration(r.Int64N(int64(70*time.Millisecond)))
	for i, v := range order {
		if i > 0 {
			at += 2*time.Millisecond + time.Duration(r.Int64N(int64(18*time.Millisecond)))
		}
		add(min(at, last), fault{kind: fOutageRestart, n: v})
	}
}

// outageVictim picks the outage's next victim among the live nodes, at
// random. With replicas a node qualifies only if every page keeps, on
// another live node, its owner or a copy at its committed version (the
// checker's view): the outage takes the fabric's majority away, and what
// it tests is that such a page survives every order of restarts. At R = 1
// any node may fail. -1: none qualifies.
func (w *World) outageVictim() int {
	r := w.faultRNG
	for _, i := range r.Perm(len(w.nodes)) {
		n := w.nodes[i]
		if !n.alive {
			continue
		}
		if w.cfg.Replicas > 1 && !w.check.survivesWithout(n) {
			continue
		}
		return i
	}
	return -1
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
		forced := f.n == 1 // a node whose disk crashed, or one the power cut reaches late
		if !n.alive || w.ending && !forced {
			return
		}
		if forced {
			w.tracef("crash node %d (power cut)", f.node)
			if n.disk != nil {
				n.disk.Crash()
				w.check.tornSync(n)
			}
			w.check.crashed(n)
			n.alive = false
			w.kill(n)
			w.crashClients(n)
			return
		}
		if len(w.outage.pending) > 0 && w.cfg.Replicas > 1 && !w.check.survivesWithout(n) {
			// During an outage a crash obeys the outage's rule: it leaves
			// every page a copy at its committed version.
			w.tracef("crash node %d: not while it holds a page's last copy (outage)", f.node)
			return
		}
		w.tracef("crash node %d", f.node)
		w.check.crashed(n)
		n.alive = false
		w.kill(n)
		w.crashClients(n)
	case fRestart:
		w.restart(w.nodes[f.node])
	case fPowercut:
		if w.ending {
			return
		}
		w.tracef("power cut")
		for _, n := range w.nodes {
			if !n.alive {
				continue
			}
			if n.disk != nil && w.faultRNG.IntN(3) == 0 {
				// This one dies in the middle of one of its next syncs
				// (a torn write), within a few steps.
				n.disk.CrashAtSync = 1 + w.faultRNG.IntN(3)
				w.faults = append(w.faults, fault{kind: fCrash, node: int(n.id), n: 1})
				w.push(event{at: w.now + time.Millisecond, kind: evFault, n: len(w.faults) - 1})
				continue
			}
			if n.disk != nil {
				n.disk.Crash()
			}
			w.check.crashed(n)
			n.alive = false
			w.kill(n)
			w.crashClients(n)
		}
	case fOutageCrash:
		if w.ending {
			return
		}
		v := w.outageVictim()
		if v < 0 {
			w.tracef("outage: no node may fail")
			w.outage.victims = append(w.outage.victims, -1)
			return
		}
		if w.outage.pending == nil {
			w.outage.pending = map[int]bool{}
		}
		w.outage.victims = append(w.outage.victims, v)
		w.outage.pending[v] = true
		n := w.nodes[v]
		w.tracef("crash node %d (outage)", v)
		w.check.crashed(n)
		n.alive = false
		w.kill(n)
		w.crashClients(n)
	case fOutageRestart:
		if f.n >= len(w.outage.victims) || w.outage.victims[f.n] < 0 {
			return // that failure did not happen
		}
		v := w.outage.victims[f.n]
		delete(w.outage.pending, v)
		w.restart(w.nodes[v])
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
		if !w.outage.pending[int(n.id)] { // an outage's victims come back in their own order
			w.restart(n)
		}
	}
}
