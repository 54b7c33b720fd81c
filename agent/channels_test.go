package agent_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
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
	// A channel keeps a run of up to 16 datagrams (stripeport.go's
	// burstLen) before the next is picked: enough round trips that every
	// channel's turn comes many times over.
	for i := range uint64(400) {
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

// TestMultiChannelLinkLosesAChannel: two agents joined by one link of
// three UDP channels; while clients of node 1 store pages owned by node 0,
// node 0's socket of one channel closes. Every store is acknowledged
// (the link stays up on the two channels left), the owner holds what the
// last acknowledged store of each page wrote, and both ends count the
// channel down and log it.
func TestMultiChannelLinkLosesAChannel(t *testing.T) {
	const k, writers, rounds, pages = 3, 4, 150, 16
	base := agent.HoldUDPRun(t, 2*k)
	nodes := startNodes(t, 2, func(i int, cfg *agent.Config) {
		local, remote := base+i*k, base+(1-i)*k
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Channels: k,
			Args: []string{fmt.Sprintf("127.0.0.1:%d", local), fmt.Sprintf("127.0.0.1:%d", remote)}}}
	})
	tctx := ctxT(t, time.Minute)
	c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := c0.Alloc(tctx, pages*4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// the link is up and routed before the stores begin
	if _, err := c1.Store(tctx, g, []byte{1}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	last := make([][pages]uint32, writers) // per writer: the last round each of its pages stored
	for w := range writers {
		wg.Go(func() {
			page := make([]byte, 4096)
			for r := range rounds {
				p := w*pages/writers + r%(pages/writers)
				binary.LittleEndian.PutUint32(page, uint32(r+1))
				page[4095] = byte(w)
				if _, err := c1.Store(tctx, g.PageAt(p), page); err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
				last[w][p] = uint32(r + 1)
				if w == 0 && r == rounds/3 {
					if err := nodes[0].a.CloseChannel(0, 1); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		for p := w * pages / writers; p < (w+1)*pages/writers; p++ {
			got := make([]byte, 4096)
			if _, err := c0.Load(tctx, g.PageAt(p), got); err != nil {
				t.Fatal(err)
			}
			if v := binary.LittleEndian.Uint32(got); v != last[w][p] || got[4095] != byte(w) {
				t.Errorf("page %d holds round %d of writer %d, want round %d of writer %d", p, v, got[4095], last[w][p], w)
			}
		}
	}
	// both ends drop the channel, count it and log it
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		down := 0
		for _, nd := range nodes {
			cc, err := ctl.Dial(filepath.Join(nd.runDir, "ctl.sock"))
			if err != nil {
				t.Fatal(err)
			}
			links, err := cc.Links(tctx)
			cc.Close()
			if err != nil {
				t.Fatal(err)
			}
			ch := links[0].Channels[1]
			for _, c := range ch.Counters {
				if c.Name == "downs" && c.Value > 0 && ch.State == ctl.LinkDown {
					down++
				}
			}
		}
		if down == 2 && strings.Contains(nodes[0].log.String(), "link channel down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("channel 1 not counted down at both ends (%d); node 0 log:\n%s", down, nodes[0].log.String())
		}
	}
}
