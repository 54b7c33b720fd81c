package agent_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
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

// TestLocalSessionsShareALock: processes of one node contend for a lock
// through the agent's core, each connection a session of its own: a try
// of a held lock is EBUSY, a second lock by the holder EDEADLK, an unlock
// by another EPERM, a wait past its bound ETIMEDOUT; waiters get the lock
// in the order they asked, and a holder that disconnects hands it on.
func TestLocalSessionsShareALock(t *testing.T) {
	nodes := startLine(t, 2, nil)
	ctx := ctxT(t, time.Minute)
	a, b, c := dialHost(t, nodes[0]), dialHost(t, nodes[0]), dialHost(t, nodes[0])
	g, err := a.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx, g, time.Second); err != nil {
		t.Fatal(err)
	}
	wantErrno := func(what string, err error, want syscall.Errno) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	wantErrno("try-lock of a held lock", b.TryLock(ctx, g), syscall.EBUSY)
	wantErrno("second lock by the holder", a.Lock(ctx, g, time.Second), syscall.EDEADLK)
	wantErrno("unlock by another process", b.Unlock(ctx, g), syscall.EPERM)
	start := time.Now()
	wantErrno("a wait past its bound", b.Lock(ctx, g, 50*time.Millisecond), syscall.ETIMEDOUT)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a 50ms wait failed after %v", took)
	}

	// b asks before c: b gets the lock at a's unlock, c at b's disconnect.
	got := make(chan string, 2)
	go func() {
		if err := b.Lock(ctx, g, 10*time.Second); err != nil {
			t.Errorf("b: %v", err)
		}
		got <- "b"
	}()
	// (nothing shows the lock's queue: b's request is given time to be in
	// it before c's)
	time.Sleep(200 * time.Millisecond)
	go func() {
		if err := c.Lock(ctx, g, 10*time.Second); err != nil {
			t.Errorf("c: %v", err)
		}
		got <- "c"
	}()
	time.Sleep(200 * time.Millisecond)
	if err := a.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	if first := <-got; first != "b" {
		t.Fatalf("%s got the lock first, b asked first", first)
	}
	select {
	case who := <-got:
		t.Fatalf("%s got the lock while b holds it", who)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := b.FetchAdd(ctx, g, 1); err != nil {
		t.Fatal(err)
	}
	b.Close()
	select {
	case who := <-got:
		if who != "c" {
			t.Fatalf("%s after b disconnected", who)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("c did not get the lock within 5s of the holder's disconnect")
	}
	if v, err := c.Load64(ctx, g); err != nil || v != 1 {
		t.Fatalf("word under the lock: %d %v", v, err)
	}
	if err := c.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
}
