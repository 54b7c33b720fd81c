package coherence

import (
	"syscall"
	"testing"
	"time"
)

// TestCloseLeavesARunningClaimsRefToIt: a session closes while its lock
// (or acquire) of a page is still running; another session of the node
// maps the page. The claim, abandoned, gives its own ref back when it ends
// (an unlock or release, then the ref): Close must not give it back too,
// or the node's count of mappings falls under the other session's ref and
// its loads end with "page not mapped" (dpu-sim seed 62, replicas 1).
func TestCloseLeavesARunningClaimsRefToIt(t *testing.T) {
	for _, op := range []HostOp{HostLock, HostAcquire} {
		t.Run(op.String(), func(t *testing.T) {
			x := newHostFab(t, 3)
			g := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{Mode: 0o666}}).GVA
			if err := x.h[2].Open(2); err != nil {
				t.Fatal(err)
			}
			x.ok(2, Request{Op: HostRef, GVA: g}) // session 1 maps the page
			// Session 2 claims it and closes before the claim is done.
			x.next++
			id := x.next
			x.h[2].Submit(x.f.Now(), 2, Request{ID: id, Op: op, GVA: g}, x.f.Cores[2])
			x.f.Run(20 * time.Microsecond)
			if _, done := x.sinks[2].done[id]; done {
				t.Fatal("the claim ended before the close")
			}
			x.h[2].Close(x.f.Now(), 2, x.f.Cores[2])
			x.f.Run(200 * time.Millisecond) // the claim ends and is undone
			if c, done := x.sinks[2].done[id]; done {
				t.Fatalf("the claim of the closed session completed: %+v", c)
			}
			if x.h[2].Known(2) {
				t.Fatal("the closed session was not forgotten")
			}
			for i := range 3 {
				if c := x.do(2, Request{Op: HostLoad, GVA: g, Len: 8}); c.Err != nil {
					t.Fatalf("load %d of the page session 1 maps: %v", i, c.Err)
				}
			}
			if refs, _, _ := x.h[2].Held(1); refs != 1 {
				t.Fatalf("session 1 holds %d refs", refs)
			}
			x.ok(2, Request{Op: HostUnref, GVA: g})
		})
	}
}

// TestUnrefDuringASwapLetsThePageGo: a session unrefs a page while its
// node's acquire of it is stuck (the owner died after the acquire left).
// The engine refuses an unref during a swap and the unref is retried; the
// session lets go of the page at once all the same, so its answer must say
// so. An unref that timed out after its session had dropped the page left
// the host believing it still mapped a page whose replica no longer
// followed the owner (dpu-sim seed 3, 16 nodes, every fault, R = 3).
func TestUnrefDuringASwapLetsThePageGo(t *testing.T) {
	x := newHostFab(t, 3)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{Mode: 0o666}}).GVA
	x.ok(2, Request{Op: HostRef, GVA: g}) // session 1 maps the page
	if err := x.h[2].Open(2); err != nil {
		t.Fatal(err)
	}
	x.next++
	acq := x.next
	x.h[2].Submit(x.f.Now(), 2, Request{ID: acq, Op: HostAcquire, GVA: g}, x.f.Cores[2])
	if !x.f.RunUntil(x.f.Now()+time.Second, func() bool {
		pg := x.h[2].e.pages[g.Key()]
		return pg != nil && pg.swap != nil
	}) {
		t.Fatal("the acquire did not start a swap")
	}
	x.f.Kill(0) // the owner: the swap cannot end before its own bound
	c := x.do(2, Request{Op: HostUnref, GVA: g, Timeout: time.Millisecond})
	if c.Err != nil {
		t.Fatalf("unref during the swap: %v", c.Err)
	}
	if refs, _, _ := x.h[2].Held(1); refs != 0 {
		t.Fatalf("session 1 holds %d refs after its unref", refs)
	}
	if c := x.do(2, Request{Op: HostUnref, GVA: g}); c.Errno() != syscall.EINVAL {
		t.Fatalf("a second unref: %v, want EINVAL", c.Err)
	}
}
