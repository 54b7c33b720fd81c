package agent_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
)

// cable is a UDP link between two agents' ports that a test can cut: the
// ports talk to it, not to each other, and while it is cut it drops every
// datagram both ways, as a pulled cable would.
type cable struct {
	ends [2]noc.NodeID
	a, b *net.UDPConn // a talks to the port of ends[0], b to that of ends[1]
	pa   *net.UDPAddr // the port of ends[0]
	pb   *net.UDPAddr // the port of ends[1]
	cut  atomic.Bool
	lost atomic.Uint64
}

// pump copies what from reads to dst through to, until from is closed.
func (w *cable) pump(from, to *net.UDPConn, dst *net.UDPAddr) {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := from.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if w.cut.Load() {
			w.lost.Add(1)
			continue
		}
		to.WriteToUDP(buf[:n], dst) //nolint:errcheck // a lost datagram is the link layer's to retransmit
	}
}

// heldUDP is a loopback address HoldUDP holds for an agent's port.
func heldUDP(tb testing.TB) *net.UDPAddr {
	tb.Helper()
	return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(agent.HoldUDP(tb, 1)[0]))
}

// startRing starts n agents wired in a ring (i to i+1 and n-1 to 0) over
// UDP loopback through cables the test can cut; wires[i] joins node i and
// node i+1 mod n. It waits until every agent routes to every other.
func startRing(tb testing.TB, n int, configure func(*agent.Config)) ([]*liveNode, []*cable) {
	tb.Helper()
	wires := make([]*cable, n)
	for i := range wires {
		w := &cable{ends: [2]noc.NodeID{noc.NodeID(i), noc.NodeID((i + 1) % n)}, pa: heldUDP(tb), pb: heldUDP(tb)}
		var err error
		if w.a, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			tb.Fatal(err)
		}
		if w.b, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			tb.Fatal(err)
		}
		wires[i] = w
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { // after the agents stopped (cleanups run last first)
		for _, w := range wires {
			w.a.Close()
			w.b.Close()
		}
		wg.Wait()
	})
	for _, w := range wires {
		wg.Go(func() { w.pump(w.a, w.b, w.pb) })
		wg.Go(func() { w.pump(w.b, w.a, w.pa) })
	}
	nodes := startNodes(tb, n, func(i int, cfg *agent.Config) {
		for _, w := range wires {
			switch noc.NodeID(i) {
			case w.ends[0]:
				cfg.Ports = append(cfg.Ports, agent.PortSpec{Name: fmt.Sprintf("p%d", w.ends[1]), Kind: agent.PortUDPHeld,
					Args: []string{w.pa.String(), w.a.LocalAddr().String()}})
			case w.ends[1]:
				cfg.Ports = append(cfg.Ports, agent.PortSpec{Name: fmt.Sprintf("p%d", w.ends[0]), Kind: agent.PortUDPHeld,
					Args: []string{w.pb.String(), w.b.LocalAddr().String()}})
			}
		}
		if configure != nil {
			configure(cfg)
		}
	})
	return nodes, wires
}

// between returns the cable that joins nodes a and b.
func between(tb testing.TB, wires []*cable, a, b noc.NodeID) *cable {
	tb.Helper()
	for _, w := range wires {
		if w.ends == [2]noc.NodeID{a, b} || w.ends == [2]noc.NodeID{b, a} {
			return w
		}
	}
	tb.Fatalf("no cable between %d and %d", a, b)
	return nil
}

// nextHop asks node nd which neighbour it routes toward dst by.
func nextHop(tb testing.TB, nd *liveNode, dst noc.NodeID) noc.NodeID {
	tb.Helper()
	c, ctx := dialCtl(tb, nd.runDir)
	rs, err := c.Routes(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rs {
		if r.Dst == dst {
			return r.NextHop
		}
	}
	tb.Fatalf("%s has no route to %d", nd.runDir, dst)
	return 0
}

// mend joins a cut cable again and waits (bounded) until both of its
// ends hear each other and every agent routes to every other node by a
// shortest way round the ring.
func mend(tb testing.TB, nodes []*liveNode, w *cable) {
	tb.Helper()
	w.cut.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for k, end := range w.ends {
		c, err := ctl.Dial(filepath.Join(nodes[end].runDir, "ctl.sock"))
		if err != nil {
			tb.Fatal(err)
		}
		for up := false; !up; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ns, err := c.Neighbours(ctx)
			cancel()
			for _, n := range ns {
				up = up || err == nil && n.Node == w.ends[1-k] && n.State == ctl.NeighReachable
			}
			if !up && time.Now().After(deadline) {
				c.Close()
				tb.Fatalf("the link %d–%d did not come back: %v %v", w.ends[0], w.ends[1], ns, err)
			}
			if !up {
				time.Sleep(20 * time.Millisecond)
			}
		}
		c.Close()
	}
	waitRoutes(tb, nodes)
	waitRingRoutes(tb, nodes)
}

// waitRingRoutes waits (bounded) until every agent of a ring of
// len(nodes) routes to every other node in as many hops as the shorter
// way round the ring takes.
func waitRingRoutes(tb testing.TB, nodes []*liveNode) {
	tb.Helper()
	n := len(nodes)
	deadline := time.Now().Add(30 * time.Second)
	for i, nd := range nodes {
		for {
			c, err := ctl.Dial(filepath.Join(nd.runDir, "ctl.sock"))
			if err != nil {
				tb.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rs, err := c.Routes(ctx)
			cancel()
			c.Close()
			wrong := ""
			for _, r := range rs {
				d := (int(r.Dst) - i + n) % n
				if want := min(d, n-d); r.Hops != want {
					wrong += fmt.Sprintf(" %d in %d hops (want %d)", r.Dst, r.Hops, want)
				}
			}
			if err == nil && len(rs) == n-1 && wrong == "" {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("node %d's routes are not the ring's shortest: %v%s %v", i, rs, wrong, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestCASIncrementsAcrossACutLink: a ring of four agents over UDP; a
// process on node 2 counts a word of node 0's page up with CAS i → i+1,
// one at a time. The link between the owner and the neighbour node 2
// routes by is cut (every datagram dropped both ways) while the CAS go on;
// again, while node 3 takes the page over (a swap) as a CAS is lost with
// the link; and then the link on node 2's way to the new owner. A CAS lost with a link is sent again
// by node 2's agent, and its owner, old or new, answers a copy it or the
// page's earlier owner already answered from the page's reply records:
// every CAS succeeds, once, and the word ends at their count.
func TestCASIncrementsAcrossACutLink(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts links and waits for their dead interval")
	}
	nodes, wires := startRing(t, 4, func(cfg *agent.Config) {
		cfg.RequestTimeout = 20 * time.Second // a loaded machine: bounds far past the dead interval
	})
	ctx := ctxT(t, 3*time.Minute)
	c0, c2, c3 := dialHost(t, nodes[0]), dialHost(t, nodes[2]), dialHost(t, nodes[3])
	g, err := c0.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	const n = 120
	var (
		cut      *cable
		acquired = make(chan error, 1)
	)
	for i := range uint64(n) {
		switch i {
		case 10, 40:
			// The owner's link on node 2's way to it.
			via := nextHop(t, nodes[2], 0)
			cut = between(t, wires, via, 0)
			cut.cut.Store(true)
			t.Logf("cas %d: cut the link %d–%d", i, cut.ends[0], cut.ends[1])
			if i == 40 {
				// Node 3 takes the page while the CAS is lost: its copy
				// sent again reaches the new owner.
				go func() { acquired <- c3.Acquire(ctx, g, 20*time.Second) }()
			}
		case 30, 70, 110:
			mend(t, nodes, cut)
			t.Logf("cas %d: the link %d–%d is back (%d datagrams dropped on it so far)", i, cut.ends[0], cut.ends[1], cut.lost.Load())
		case 80:
			// The new owner's way from node 2 (the ring's other links
			// are whole again).
			via := nextHop(t, nodes[2], 3)
			if via == 3 {
				cut = between(t, wires, 2, 3)
			} else {
				cut = between(t, wires, via, 3)
			}
			cut.cut.Store(true)
			t.Logf("cas %d: cut the link %d–%d", i, cut.ends[0], cut.ends[1])
		}
		if i == 70 {
			select {
			case err := <-acquired:
				if err != nil {
					t.Fatalf("node 3's acquire: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("node 3's acquire did not end")
			}
		}
		start := time.Now()
		old, swapped, err := c2.CompareAndSwap(ctx, g, i, i+1)
		if err != nil || !swapped || old != i {
			t.Fatalf("cas %d → %d: found %d, swapped %v: %v", i, i+1, old, swapped, err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Logf("cas %d took %v", i, d.Round(time.Millisecond)) // lost with a link, sent again
		}
	}
	if v, err := c3.Load64(ctx, g); err != nil || v != n {
		t.Fatalf("the new owner's word is %d after %d CAS: %v", v, n, err)
	}
	if v, err := c0.Load64(ctx, g); err != nil || v != n {
		t.Fatalf("node 0 reads %d after %d CAS: %v", v, n, err)
	}
}
