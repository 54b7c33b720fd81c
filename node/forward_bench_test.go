package node_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// sink is a Handler that counts frames and keeps nothing.
type sink struct{ n int }

func (s *sink) HandleFrame(time.Duration, noc.PortID, *noc.Frame, noc.Routes)     { s.n++ }
func (s *sink) PortState(time.Duration, noc.PortID, bool, noc.NodeID, noc.Routes) {}
func (s *sink) Tick(time.Duration, noc.Routes)                                    {}
func (s *sink) NextDeadline() (time.Duration, bool)                               { return 0, false }
func (s *sink) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing                    { return dst }

// line builds a converged line of n cores whose engines are sinks.
func line(tb testing.TB, n int) (*nodetest.Fabric, []*sink) {
	g, err := topo.Generate("line", n, topo.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	sinks := make([]*sink, n)
	f, err := nodetest.New(g, nodetest.Config{Seed: 1, Handler: func(id noc.NodeID) node.Handler { sinks[id] = &sink{}; return sinks[id] }})
	if err != nil {
		tb.Fatal(err)
	}
	if !f.RunUntil(10*time.Second, f.Converged) {
		tb.Fatal("no convergence")
	}
	f.Run(time.Second)
	return f, sinks
}

// pump moves every datagram between neighbouring cores of a line until
// none is left, without advancing time.
func pump(f *nodetest.Fabric, now time.Duration, buf []byte) {
	for moved := true; moved; {
		moved = false
		for i, c := range f.Cores {
			for p := 0; p < c.NumPorts(); p++ {
				far, farPort := i+1, noc.PortID(0)
				if p == 0 && i > 0 {
					far, farPort = i-1, noc.PortID(f.Cores[i-1].NumPorts()-1)
				}
				for {
					n, ok := c.Output(now, noc.PortID(p), buf)
					if !ok {
						break
					}
					moved = true
					_ = f.Cores[far].Input(now, farPort, buf[:n])
				}
			}
		}
	}
}

// benchLine sends 64-byte frames from the first to the last core of a
// line of n cores, pumping after every batch of 32.
func benchLine(b *testing.B, n int) {
	f, sinks := line(b, n)
	now := f.Now()
	buf := make([]byte, 1500)
	fr := noc.Frame{Class: noc.ClassStore, Op: 1, Src: 0, Dst: noc.NodeID(n - 1), GVA: gva.New(0, 1, 0, 0), Payload: make([]byte, 64)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fr.RequestID = uint64(i)
		if err := f.Cores[0].SendNode(&fr); err != nil {
			b.Fatal(err)
		}
		if i%32 == 31 {
			pump(f, now, buf)
		}
	}
	pump(f, now, buf)
	b.StopTimer()
	if sinks[n-1].n != b.N {
		b.Fatalf("delivered %d of %d", sinks[n-1].n, b.N)
	}
}

// BenchmarkForwardMiddle is a 3-core line; BenchmarkForwardDirect the
// same traffic over a 2-core line. Their difference is the cost of the
// middle core: link input + dispatch + forward + link output.
func BenchmarkForwardMiddle(b *testing.B) { benchLine(b, 3) }
func BenchmarkForwardDirect(b *testing.B) { benchLine(b, 2) }

// TestForwardAllocs pins the middle core's hot path at zero allocations,
// and checks that the frames measured really crossed it: every send
// accepted, every frame forwarded by the middle core and delivered at the
// far end (a path that drops or refuses frames allocates nothing either).
func TestForwardAllocs(t *testing.T) {
	f, sinks := line(t, 3)
	now := f.Now()
	buf := make([]byte, 1500)
	fr := noc.Frame{Class: noc.ClassStore, Op: 1, Src: 0, Dst: 2, Payload: make([]byte, 64)}
	var sendErr error
	sent := 0
	send := func() {
		for range 32 {
			if err := f.Cores[0].SendNode(&fr); err != nil && sendErr == nil {
				sendErr = err
			}
			sent++
		}
		pump(f, now, buf)
	}
	fwd0 := f.Cores[1].Stats().Forwarded
	send()
	if n := testing.AllocsPerRun(100, send); n != 0 {
		t.Fatalf("forwarding allocates %v per 32 frames", n)
	}
	if sendErr != nil {
		t.Fatalf("SendNode: %v", sendErr)
	}
	if fwd := f.Cores[1].Stats().Forwarded - fwd0; fwd != uint64(sent) || sinks[2].n != sent {
		t.Fatalf("sent %d frames: the middle core forwarded %d, the far end got %d", sent, fwd, sinks[2].n)
	}
}
