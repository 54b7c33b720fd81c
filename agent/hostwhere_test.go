package agent_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
)

// TestWhereOnLiveNodes: WHERE through the owner's node and through a
// neighbour names the owner, the hops and the tier.
func TestWhereOnLiveNodes(t *testing.T) {
	nodes := startLine(t, 2, nil)
	ctx := ctxT(t, time.Minute)
	c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := c0.Alloc(ctx, 4096, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if loc, err := c0.Where(ctx, g); err != nil || loc.Owner != 0 || loc.Hops != 0 || loc.Tier != gva.TierMachine {
		t.Errorf("where on the owner's node: %+v %v", loc, err)
	}
	if loc, err := c1.Where(ctx, g.WithOffset(8)); err != nil || loc.Owner != 0 || loc.Hops != 1 || loc.Tier != gva.TierNeighbour {
		t.Errorf("where one hop away: %+v %v", loc, err)
	}
}

// TestWhereVersionIsTheOwners: PROTOCOL.md §4 — WHERE answers "u64 owner's
// version", which the owner's node knows exactly (the live agent once
// answered 0 there).
func TestWhereVersionIsTheOwners(t *testing.T) {
	nodes := startLine(t, 1, nil)
	ctx := ctxT(t, time.Minute)
	c := dialHost(t, nodes[0])
	g, err := c.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Store64(ctx, g, 7)
	if err != nil {
		t.Fatal(err)
	}
	if loc, err := c.Where(ctx, g); err != nil || loc.Version != v {
		t.Errorf("where after a store that made version %d: %+v %v", v, loc, err)
	}
}
