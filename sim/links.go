package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/node/nodetest"
)

// Links is what the simulated nodes' ports talk through.
type Links uint8

// Link modes.
const (
	// LinksReal: every port runs the real link layer (noc/link: headers,
	// windows, acks, retransmissions, heartbeats, the dead interval) over
	// wires that carry its datagrams. Every fault kind works.
	LinksReal Links = iota
	// LinksAbstract: every port is a nodetest.AbstractLink, and a wire
	// carries whole NoC frames from one to the other, in order and without
	// loss, after a delay drawn from the seeded source. Routing, the path
	// cache, the coherence engine and the host sessions are the same code;
	// only the link layer is left out, so a request puts less than half
	// as many frames on the wires (no acks, heartbeats or retransmissions)
	// and there are no link timers to run. It is for large fabrics. Flaps
	// and crashes work: a cut wire or a failed node drops the carrier of
	// its links at once (the frames in flight on them are lost, and each side
	// sees its port go down), and a restored wire or a restarted node
	// raises it with the peer's session. Drop and delay act on link-layer
	// datagrams and are refused here. Routing gathers a node's adjacencies
	// into one LSA and refreshes it every 10 s (routeConfig).
	LinksAbstract
)

// ParseLinks reads "real" or "abstract".
func ParseLinks(s string) (Links, error) {
	switch s {
	case "real":
		return LinksReal, nil
	case "abstract":
		return LinksAbstract, nil
	}
	return 0, fmt.Errorf("sim: unknown link mode %q (want real or abstract)", s)
}

func (l Links) String() string {
	if l == LinksAbstract {
		return "abstract"
	}
	return "real"
}

// ErrFaultsNeedRealLinks refuses the datagram faults on abstract links.
var ErrFaultsNeedRealLinks = errors.New("sim: drop and delay need the real link layer: they act on its datagrams, and abstract links carry whole frames without loss (run them on real links; flap and crash work on both)")

// check refuses a configuration that makes no sense.
func (c Config) check() error {
	if c.Links == LinksAbstract && c.Faults&(FaultDrop|FaultDelay) != 0 {
		return ErrFaultsNeedRealLinks
	}
	return nil
}

// wiring is what the wires of a run do: the usual delay and jitter, and
// with the datagram faults, loss, duplicates and long delays.
func wiring(cfg Config) nodetest.Wiring {
	wr := nodetest.Wiring{Delay: wireDelay, Jitter: wireJitter, Abstract: cfg.Links == LinksAbstract}
	if cfg.Faults&FaultDrop != 0 {
		wr.Drop, wr.Duplicate = 0.01, 0.005
	}
	if cfg.Faults&FaultDelay != 0 {
		wr.HoldOneIn, wr.HoldMax = 100, 2*time.Millisecond
	}
	return wr
}

// settle moves a node's output onto the wires and schedules its next wake.
func (w *World) settle(n *simNode) {
	if !n.alive {
		return
	}
	if n.eng.StopErr() != nil && !n.syncFailed {
		// Its disk crashed in the middle of a sync (a power cut): the
		// engine stopped before anything of that step left; the node
		// fails now and comes back with what its disk kept.
		n.syncFailed = true
		w.faults = append(w.faults, fault{kind: fCrash, node: int(n.id), n: 1}, fault{kind: fRestart, node: int(n.id)})
		w.push(event{at: w.now, kind: evFault, n: len(w.faults) - 2})
		w.push(event{at: w.now + 5*time.Millisecond + time.Duration(w.faultRNG.Int64N(int64(20*time.Millisecond))), kind: evFault, n: len(w.faults) - 1})
	}
	if !w.wires.Abstract() {
		w.flush(n)
	}
	// With abstract links NextDeadline also moves what the engine emitted
	// onto the wires: an abstract link puts every frame sent on its wire
	// at once.
	d := n.core.NextDeadline()
	if d == time.Duration(1<<63-1) {
		return
	}
	d = max(d, w.now)
	if n.wakeAt >= w.now && n.wakeAt <= d {
		return // an earlier (or the same) wake is already queued
	}
	n.wakeAt = d
	w.push(event{at: d, kind: evWake, node: n.id})
}

// flush moves a node's link-layer datagrams onto the wires.
func (w *World) flush(n *simNode) {
	from := nodetest.End{Node: n.id}
	for p := 0; p < n.ports; p++ {
		from.Port = noc.PortID(p)
		for {
			k, ok := n.core.Output(w.now, from.Port, w.buf)
			if !ok {
				break
			}
			w.wires.Put(w.now, from, w.buf[:k])
		}
	}
}

// deliver hands what the wires deliver now to its node.
func (w *World) deliver() {
	d, ok := w.wires.Pop(w.now)
	if !ok {
		return
	}
	if n := w.nodes[d.To.Node]; n.alive {
		_ = n.core.Input(w.now, d.To.Port, d.Data)
		w.settle(n)
	}
}

// setWire cuts or restores link i. An abstract link's ends see it at once.
func (w *World) setWire(i int, up bool) {
	w.wires.SetWire(w.now, i, up)
	if w.wires.Abstract() {
		l := w.graph.Links()[i]
		w.settle(w.nodes[l.A])
		w.settle(w.nodes[l.B])
	}
}

// kill takes a crashed node off the wires; its abstract neighbours lose
// their carrier at once.
func (w *World) kill(n *simNode) {
	w.wires.Kill(w.now, n.id)
	w.settleNeighbours(n)
}

// revive puts a restarting node back on the wires (before it boots: its
// ports get new abstract links).
func (w *World) revive(n *simNode) {
	w.wires.Revive(w.now, n.id)
	w.settleNeighbours(n)
}

func (w *World) settleNeighbours(n *simNode) {
	if !w.wires.Abstract() {
		return
	}
	for p := 0; p < n.ports; p++ {
		if peer, ok := w.graph.Peer(n.id, noc.PortID(p)); ok {
			w.settle(w.nodes[peer.Node])
		}
	}
}
