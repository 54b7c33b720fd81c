package coherence

import (
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
