package agent_test

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gva"
)

// TestPageShowAndPlacement: with placement = auto, a page node 0 made and
// node 1 writes moves to node 1 by an ordinary swap; page show on node 1
// then says it owns it, with the writes and the move among its traits, and
// a page node 0 never held is ENOENT there.
func TestPageShowAndPlacement(t *testing.T) {
	nodes := startLine(t, 2, func(c *agent.Config) {
		c.Placement, c.PlacementHalfLife = coherence.PlacementAuto, 20*time.Millisecond
	})
	ctx := ctxT(t, time.Minute)
	c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := c0.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Map(ctx, g, 4096); err != nil {
		t.Fatal(err)
	}
	cc, err := ctl.Dial(filepath.Join(nodes[1].runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var p ctl.PageInfo
	// Node 1 writes until placement moves the page there (bounded: a
	// thousand adds, each waiting for its answer).
	for i := range 1000 {
		if _, err := c1.FetchAdd(ctx, g.WithOffset(8), 1); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		if i%20 != 19 {
			continue
		}
		if p, err = cc.PageShow(ctx, g); err != nil {
			t.Fatal(err)
		}
		if p.Owned {
			break
		}
	}
	if !p.Owned || p.Owner != 1 || p.Moves == 0 || p.Writes <= 0 || p.Heat < p.Writes || p.Placement != "auto" ||
		p.Tier != "memory" || p.HalfLife != 20*time.Millisecond || p.MaxMoves != 2 {
		t.Fatalf("page show on node 1 after its writes: %+v", p)
	}
	cc0, err := ctl.Dial(filepath.Join(nodes[0].runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc0.Close()
	if _, err := cc0.PageShow(ctx, gva.New(0, 0x7777, 0, 0)); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("page show of a page node 0 never held: %v", err)
	}
}
