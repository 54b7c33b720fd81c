package nodetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aitherion/dpu/internal/timeq"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// End is one end of a wire: a port of a node.
type End struct {
	Node noc.NodeID
	Port noc.PortID
}

// Wiring says what the wires do to what they carry.
type Wiring struct {
	// Delay and Jitter: every datagram takes Delay plus a uniform share of
	// Jitter to cross a wire.
	Delay, Jitter time.Duration
	// Drop and Duplicate are per-datagram probabilities (one draw: below
	// Drop the datagram is lost, below Drop+Duplicate it arrives twice).
	Drop, Duplicate float64
	// HoldOneIn, if positive, holds one datagram in HoldOneIn (drawn) back
	// a further uniform share of HoldMax (a delay far beyond the usual
	// jitter).
	HoldOneIn int
	HoldMax   time.Duration
	// Abstract makes every port an AbstractLink and every wire carry whole
	// NoC frames from one to the other, in order and without loss: no
	// link-layer datagrams, acks or retransmissions. A wire that is cut,
	// or whose far node is killed, drops its carrier; frames in flight
	// from before a carrier change are discarded. Drop, Duplicate and HoldOneIn
	// act on datagrams and must be zero.
	Abstract bool
}

// Wires are the virtual wires of a topology: they carry what one end
// writes to the other end after a delay drawn from a seeded source, in
// virtual time, and can be cut; the nodes at their ends can be killed and
// revived. They run no clock: the driver pops deliveries up to the time it
// has reached. The same source and the same calls give the same deliveries
// in the same order.
type Wires struct {
	cfg Wiring
	rng *rand.Rand

	peer  [][]End   // node, port -> far end (when wired)
	index [][]int32 // node, port -> wire index (-1: unwired)
	ends  [][2]End  // wire index -> its two ends
	cut   []bool    // per wire
	down  []bool    // per node
	// epoch of every wire's carrier (abstract links): a delivery tagged
	// with an older epoch is discarded.
	epoch []uint32
	links [][]*AbstractLink // abstract: node, port -> its link

	q       timeq.Queue[delivery]
	seq     *uint64        // numbers deliveries in the order they were put
	clock   *time.Duration // the driver's time (ShareClock), if shared
	ownSeq  uint64
	pool    framePool
	popped  []byte // the data of the last Pop, recycled by the next (datagrams)
	session uint64 // abstract link sessions handed out

	// Sent counts datagrams written to the wires (lost ones included);
	// Delivered those handed to a far end.
	Sent, Delivered uint64
}

// Delivery is what arrives at an end.
type Delivery struct {
	At time.Duration
	To End
	// Data is valid until the next Pop; on abstract wires it is handed
	// over to the receiving end (AbstractLink.Input keeps it).
	Data []byte
}

// delivery is what the queue holds of a delivery; its time and sequence
// number are its key.
type delivery struct {
	to    End
	wire  int32
	epoch uint32
	data  []byte
}

// NewWires wires the ports of g as g's links say. rng is the wires' own
// source; the wires draw from it only when something crosses them.
func NewWires(g *topo.Graph, cfg Wiring, rng *rand.Rand) (*Wires, error) {
	if cfg.Abstract && (cfg.Drop > 0 || cfg.Duplicate > 0 || cfg.HoldOneIn > 0) {
		return nil, fmt.Errorf("nodetest: abstract links carry frames, not datagrams: they cannot drop, duplicate or hold one back")
	}
	if cfg.Drop < 0 || cfg.Duplicate < 0 || cfg.HoldOneIn < 0 || cfg.Drop+cfg.Duplicate > 1 || (cfg.HoldOneIn > 0 && cfg.HoldMax <= 0) {
		return nil, fmt.Errorf("nodetest: wire probabilities out of range")
	}
	n := g.N()
	w := &Wires{cfg: cfg, rng: rng, peer: make([][]End, n), index: make([][]int32, n), down: make([]bool, n)}
	w.seq = &w.ownSeq
	for i := range n {
		ports := g.Ports(noc.NodeID(i))
		w.peer[i] = make([]End, ports)
		w.index[i] = make([]int32, ports)
		for p := range ports {
			w.index[i][p] = -1
		}
	}
	for i, l := range g.Links() {
		a, b := End{l.A, l.PortA}, End{l.B, l.PortB}
		w.peer[a.Node][a.Port], w.peer[b.Node][b.Port] = b, a
		w.index[a.Node][a.Port], w.index[b.Node][b.Port] = int32(i), int32(i)
		w.ends = append(w.ends, [2]End{a, b})
	}
	w.cut = make([]bool, len(w.ends))
	w.epoch = make([]uint32, len(w.ends))
	if cfg.Abstract {
		w.links = make([][]*AbstractLink, n)
		for i := range n {
			w.links[i] = make([]*AbstractLink, len(w.peer[i]))
			for p := range w.peer[i] {
				w.links[i][p] = w.newLink(End{noc.NodeID(i), noc.PortID(p)})
			}
		}
		for i := range w.ends {
			w.carrier(0, i, true)
		}
	}
	return w, nil
}

// Abstract reports whether the wires carry frames between abstract links.
func (w *Wires) Abstract() bool { return w.cfg.Abstract }

// NumWires is the number of wires (the topology's links, in its order).
func (w *Wires) NumWires() int { return len(w.ends) }

// Wire returns the index of the wire between a and b.
func (w *Wires) Wire(a, b noc.NodeID) (int, bool) {
	for i, e := range w.ends {
		if (e[0].Node == a && e[1].Node == b) || (e[0].Node == b && e[1].Node == a) {
			return i, true
		}
	}
	return 0, false
}

// Link is the abstract link of end e (nil unless Wiring.Abstract). A
// revived node's ends get new links.
func (w *Wires) Link(e End) *AbstractLink {
	if !w.cfg.Abstract {
		return nil
	}
	return w.links[e.Node][e.Port]
}

// Put writes b from end from onto its wire (a copy is kept). Nothing
// crosses a cut wire, leaves or reaches a killed node.
func (w *Wires) Put(now time.Duration, from End, b []byte) {
	w.put(now, from, b)
}

func (w *Wires) put(now time.Duration, from End, b []byte) {
	w.Sent++
	to := w.peer[from.Node][from.Port]
	wire := w.index[from.Node][from.Port]
	if wire < 0 || w.cut[wire] || w.down[from.Node] || w.down[to.Node] {
		return
	}
	copies := 1
	if w.cfg.Drop > 0 || w.cfg.Duplicate > 0 {
		r := w.rng.Float64()
		switch {
		case r < w.cfg.Drop:
			return
		case r < w.cfg.Drop+w.cfg.Duplicate:
			copies = 2
		}
	}
	for range copies {
		data := append(w.pool.get(len(b)), b...)
		at := now + w.cfg.Delay
		if w.cfg.Jitter > 0 {
			at += time.Duration(w.rng.Int64N(int64(w.cfg.Jitter)))
		}
		if w.cfg.HoldOneIn > 0 && w.rng.IntN(w.cfg.HoldOneIn) == 0 {
			at += time.Duration(w.rng.Int64N(int64(w.cfg.HoldMax)))
		}
		if w.cfg.Abstract {
			// In order: never before what this end sent earlier (equal
			// times keep their order by sequence).
			last := &w.links[from.Node][from.Port].last
			at = max(at, *last)
			*last = at
		}
		*w.seq++
		w.q.Push(timeq.Key{At: at, Seq: *w.seq}, delivery{to: to, wire: wire, epoch: w.epoch[wire], data: data})
	}
}

// send puts a copy of msg on the wire of abstract link l, whose carrier is
// up: the wire is whole, both its nodes live and l.epoch is the wire's.
// It leaves at the driver's time (ShareClock) if that is later than now.
func (w *Wires) send(now time.Duration, l *AbstractLink, msg []byte) {
	w.Sent++
	if w.clock != nil {
		now = max(now, *w.clock)
	}
	at := now + w.cfg.Delay
	if w.cfg.Jitter > 0 {
		at += time.Duration(w.rng.Int64N(int64(w.cfg.Jitter)))
	}
	at = max(at, l.last) // in order, as put
	l.last = at
	*w.seq++
	w.q.Push(timeq.Key{At: at, Seq: *w.seq}, delivery{to: l.to, wire: l.wire, epoch: l.epoch, data: append(w.pool.get(len(msg)), msg...)})
}

// Next is the time of the earliest delivery in flight.
func (w *Wires) Next() (time.Duration, bool) {
	at, _, ok := w.NextSeq()
	return at, ok
}

// NextSeq is the time and sequence number of the earliest delivery in
// flight.
func (w *Wires) NextSeq() (at time.Duration, seq uint64, ok bool) {
	k, ok := w.q.Min()
	return k.At, k.Seq, ok
}

// ShareSequence numbers deliveries from seq, a counter the driver also
// numbers its own events from: a driver that merges its queue with the
// wires' by (time, sequence) then takes what is due at one time in the
// order it was scheduled.
func (w *Wires) ShareSequence(seq *uint64) { w.seq = seq }

// ShareClock has abstract links read the driver's time from now: a frame
// an abstract link is given leaves then, even when the core that sends it
// last stepped earlier (a frame an engine emitted for a host request the
// driver handed it directly leaves when the core is next asked for its
// deadline, with the time of its last step).
func (w *Wires) ShareClock(now *time.Duration) { w.clock = now }

// Pop takes the earliest delivery due at or before limit. Deliveries to a
// killed node, and frames of an older carrier, are discarded on the way.
func (w *Wires) Pop(limit time.Duration) (Delivery, bool) {
	if w.popped != nil {
		w.pool.put(w.popped)
		w.popped = nil
	}
	for k, ok := w.q.Min(); ok && k.At <= limit; k, ok = w.q.Min() {
		k, d := w.q.Pop()
		var stale bool
		if w.cfg.Abstract {
			// A killed node's links, and a cut wire's, start a new epoch.
			stale = d.epoch != w.links[d.to.Node][d.to.Port].epoch
		} else {
			stale = w.down[d.to.Node]
		}
		if stale {
			w.pool.put(d.data)
			continue
		}
		w.Delivered++
		if !w.cfg.Abstract {
			w.popped = d.data
		}
		return Delivery{At: k.At, To: d.to, Data: d.data}, true
	}
	return Delivery{}, false
}

// SetWire cuts (up=false) or restores wire i. Abstract links at its ends
// lose (or regain) their carrier.
func (w *Wires) SetWire(now time.Duration, i int, up bool) {
	if w.cut[i] == !up {
		return
	}
	w.cut[i] = !up
	if w.cfg.Abstract {
		w.carrier(now, i, up)
	}
}

// Cut reports whether wire i is cut.
func (w *Wires) Cut(i int) bool { return w.cut[i] }

// Kill stops node id: nothing leaves or reaches it until Revive. The
// abstract links facing it lose their carrier.
func (w *Wires) Kill(now time.Duration, id noc.NodeID) {
	if w.down[id] {
		return
	}
	w.down[id] = true
	if w.cfg.Abstract {
		for p := range w.index[id] {
			if i := w.index[id][p]; i >= 0 {
				w.carrier(now, int(i), false)
			}
		}
	}
}

// Revive brings node id back (a new incarnation: its ends get new abstract
// links, which come up with their neighbours).
func (w *Wires) Revive(now time.Duration, id noc.NodeID) {
	w.down[id] = false
	if !w.cfg.Abstract {
		return
	}
	for p := range w.links[id] {
		w.links[id][p] = w.newLink(End{id, noc.PortID(p)})
		if i := w.index[id][p]; i >= 0 {
			w.carrier(now, int(i), true)
		}
	}
}

// Down reports whether node id is killed.
func (w *Wires) Down(id noc.NodeID) bool { return w.down[id] }

// carrier raises or drops the carrier of wire i's abstract links. It rises
// only when the wire is whole and both nodes live; every change starts a
// new epoch, which discards frames still in flight.
func (w *Wires) carrier(now time.Duration, i int, up bool) {
	a, b := w.ends[i][0], w.ends[i][1]
	up = up && !w.cut[i] && !w.down[a.Node] && !w.down[b.Node]
	la, lb := w.links[a.Node][a.Port], w.links[b.Node][b.Port]
	if up && la.up && lb.up {
		return
	}
	w.epoch[i]++
	la.setCarrier(now, up, w.epoch[i], lb.session)
	lb.setCarrier(now, up, w.epoch[i], la.session)
}

func (w *Wires) newLink(e End) *AbstractLink {
	w.session++
	return newAbstractLink(w.session, w, e)
}
