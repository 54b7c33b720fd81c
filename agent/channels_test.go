package agent_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
)

// TestMultiChannelLink runs two agents joined by one link of three UDP
// channels: routes converge, dpuctl's link object lists the channels up
// with traffic on each, and a CAS crosses the link.
func TestMultiChannelLink(t *testing.T) {
	const k = 3
	base := agent.HoldUDPRun(t, 2*k)
	nodes := startNodes(t, 2, func(i int, cfg *agent.Config) {
		local, remote := base+i*k, base+(1-i)*k
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Channels: k,
			Args: []string{fmt.Sprintf("127.0.0.1:%d", local), fmt.Sprintf("127.0.0.1:%d", remote)}}}
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
