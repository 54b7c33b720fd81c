package node_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// recorder is a Handler that records the frames it is given.
type recorder struct {
	got []noc.Frame
}

func (r *recorder) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, out noc.Routes) {
	g := *f
	g.Payload = append([]byte(nil), f.Payload...)
	g.Contents = nil
	r.got = append(r.got, g)
}
func (r *recorder) PortState(time.Duration, noc.PortID, bool, noc.NodeID, noc.Routes) {}
func (r *recorder) Tick(time.Duration, noc.Routes)                                    {}
func (r *recorder) NextDeadline() (time.Duration, bool)                               { return 0, false }
func (r *recorder) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing                    { return dst }

func fabric(t *testing.T, kind string, n int, cfg nodetest.Config) (*nodetest.Fabric, *topo.Graph, []*recorder) {
	t.Helper()
	g, err := topo.Generate(kind, n, topo.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*recorder, n)
	cfg.Handler = func(id noc.NodeID) node.Handler { recs[id] = &recorder{}; return recs[id] }
	f, err := nodetest.New(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, g, recs
}

func TestConvergeAndRouteHops(t *testing.T) {
	for _, kind := range []string{"ring", "line", "tree", "smallworld", "torus2d"} {
		t.Run(kind, func(t *testing.T) {
			f, g, _ := fabric(t, kind, 16, nodetest.Config{Seed: 1, Drop: 0.05, Duplicate: 0.05, Jitter: 50 * time.Microsecond})
			if !f.RunUntil(30*time.Second, f.Converged) {
				t.Fatalf("no convergence by %v", f.Now())
			}
			f.Run(2 * time.Second) // let the last LSAs settle
			for i, c := range f.Cores {
				dist := g.Distances(noc.NodeID(i))
				for _, r := range c.Routing().Routes() {
					if want := dist[r.Dst]; r.Hops != want {
						t.Errorf("node %d -> %v: %d hops, want %d", i, r.Dst, r.Hops, want)
					}
				}
			}
		})
	}
}

func TestForwardAcrossFabric(t *testing.T) {
	f, _, recs := fabric(t, "line", 5, nodetest.Config{Seed: 2, Drop: 0.1})
	if !f.RunUntil(30*time.Second, f.Converged) {
		t.Fatal("no convergence")
	}
	const n = 500
	for i := range n {
		fr := noc.Frame{Class: noc.ClassStore, Op: 1, Src: 0, Dst: 4, RequestID: uint64(i), GVA: gva.New(0, 1, 0, 0), Payload: make([]byte, 4096)}
		if err := f.Cores[0].SendNode(&fr); err != nil {
			// backpressure: let the fabric drain, then retry
			f.Run(10 * time.Millisecond)
			if err := f.Cores[0].SendNode(&fr); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		f.Run(100 * time.Microsecond)
	}
	f.RunUntil(f.Now()+10*time.Second, func() bool { return len(recs[4].got) == n })
	if len(recs[4].got) != n {
		t.Fatalf("delivered %d of %d", len(recs[4].got), n)
	}
	for i, fr := range recs[4].got {
		if fr.RequestID != uint64(i) || fr.Hops != 3 || len(fr.Payload) != 4096 {
			t.Fatalf("frame %d: req %d hops %d len %d", i, fr.RequestID, fr.Hops, len(fr.Payload))
		}
	}
	for i := 1; i < 4; i++ {
		if len(recs[i].got) != 0 {
			t.Fatalf("middle node %d handed %d frames to its engine", i, len(recs[i].got))
		}
		if f.Cores[i].Stats().Forwarded < n {
			t.Fatalf("middle node %d forwarded %d", i, f.Cores[i].Stats().Forwarded)
		}
	}
}

func TestLinkLossReroutesAndNodeDeath(t *testing.T) {
	lc := link.DefaultConfig()
	lc.HeartbeatInterval = 20 * time.Millisecond
	lc.DeadInterval = 200 * time.Millisecond
	lc.MaxRTO = 100 * time.Millisecond
	f, _, _ := fabric(t, "ring", 6, nodetest.Config{Seed: 4, Link: &lc})
	if !f.RunUntil(10*time.Second, f.Converged) {
		t.Fatal("no convergence")
	}
	if _, hops, _ := f.Cores[0].NextHop(1); hops != 1 {
		t.Fatalf("0->1 %d hops", hops)
	}
	if err := f.SetLink(0, 1, false); err != nil {
		t.Fatal(err)
	}
	rerouted := func() bool { _, h, ok := f.Cores[0].NextHop(1); return ok && h == 5 }
	start := f.Now()
	if !f.RunUntil(start+5*time.Second, rerouted) {
		t.Fatal("no reroute around the cut link")
	}
	if took := f.Now() - start; took > lc.DeadInterval+500*time.Millisecond {
		t.Fatalf("reroute took %v, dead interval %v", took, lc.DeadInterval)
	}
	f.SetLink(0, 1, true)
	if !f.RunUntil(f.Now()+5*time.Second, func() bool { _, h, _ := f.Cores[0].NextHop(1); return h == 1 }) {
		t.Fatal("no return to the direct link")
	}
	f.Kill(3)
	gone := func() bool {
		for i, c := range f.Cores {
			if i == 3 {
				continue
			}
			if _, _, ok := c.NextHop(3); ok {
				return false
			}
		}
		return true
	}
	if !f.RunUntil(f.Now()+30*time.Second, gone) {
		t.Fatal("dead node 3 still routed")
	}
	if err := f.Restart(3); err != nil {
		t.Fatal(err)
	}
	if !f.RunUntil(f.Now()+30*time.Second, f.Converged) {
		t.Fatal("restarted node did not rejoin")
	}
}

func TestDeterministic(t *testing.T) {
	run := func() uint64 {
		f, _, _ := fabric(t, "smallworld", 12, nodetest.Config{Seed: 9, Drop: 0.1, Jitter: time.Millisecond})
		f.Run(3 * time.Second)
		return f.Datagrams
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("same seed, %d vs %d datagrams", a, b)
	}
}

func TestEchoAnsweredByTheCore(t *testing.T) {
	f, _, recs := fabric(t, "line", 4, nodetest.Config{Seed: 5})
	if !f.RunUntil(10*time.Second, f.Converged) {
		t.Fatal("no convergence")
	}
	req := noc.Frame{Class: noc.ClassControl, Op: noc.OpEcho, Src: 0, Dst: 3, RequestID: 77, Payload: []byte("ping")}
	if err := f.Cores[0].SendNode(&req); err != nil {
		t.Fatal(err)
	}
	f.RunUntil(f.Now()+time.Second, func() bool { return len(recs[0].got) == 1 })
	if len(recs[0].got) != 1 {
		t.Fatalf("node 0 got %d frames", len(recs[0].got))
	}
	got := recs[0].got[0]
	if got.Flags&noc.FlagReply == 0 || got.Src != 3 || got.Dst != 0 || got.RequestID != 77 || string(got.Payload) != "ping" || got.Hops != 2 {
		t.Fatalf("echo reply %v", &got)
	}
	if len(recs[3].got) != 0 || f.Cores[3].Stats().Echoes != 1 {
		t.Fatal("echo went to the engine instead of the core")
	}
}

// TestBackpressureHoldsInsteadOfDropping: a burst far larger than the
// links' windows crosses two middle cores without a loss; the middle
// cores hold frames and push back instead of dropping them.
func TestBackpressureHoldsInsteadOfDropping(t *testing.T) {
	f, _, recs := fabric(t, "line", 4, nodetest.Config{Seed: 6, Drop: 0.05})
	if !f.RunUntil(30*time.Second, f.Converged) {
		t.Fatal("no convergence")
	}
	const n = 3000
	sent := 0
	// frames too large for two to share a datagram: packing does not
	// shrink the burst below the windows
	fr := noc.Frame{Class: noc.ClassStore, Op: 1, Src: 0, Dst: 3, Payload: make([]byte, 1000)}
	for sent < n {
		fr.RequestID = uint64(sent)
		if err := f.Cores[0].SendNode(&fr); err != nil {
			f.Run(time.Millisecond) // the source's own window is full
			continue
		}
		sent++
	}
	f.RunUntil(f.Now()+30*time.Second, func() bool { return len(recs[3].got) == n })
	if len(recs[3].got) != n {
		t.Fatalf("delivered %d of %d (held %d, held drops %d, send errors %d)", len(recs[3].got), n,
			f.Cores[1].Stats().Held, f.Cores[1].Stats().HeldDrops, f.Cores[1].Stats().SendErrors)
	}
	for i, fr := range recs[3].got {
		if fr.RequestID != uint64(i) {
			t.Fatalf("frame %d arrived as %d", fr.RequestID, i)
		}
	}
	if held := f.Cores[1].Stats().Held + f.Cores[2].Stats().Held; held == 0 {
		t.Fatal("no frame was ever held: the test did not exercise back-pressure")
	}
}

// TestRoutingFloodLargerThanTheSendQueue: a fabric whose routing flood
// exceeds the links' send queues still converges: refused routing frames
// wait for the link instead of being dropped.
func TestRoutingFloodLargerThanTheSendQueue(t *testing.T) {
	lc := link.DefaultConfig()
	lc.MaxMessage = 4096 + noc.HeaderLen
	lc.Window, lc.SendQueue = 4, 4
	f, g, _ := fabric(t, "smallworld", 64, nodetest.Config{Seed: 8, Link: &lc})
	if !f.RunUntil(10*time.Second, f.Converged) {
		t.Fatalf("no convergence by %v", f.Now())
	}
	f.Run(time.Second)
	for i, c := range f.Cores {
		dist := g.Distances(noc.NodeID(i))
		for _, r := range c.Routing().Routes() {
			if r.Hops != dist[r.Dst] {
				t.Fatalf("node %d -> %v: %d hops, want %d", i, r.Dst, r.Hops, dist[r.Dst])
			}
		}
	}
}

// burster is a Handler that emits a burst of frames to dst from its first
// Tick after arm is set, and records what it receives.
type burster struct {
	recorder
	dst  noc.NodeID
	n    int
	arm  bool
	sent bool
}

func (b *burster) Tick(time.Duration, noc.Routes) {}
func (b *burster) NextDeadline() (time.Duration, bool) {
	if b.arm && !b.sent {
		return 0, true
	}
	return 0, false
}
func (b *burster) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing {
	if !b.arm || b.sent {
		return dst
	}
	b.sent = true
	for i := range b.n {
		dst = append(dst, noc.Outgoing{Port: noc.NoPort, Frame: noc.Frame{Class: noc.ClassStore, Op: 2, Dst: b.dst, RequestID: uint64(i), Payload: make([]byte, 64)}})
	}
	return dst
}

// TestOwnFramesWaitForTheLink: a burst of the engine's own frames (an
// owner's updates to its replicas, say) far larger than the link's
// window and send queue arrives whole and in order: what the link
// refuses waits in the port's backlog instead of being dropped.
func TestOwnFramesWaitForTheLink(t *testing.T) {
	lc := link.DefaultConfig()
	lc.MaxMessage = 4096 + noc.HeaderLen
	lc.Window, lc.SendQueue = 8, 8
	g, err := topo.Generate("line", 2, topo.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	hs := make([]*burster, 2)
	f, err := nodetest.New(g, nodetest.Config{Seed: 4, Drop: 0.05, Link: &lc, Handler: func(id noc.NodeID) node.Handler {
		hs[id] = &burster{dst: 1 - id}
		return hs[id]
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.RunUntil(30*time.Second, f.Converged) {
		t.Fatal("no convergence")
	}
	hs[0].n, hs[0].arm = n, true
	f.RunUntil(f.Now()+30*time.Second, func() bool { return len(hs[1].got) >= n })
	st := f.Cores[0].Stats()
	if len(hs[1].got) != n {
		t.Fatalf("delivered %d of %d (queued %d, dropped %d, send errors %d)", len(hs[1].got), n, st.OwnQueued, st.OwnDrops, st.SendErrors)
	}
	for i, fr := range hs[1].got {
		if fr.RequestID != uint64(i) {
			t.Fatalf("frame %d arrived as %d", fr.RequestID, i)
		}
	}
	if st.OwnQueued == 0 {
		t.Fatal("no frame waited: the test did not fill the link")
	}
}
