package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
)

// freeRun returns a port p such that p .. p+n-1 are free UDP ports on
// the loopback address (at the time of asking).
func freeRun(tb testing.TB, n int) int {
	tb.Helper()
	for range 100 {
		base := 20000 + rand.IntN(40000)
		var held []*net.UDPConn
		ok := true
		for i := range n {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: base + i})
			if err != nil {
				ok = false
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		if ok {
			return base
		}
	}
	tb.Fatal("no run of free UDP ports")
	return 0
}

// TestMultiChannelLink runs two agents joined by one link of three UDP
// channels: routes converge, dpuctl's link object lists the channels up
// with traffic on each, and a CAS crosses the link.
func TestMultiChannelLink(t *testing.T) {
	const k = 3
	base := freeRun(t, 2*k)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	nodes := make([]*liveNode, 2)
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			for i, nd := range nodes {
				if nd != nil {
					t.Logf("node %d log:\n%s", i, nd.log.String())
				}
			}
		}
	})
	for i := range 2 {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(i)
		cfg.RunDir = filepath.Join(dir, fmt.Sprintf("node%d", i))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		cfg.Seed = uint64(i) + 1
		local, remote := base+i*k, base+(1-i)*k
		spec, err := agent.ParsePortSpec(fmt.Sprintf("p0 udp 127.0.0.1:%d 127.0.0.1:%d channels=%d", local, remote, k))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = []agent.PortSpec{spec}
		logBuf := &syncBuffer{}
		a, err := agent.New(cfg, slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelInfo})))
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &liveNode{a: a, runDir: cfg.RunDir, log: logBuf}
		wg.Go(func() {
			if err := a.Run(ctx); err != nil {
				t.Errorf("agent %d: %v", i, err)
			}
		})
		select {
		case <-a.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("agent %d not ready", i)
		}
	}
	waitRoutes(t, nodes)

	tctx := ctxT(t, time.Minute)
	c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := c0.Alloc(tctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(50) {
		c := c1
		if i%2 == 1 {
			c = c0
		}
		if _, swapped, err := c.CompareAndSwap(tctx, g, i, i+1); err != nil || !swapped {
			t.Fatalf("cas %d: swapped %v, %v", i, swapped, err)
		}
	}

	cc, err := ctl.Dial(filepath.Join(nodes[1].runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	links, err := cc.Links(tctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || len(links[0].Channels) != k {
		t.Fatalf("links %+v: want one link of %d channels", links, k)
	}
	for _, ch := range links[0].Channels {
		if ch.State != ctl.LinkUp {
			t.Errorf("channel %d (%s) is %v", ch.Index, ch.Name, ch.State)
		}
		var tx uint64
		for _, c := range ch.Counters {
			if c.Name == "tx_datagrams" {
				tx = c.Value
			}
		}
		if tx == 0 {
			t.Errorf("channel %d carried no data: %+v", ch.Index, ch.Counters)
		}
	}
}
