package agent_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// TestRangeTransfersOverChannels: four clients of one agent on the
// socket (where a reader steps the core for its answers beside the loop,
// so completions of one bulk request come from two drivers at once) store
// ranges of many pages each, concurrently, into pages the other agent
// owns across a link of two channels; then each range loads back, every
// byte as its last store wrote it.
func TestRangeTransfersOverChannels(t *testing.T) {
	const k = 2
	t.Setenv("DPU_RINGS", "0")
	base := agent.HoldUDPRun(t, 2*k)
	nodes := startNodes(t, 2, func(i int, cfg *agent.Config) {
		local, remote := base+i*k, base+(1-i)*k
		cfg.Loop = agent.LoopAdaptive
		// a race-detector build moves data slowly: the link must not be
		// declared dead under the transfers' load
		cfg.Heartbeat, cfg.DeadInterval = 100*time.Millisecond, 5*time.Second
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Channels: k,
			Args: []string{fmt.Sprintf("127.0.0.1:%d", local), fmt.Sprintf("127.0.0.1:%d", remote)}}}
	})
	tctx := ctxT(t, 2*time.Minute)
	owner := dialHost(t, nodes[0])
	const clients, pages, rounds = 4, 100, 3
	g, err := owner.Alloc(tctx, clients*pages*gva.PageSize, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	at := func(i int) gva.GVA { return gva.GVA{Hi: g.Hi, Lo: g.Lo + uint64(i*pages*gva.PageSize+i+1)} }
	want := func(i, r int) []byte {
		b := make([]byte, pages*gva.PageSize-2*clients)
		for j := range b {
			b[j] = byte(j*(i+3) + r)
		}
		return b
	}
	cs := make([]*client.Client, clients)
	errs := make(chan error, clients)
	for i := range clients {
		cs[i] = dialHost(t, nodes[1])
		go func() {
			for r := range rounds {
				data := want(i, r)
				if n, err := cs[i].StoreRange(tctx, at(i), data); err != nil || n != len(data) {
					errs <- fmt.Errorf("client %d round %d: store range: %d of %d: %w", i, r, n, len(data), err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cs {
		data := want(i, rounds-1)
		got := make([]byte, len(data))
		if n, err := c.LoadRange(tctx, at(i), got); err != nil || n != len(got) {
			t.Fatalf("client %d: load range: %d of %d: %v", i, n, len(got), err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("client %d: the range reads back otherwise than its last store", i)
		}
	}
}
