package route

import (
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// loadedState returns the State of node 0 of g with the whole database of
// g installed: its own ports up and adjacent, and every other node's LSA
// received on port 0, as after convergence.
func loadedState(tb testing.TB, g *topo.Graph) *State {
	tb.Helper()
	s, err := New(0, Config{})
	must(tb, err)
	hello := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassControl, Op: OpHello, Dst: noc.BroadcastNode}
	for p := 0; p < g.Ports(0); p++ {
		pe, _ := g.Peer(0, noc.PortID(p))
		must(tb, s.PortUp(0, noc.PortID(p)))
		hello.Src = pe.Node
		hello.Payload = Hello{Port: pe.Port, Reply: true}.AppendTo(nil)
		must(tb, s.HandleFrame(0, noc.PortID(p), &hello))
	}
	lsa := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassControl, Op: OpLSA, Src: 1, Dst: noc.BroadcastNode}
	for n := 1; n < g.N(); n++ {
		l := LSA{Origin: noc.NodeID(n), Seq: 1}
		for p := 0; p < g.Ports(noc.NodeID(n)); p++ {
			if pe, ok := g.Peer(noc.NodeID(n), noc.PortID(p)); ok {
				l.Adjacencies = append(l.Adjacencies, Adjacency{Port: noc.PortID(p), Neighbour: pe.Node, NeighbourPort: pe.Port})
			}
		}
		lsa.Payload = l.AppendTo(nil)
		must(tb, s.HandleFrame(0, 0, &lsa))
	}
	s.Tick(0)
	s.Outputs(func(noc.PortID, *noc.Frame) {})
	if len(s.Routes()) != g.N()-1 {
		tb.Fatalf("%d routes for %d nodes", len(s.Routes()), g.N())
	}
	return s
}

// BenchmarkComputeRoutes is one full recomputation of the routing table
// of a 1,024-node small-world fabric.
func BenchmarkComputeRoutes(b *testing.B) {
	for _, k := range []int{4, 6, 8} {
		b.Run(fmt.Sprintf("smallworld-1024-ports%d", k), func(b *testing.B) {
			g, err := topo.Generate("smallworld", 1024, topo.Options{Ports: k, Seed: 1})
			must(b, err)
			s := loadedState(b, g)
			b.ReportAllocs()
			for b.Loop() {
				s.computeRoutes(time.Second)
			}
		})
		// The same, with the table found changed every time (the
		// next-hop index is rebuilt as after a link failure).
		b.Run(fmt.Sprintf("smallworld-1024-ports%d-changed", k), func(b *testing.B) {
			g, err := topo.Generate("smallworld", 1024, topo.Options{Ports: k, Seed: 1})
			must(b, err)
			s := loadedState(b, g)
			b.ReportAllocs()
			for b.Loop() {
				s.table = s.table[:0]
				s.computeRoutes(time.Second)
			}
		})
	}
}

func BenchmarkNextHop(b *testing.B) {
	g, err := topo.Generate("smallworld", 1024, topo.Options{Ports: 6, Seed: 1})
	must(b, err)
	s := loadedState(b, g)
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		_, h, _ := s.NextHop(noc.NodeID(i & 1023))
		sink += h
		i++
	}
	_ = sink
}
