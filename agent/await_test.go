package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/hostif/client"
)

// TestSocketReaderAwaitsOneHopAnswers: with the adaptive loop, a socket
// client's CAS on a page owned one hop away is answered by its connection's
// reader stepping the core itself (the run to completion of the adaptive
// mode, counted in host_answers_awaited); the blocking loop leaves every
// answer to the loop. Both count every swap.
func TestSocketReaderAwaitsOneHopAnswers(t *testing.T) {
	for _, mode := range []agent.LoopMode{agent.LoopAdaptive, agent.LoopBlocking} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes := startLine(t, 2, func(cfg *agent.Config) {
				cfg.Loop = mode
				cfg.Spin = 100 * time.Millisecond // generous: a loaded machine, -race
			})
			ctx := ctxT(t, time.Minute)
			c0 := dialHost(t, nodes[0])
			g, err := c0.Alloc(ctx, 4096, 0o666)
			if err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c1, err := client.Dial(dctx, nodes[1].hostSocket(), client.Options{Name: t.Name(), NoRings: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			before := counter(t, nodes[1], "host_answers_awaited")
			const n = 200
			for i := range uint64(n) {
				if old, swapped, err := c1.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
					t.Fatalf("cas %d: found %d, swapped %v: %v", i, old, swapped, err)
				}
			}
			if v, err := c0.Load64(ctx, g); err != nil || v != n {
				t.Fatalf("owner's word %d after %d swaps: %v", v, n, err)
			}
			awaited := counter(t, nodes[1], "host_answers_awaited") - before
			switch mode {
			case agent.LoopAdaptive:
				if awaited == 0 {
					t.Errorf("no answer of %d one-hop CAS came by the reader's own steps", n)
				}
			default:
				if awaited != 0 {
					t.Errorf("%d answers came by the reader's steps with the %v loop", awaited, mode)
				}
			}
			t.Logf("%v: %d of %d answers awaited by the reader", mode, awaited, n)
		})
	}
}
