package agent_test

import (
	"context"
	"path/filepath"
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
	go c.Monitor(mctx, func(ev ctl.Event) error { events <- ev; return nil })
	time.Sleep(50 * time.Millisecond) // the subscription is in place

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
	if up.Node != 1 || up.Port != "p0" {
		t.Errorf("link-up %+v: want node 1 on p0", up)
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
