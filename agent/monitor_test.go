package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
)

// TestMonitorNamesRoutesAndNeighbours: a route change names the
// destination, its port, next hop and distance (and hops -1 when it is
// lost), and a link-up names the neighbour.
func TestMonitorNamesRoutesAndNeighbours(t *testing.T) {
	addrs := agent.HoldUDP(t, 2)
	dir := t.TempDir()
	start := func(ctx context.Context, wg *sync.WaitGroup, id int, local, remote string) string {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(id)
		cfg.RunDir = filepath.Join(dir, "node"+string(rune('0'+id)))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Args: []string{local, remote}}}
		a, err := agent.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := a.Run(ctx); err != nil {
				t.Errorf("agent %d: %v", id, err)
			}
		})
		select {
		case <-a.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("agent %d not ready", id)
		}
		return filepath.Join(cfg.RunDir, "ctl.sock")
	}
	var wg0, wg1 sync.WaitGroup
	ctx0, cancel0 := context.WithCancel(context.Background())
	defer func() { cancel0(); wg0.Wait() }()
	sock := start(ctx0, &wg0, 0, addrs[0], addrs[1])

	c, err := ctl.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	events := make(chan ctl.Event, 64)
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	sub := make(chan struct{})
	go c.MonitorSubscribed(mctx, func() { close(sub) }, func(ev ctl.Event) error { events <- ev; return nil })
	select {
	case <-sub: // the subscription is in place
	case <-time.After(10 * time.Second):
		t.Fatal("the monitor did not subscribe in 10 s")
	}

	ctx1, cancel1 := context.WithCancel(context.Background())
	start(ctx1, &wg1, 1, addrs[1], addrs[0])
	next := func(kind ctl.EventKind) ctl.Event {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Kind == kind {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %v event", kind)
			}
		}
	}
	up := next(ctl.EventLinkUp)
	if up.Node != 1 || up.Port != "p0" || up.From == nil || *up.From != 0 {
		t.Errorf("link-up %+v: want node 1 on p0, from node 0", up)
	}
	if up.Cluster == nil || up.Cluster.Error < 0 {
		t.Errorf("link-up %+v: no cluster time", up)
	}
	rc := next(ctl.EventRouteChange)
	if rc.Node != 1 || rc.Port != "p0" || rc.NextHop != 1 || rc.Hops != 1 {
		t.Errorf("route-change %+v: want node 1 via 1 on p0, 1 hop", rc)
	}
	cancel1()
	wg1.Wait()
	lost := next(ctl.EventRouteChange)
	if lost.Node != 1 || lost.Hops != -1 {
		t.Errorf("route-change after node 1 stopped %+v: want node 1, hops -1", lost)
	}
}

// TestMonitorsMergeIntoOneHistory: the monitors of two agents of a line
// 0-1-2, recorded apart, merge by the events' cluster time into one
// history that keeps cause before effect: node 2 stops, node 1 loses its
// link to it, and only then (told by node 1) node 0 loses its route to
// node 2; the merge puts them in that order, or says that their order is
// within the clocks' bounds. Then node 0, the cluster time's reference,
// stops too: node 1's loss of its link to node 0 is still on the one
// timeline, after everything node 0 said.
func TestMonitorsMergeIntoOneHistory(t *testing.T) {
	links := [2][]string{agent.HoldUDP(t, 2), agent.HoldUDP(t, 2)}
	dir := t.TempDir()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	ctx0, cancel0 := context.WithCancel(ctx)
	defer cancel0()
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	socks := make([]string, 3)
	for id := range 3 {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(id)
		cfg.RunDir = filepath.Join(dir, "node"+string(rune('0'+id)))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		if id > 0 {
			cfg.Ports = append(cfg.Ports, agent.PortSpec{Name: "left", Kind: agent.PortUDPHeld, Args: []string{links[id-1][1], links[id-1][0]}})
		}
		if id < 2 {
			cfg.Ports = append(cfg.Ports, agent.PortSpec{Name: "right", Kind: agent.PortUDPHeld, Args: []string{links[id][0], links[id][1]}})
		}
		a, err := agent.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		run := ctx
		switch id {
		case 0:
			run = ctx0
		case 2:
			run = ctx2
		}
		wg.Go(func() {
			if err := a.Run(run); err != nil {
				t.Errorf("agent %d: %v", id, err)
			}
		})
		select {
		case <-a.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("agent %d not ready", id)
		}
		socks[id] = filepath.Join(cfg.RunDir, "ctl.sock")
	}
	// Every node routes to every other, and nodes 0 and 1 stamp their
	// events on the fabric's timeline, node 0's clock its reference (a
	// few seconds: node 0 waits for a timeline to follow for a report's
	// life before it starts one).
	for id := range 2 {
		c, err := ctl.Dial(socks[id])
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			rs, rerr := c.Routes(cctx)
			es, cerr := c.Clock(cctx)
			ccancel()
			ref0 := false // on the fabric's timeline, node 0's clock the reference
			for _, e := range es {
				ref0 = ref0 || e.Self && e.Cluster != nil && e.Cluster.Ref == 0 && e.Cluster.Line != nil
			}
			if rerr == nil && cerr == nil && len(rs) == 2 && ref0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: routes %v (%v), clock %+v (%v)", id, rs, rerr, es, cerr)
			}
		}
		c.Close()
	}
	var mu sync.Mutex
	recs := make([][]ctl.Event, 2) // what each node's monitor printed
	for id := range 2 {
		c, err := ctl.Dial(socks[id])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sub := make(chan struct{})
		go c.MonitorSubscribed(ctx, func() { close(sub) }, func(ev ctl.Event) error {
			mu.Lock()
			recs[id] = append(recs[id], ev)
			mu.Unlock()
			return nil
		})
		select {
		case <-sub:
		case <-time.After(10 * time.Second):
			t.Fatalf("node %d's monitor not subscribed", id)
		}
	}
	// merged waits (bounded) until node id's monitor printed an event
	// match accepts, and merges the recordings.
	merged := func(id int, what string, match func(ctl.Event) bool) []ctl.HistoryEvent {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			ok := slices.ContainsFunc(recs[id], match)
			mu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d's monitor: no %s", id, what)
			}
		}
		mu.Lock()
		history, lines, err := ctl.MergeHistory(recs...)
		mu.Unlock()
		if err != nil || lines != 1 {
			t.Fatalf("merge after %s: %v (%d timelines)", what, err, lines)
		}
		return history
	}
	cancel2() // node 2 stops
	lost := func(ev ctl.Event) bool { return ev.Kind == ctl.EventRouteChange && ev.Node == 2 && ev.Hops == -1 }
	history := merged(0, "loss of the route to node 2", lost)
	down := func(ev ctl.Event) bool { return ev.Kind == ctl.EventLinkDown && ev.Node == 2 }
	iDown, iLost := -1, -1
	for i, h := range history {
		if h.From == nil || *h.From > 1 {
			t.Fatalf("event %+v of the history names no node of the two", h.Event)
		}
		switch {
		case *h.From == 1 && down(h.Event):
			iDown = i
		case *h.From == 0 && lost(h.Event):
			iLost = i
		}
	}
	certain := iLost > iDown && !history[iLost].Uncertain
	if iDown < 0 || iLost < 0 || iLost < iDown && !history[iDown].Uncertain {
		for _, h := range history {
			t.Logf("%v ±%v from %d: %v node %d hops %d uncertain %v", h.Cluster.Time, h.Cluster.Error, *h.From, h.KindName(), h.Node, h.Hops, h.Uncertain)
		}
		t.Fatalf("merged history: node 1's link-down at %d, node 0's loss of the route at %d", iDown, iLost)
	}
	t.Logf("node 1's link-down at %v ±%v, node 0's loss of the route at %v ±%v: order certain %v",
		history[iDown].Cluster.Time, history[iDown].Cluster.Error, history[iLost].Cluster.Time, history[iLost].Cluster.Error, certain)

	cancel0() // the reference stops
	gone := func(ev ctl.Event) bool { return ev.Kind == ctl.EventLinkDown && ev.Node == 0 }
	history = merged(1, "loss of the link to node 0", gone)
	// node 1's loss of node 0 comes after every event of node 0, beyond
	// both bounds
	iGone := slices.IndexFunc(history, func(h ctl.HistoryEvent) bool { return *h.From == 1 && gone(h.Event) })
	for i, h := range history {
		if *h.From != 0 {
			continue
		}
		g := history[iGone].Cluster
		if i > iGone || h.Cluster.Time+h.Cluster.Error >= g.Time-g.Error {
			for _, h := range history {
				t.Logf("%v ±%v from %d: %v node %d hops %d uncertain %v", h.Cluster.Time, h.Cluster.Error, *h.From, h.KindName(), h.Node, h.Hops, h.Uncertain)
			}
			t.Fatalf("node 0's event %d (%v) is not certainly before node 1's loss of node 0 (%d)", i, h.KindName(), iGone)
		}
	}
}
