package agent_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
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
	nodes := startNodes(t, 2, func(i int, cfg *agent.Config) {
		local, remote := base+i*k, base+(1-i)*k
		spec, err := agent.ParsePortSpec(fmt.Sprintf("p0 udp 127.0.0.1:%d 127.0.0.1:%d channels=%d", local, remote, k))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = []agent.PortSpec{spec}
	})

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
