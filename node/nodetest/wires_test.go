package nodetest_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// order puts n numbered datagrams on the wire of a two-node line and
// reports whether they arrived in the order they were put.
func order(t *testing.T, abstract bool, n int) (inOrder bool, got int) {
	t.Helper()
	g, err := topo.Generate("line", 2, topo.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := nodetest.NewWires(g, nodetest.Wiring{Delay: 5 * time.Microsecond, Jitter: 50 * time.Microsecond, Abstract: abstract}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	from := nodetest.End{Node: 0, Port: 0}
	for i := range n {
		w.Put(time.Duration(i)*time.Microsecond, from, binary.BigEndian.AppendUint32(nil, uint32(i)))
	}
	inOrder = true
	for {
		d, ok := w.Pop(time.Hour)
		if !ok {
			break
		}
		if d.To != (nodetest.End{Node: 1, Port: 0}) {
			t.Fatalf("delivered to %v", d.To)
		}
		if binary.BigEndian.Uint32(d.Data) != uint32(got) {
			inOrder = false
		}
		got++
	}
	return inOrder, got
}

func TestAbstractWiresKeepOrder(t *testing.T) {
	if ok, got := order(t, true, 500); !ok || got != 500 {
		t.Fatalf("abstract wire: in order %v, %d of 500 delivered", ok, got)
	}
	// The same jitter reorders datagrams on a plain wire (which the real
	// link layer puts back in order): the check above can fail.
	if ok, got := order(t, false, 500); ok || got != 500 {
		t.Fatalf("plain wire: in order %v, %d of 500 delivered", ok, got)
	}
}

func TestAbstractWiresRefuseDatagramFaults(t *testing.T) {
	g, _ := topo.Generate("line", 2, topo.Options{Seed: 1})
	for _, c := range []nodetest.Wiring{{Drop: 0.1}, {Duplicate: 0.1}, {HoldOneIn: 10, HoldMax: time.Millisecond}} {
		c.Abstract = true
		if _, err := nodetest.NewWires(g, c, rand.New(rand.NewPCG(1, 2))); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestAbstractCarrierDiscardsFramesInFlight(t *testing.T) {
	g, _ := topo.Generate("line", 2, topo.Options{Seed: 1})
	w, err := nodetest.NewWires(g, nodetest.Wiring{Delay: 10 * time.Microsecond, Abstract: true}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	a, b := w.Link(nodetest.End{Node: 0}), w.Link(nodetest.End{Node: 1})
	if !a.Up() || !b.Up() {
		t.Fatal("carrier not up at start")
	}
	w.Put(0, nodetest.End{Node: 0}, []byte("old"))
	w.SetWire(time.Microsecond, 0, false)
	if a.Up() || b.Up() {
		t.Fatal("carrier up on a cut wire")
	}
	w.Put(2*time.Microsecond, nodetest.End{Node: 0}, []byte("cut"))
	w.SetWire(3*time.Microsecond, 0, true)
	w.Put(4*time.Microsecond, nodetest.End{Node: 0}, []byte("new"))
	var got []string
	for {
		d, ok := w.Pop(time.Second)
		if !ok {
			break
		}
		got = append(got, string(d.Data))
	}
	if len(got) != 1 || got[0] != "new" {
		t.Fatalf("delivered %q, want only the frame sent after the carrier came back", got)
	}
	var kinds []bool
	for {
		ev, ok := b.PollEvent()
		if !ok {
			break
		}
		kinds = append(kinds, ev.Up)
	}
	if len(kinds) != 3 || !kinds[0] || kinds[1] || !kinds[2] {
		t.Fatalf("carrier events up/down: %v, want up, down, up", kinds)
	}
}

// sink records the frames given to one node's engine.
type sink struct{ got []string }

func (s *sink) HandleFrame(_ time.Duration, _ noc.PortID, f *noc.Frame, _ noc.Routes) {
	s.got = append(s.got, string(f.Payload))
}
func (s *sink) PortState(time.Duration, noc.PortID, bool, noc.NodeID, noc.Routes) {}
func (s *sink) Tick(time.Duration, noc.Routes)                                    {}
func (s *sink) NextDeadline() (time.Duration, bool)                               { return 0, false }
func (s *sink) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing                    { return dst }

// TestAbstractFabric runs the real routing over abstract links: it
// converges, carries frames, routes around a cut wire and a killed node at
// once (the carrier drops), takes a restarted node back, and replays
// exactly.
func TestAbstractFabric(t *testing.T) {
	run := func() (uint64, time.Duration) {
		g, err := topo.Generate("ring", 6, topo.Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		sinks := make([]*sink, 6)
		f, err := nodetest.New(g, nodetest.Config{Seed: 7, Abstract: true, Jitter: 20 * time.Microsecond,
			Handler: func(id noc.NodeID) node.Handler { sinks[id] = &sink{}; return sinks[id] }})
		if err != nil {
			t.Fatal(err)
		}
		if !f.RunUntil(time.Second, f.Converged) {
			t.Fatal("no convergence over abstract links")
		}
		converged := f.Now()
		for i := range 20 {
			fr := noc.Frame{Src: 0, Dst: 3, Payload: []byte{byte(i)}}
			if err := f.Cores[0].SendNode(&fr); err != nil {
				t.Fatal(err)
			}
		}
		f.Run(time.Millisecond)
		if len(sinks[3].got) != 20 {
			t.Fatalf("node 3 got %d of 20 frames", len(sinks[3].got))
		}
		for i, p := range sinks[3].got {
			if p != string([]byte{byte(i)}) {
				t.Fatalf("frame %d out of order", i)
			}
		}
		if err := f.SetLink(0, 1, false); err != nil {
			t.Fatal(err)
		}
		if !f.RunUntil(f.Now()+10*time.Millisecond, func() bool { _, h, ok := f.Cores[0].NextHop(1); return ok && h == 5 }) {
			t.Fatal("no reroute around the cut wire")
		}
		f.SetLink(0, 1, true)
		if !f.RunUntil(f.Now()+10*time.Millisecond, func() bool { _, h, _ := f.Cores[0].NextHop(1); return h == 1 }) {
			t.Fatal("no return to the restored wire")
		}
		f.Kill(3)
		if !f.RunUntil(f.Now()+time.Second, f.Converged) {
			t.Fatal("killed node still routed")
		}
		if err := f.Restart(3); err != nil {
			t.Fatal(err)
		}
		if !f.RunUntil(f.Now()+time.Second, f.Converged) {
			t.Fatal("restarted node did not rejoin")
		}
		return f.Datagrams, converged
	}
	d1, c1 := run()
	d2, c2 := run()
	if d1 != d2 || c1 != c2 {
		t.Fatalf("same seed: %d frames converged at %v, then %d at %v", d1, c1, d2, c2)
	}
}
