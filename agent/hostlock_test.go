package agent_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
)

// TestLockHandOverAcrossNodes: processes on two nodes take turns on one
// page's lock around a plain read-modify-write (load, +1, store). Every
// lock, load, store and unlock succeeds and no increment is lost. An
// unlock racing with the other node's acquire once failed with EBUSY
// ("unref: page is swapping"): the pin was lowered but the engine refused
// the ref drop while the page swapped, and the error reached the host.
func TestLockHandOverAcrossNodes(t *testing.T) {
	nodes := startLine(t, 2, nil)
	const rounds = 300
	ctx := ctxT(t, 2*time.Minute)
	c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := c0.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, c := range [2]*client.Client{c0, c1} {
		if err := c.Subscribe(ctx, wire.EventHostFault.Mask()); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for r := range rounds {
				if err := c.Lock(ctx, g, 5*time.Second); err != nil {
					t.Errorf("node %d round %d: lock: %v", i, r, err)
					return
				}
				locked := time.Now()
				v, err := c.Load64(ctx, g)
				if err != nil {
					t.Errorf("node %d round %d: load: %v", i, r, err)
					return
				}
				if _, err := c.Store64(ctx, g, v+1); err != nil {
					t.Errorf("node %d round %d: store: %v", i, r, err)
					return
				}
				held := time.Since(locked)
				if err := c.Unlock(ctx, g); err != nil {
					t.Errorf("node %d round %d: unlock after holding %v: %v%s", i, r, held, err, faults(c))
					return
				}
			}
		})
	}
	wg.Wait()
	for i, c := range []*client.Client{c0, c1} {
		if v, err := c.Load64(ctx, g); err != nil || v != 2*rounds {
			t.Errorf("counter read on node %d: %d (%v), want %d", i, v, err, 2*rounds)
		}
	}
}

// TestAcquirerHearsOwnershipLost: a process that acquired a page hears
// (EVENT_OWNERSHIP_LOST) when another node takes it, and WHERE follows the
// page to its new owner.
func TestAcquirerHearsOwnershipLost(t *testing.T) {
	nodes := startLine(t, 2, nil)
	ctx := ctxT(t, time.Minute)
	c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := c0.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Subscribe(ctx, wire.EventOwnershipLost.Mask()); err != nil {
		t.Fatal(err)
	}
	if err := c0.Acquire(ctx, g, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c1.Acquire(ctx, g, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-c0.Events():
		if ev.Type != wire.EventOwnershipLost || ev.Page != g {
			t.Fatalf("event %+v, want ownership-lost of %v", ev, g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ownership-lost event within 5s")
	}
	if loc, err := c0.Where(ctx, g); err != nil || loc.Owner != 1 || loc.Hops != 1 {
		t.Fatalf("where on node 0 after the move: %+v %v", loc, err)
	}
}

// faults describes the host-fault events a client has received.
func faults(c *client.Client) string {
	var b strings.Builder
	for {
		select {
		case ev := <-c.Events():
			fmt.Fprintf(&b, "\n\tevent %v page %v version %d reason %v", ev.Type, ev.Page, ev.Version, ev.Reason)
		default:
			return b.String()
		}
	}
}
