package coherence

import (
	"syscall"
	"testing"
	"time"
)

// TestHostsFreeAMovedPage: a page that moved to another node (a lock there)
// is freed by its allocator all the same: the free takes it back first.
// Afterwards no node can use it, the other node's free of it was refused
// (it did not allocate it), and the allocator's session holds nothing.
func TestHostsFreeAMovedPage(t *testing.T) {
	for _, pages := range []int{1, 3} {
		x := newHostFab(t, 3)
		g := x.ok(0, Request{Op: HostAlloc, Pages: pages}).GVA
		moved := g.PageAt(pages - 1)
		x.ok(2, Request{Op: HostLock, GVA: moved, Timeout: 2 * time.Second})
		x.ok(2, Request{Op: HostStore, GVA: moved, Data: []byte{7}})
		x.ok(2, Request{Op: HostUnlock, GVA: moved})
		x.f.Run(100 * time.Millisecond)
		if c := x.ok(0, Request{Op: HostWhere, GVA: moved}); c.Where.Owner != 2 {
			t.Fatalf("%d pages: the page did not move: %+v", pages, c.Where)
		}
		if c := x.do(2, Request{Op: HostFree, GVA: g}); errno(c) != syscall.ENOENT {
			t.Fatalf("%d pages: free on the node that did not allocate it: %v, want ENOENT", pages, c.Err)
		}
		x.ok(0, Request{Op: HostFree, GVA: g})
		x.f.Run(100 * time.Millisecond)
		for n := range 3 {
			if c := x.do(n, Request{Op: HostLoad, GVA: moved, Len: 1}); c.Err == nil {
				t.Errorf("%d pages: node %d reads the freed page: %v", pages, n, c.Data)
			}
			if c := x.do(n, Request{Op: HostWhere, GVA: moved}); errno(c) != syscall.ENOENT {
				t.Errorf("%d pages: node %d: where of the freed page: %+v %v, want ENOENT", pages, n, c.Where, c.Err)
			}
		}
		if c := x.do(0, Request{Op: HostFree, GVA: g}); errno(c) != syscall.ENOENT {
			t.Errorf("%d pages: second free: %v, want ENOENT", pages, c.Err)
		}
		x.f.Run(100 * time.Millisecond)
		for n := range 3 {
			if refs, acq, locks := x.h[n].Held(1); refs+acq+locks != 0 {
				t.Errorf("%d pages: node %d holds %d refs, %d acquisitions, %d locks after the free", pages, n, refs, acq, locks)
			}
		}
	}
}

// TestHostsFreeOfAPageLockedElsewhere: while another node holds the lock of
// a page of the extent, the allocator's free waits its bound, fails with
// what stood in the way, frees nothing and holds nothing; once unlocked,
// the free succeeds.
func TestHostsFreeOfAPageLockedElsewhere(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 2}).GVA
	x.ok(1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	c := x.do(0, Request{Op: HostFree, GVA: g, Timeout: 300 * time.Millisecond})
	if e := errno(c); e != syscall.ETIMEDOUT && e != syscall.EBUSY {
		t.Fatalf("free of a page locked elsewhere: %v, want ETIMEDOUT or EBUSY", c.Err)
	}
	x.f.Run(time.Second)
	if refs, acq, locks := x.h[0].Held(1); refs+acq+locks != 0 {
		t.Fatalf("after the refused free: %d refs, %d acquisitions, %d locks held", refs, acq, locks)
	}
	// The ref the free took went back to the engine too: node 0 maps
	// neither page.
	for i := range 2 {
		if pg := x.h[0].e.pages[g.PageAt(i)]; pg != nil && pg.maps != 0 {
			t.Fatalf("after the refused free node 0 still maps page %d (%d maps)", i, pg.maps)
		}
	}
	if c := x.ok(1, Request{Op: HostCAS, GVA: g, Expected: 0, Operand: 5}); !c.Swapped {
		t.Fatal("the lock holder's CAS did not swap")
	}
	x.ok(1, Request{Op: HostUnlock, GVA: g})
	x.f.Run(100 * time.Millisecond)
	x.ok(0, Request{Op: HostFree, GVA: g})
	if c := x.do(1, Request{Op: HostLoad, GVA: g, Len: 8}); c.Err == nil {
		t.Fatalf("node 1 reads the freed page: %v", c.Data)
	}
}

// TestHostsFreeByItsOwner: only the allocation's owner (or root) frees it;
// another user's free is refused (EPERM) and frees nothing.
func TestHostsFreeByItsOwner(t *testing.T) {
	x := newHostFab(t, 2)
	owner, other := Cred{UID: 1000, GID: 1000}, Cred{UID: 1001, GID: 1000}
	g := x.ok(0, Request{Op: HostAlloc, Pages: 2, Attr: Attr{UID: 1000, GID: 1000, Mode: 0o666}, Cred: owner}).GVA
	if c := x.do(0, Request{Op: HostFree, GVA: g, Cred: other}); errno(c) != syscall.EPERM {
		t.Fatalf("free by another user: %v, want EPERM", c.Err)
	}
	if c := x.ok(1, Request{Op: HostLoad, GVA: g.PageAt(1), Len: 8}); len(c.Data) != 8 {
		t.Fatalf("the page is gone after a refused free: %v", c.Data)
	}
	x.ok(0, Request{Op: HostFree, GVA: g, Cred: owner})
	g = x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{UID: 1000, GID: 1000, Mode: 0o600}, Cred: owner}).GVA
	x.ok(0, Request{Op: HostFree, GVA: g}) // root
}
