package agent_test

import (
	"context"
	"testing"

	"github.com/aitherion/dpu/agent"
)

// BenchmarkInProcessRingCAS: CAS on a page owned here through the Go
// client over a shared-memory ring, agent (adaptive loop) and client in
// this process. Its -benchmem figures are the whole round trip's heap
// allocations, client and agent together: the data path allocates nothing
// per request, and a regression shows here first.
func BenchmarkInProcessRingCAS(b *testing.B) {
	nodes := startNodes(b, 1, func(_ int, cfg *agent.Config) { cfg.Loop = agent.LoopAdaptive })
	c := dialHost(b, nodes[0])
	if !c.Rings() {
		b.Fatal("the agent offered no rings")
	}
	ctx := context.Background()
	g, err := c.Alloc(ctx, 4096, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	i := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		if _, swapped, err := c.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
			b.Fatalf("cas %d: swapped %v: %v", i, swapped, err)
		}
		i++
	}
}
