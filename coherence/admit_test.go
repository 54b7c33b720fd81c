package coherence

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestHostsAdmit: the host layer checks every request of a user other
// than root against its page's attributes before the engine sees it. A
// node that does not know them asks the page's home first (and then
// remembers them); the mode decides; a user with more supplementary
// groups than travel has the page's group sent first, so that the owner's
// own check lets it in too; a page its home never made fails with ENOENT;
// and a free is refused while a session of the allocator maps a page of
// the allocation.
func TestHostsAdmit(t *testing.T) {
	x := newHostFab(t, 2)
	owner := Cred{UID: 1000, GID: 1000}
	g := x.ok(0, Request{Op: HostAlloc, Attr: Attr{UID: 1000, GID: 100, Mode: 0o640}}).GVA
	x.ok(0, Request{Op: HostStore, GVA: g, Data: []byte{7}, Cred: owner})

	if _, ok := x.h[1].attrOf(g.Key()); ok {
		t.Fatal("node 1 knows the page's attributes before it was asked anything")
	}
	if c := x.do(1, Request{Op: HostLoad, GVA: g, Len: 1, Cred: Cred{UID: 3000, GID: 3000}}); errno(c) != syscall.EACCES {
		t.Fatalf("an outsider's load: %v, want EACCES", c.Err)
	}
	if a, ok := x.h[1].attrOf(g.Key()); !ok || a.GID != 100 {
		t.Fatalf("node 1 did not keep the attributes its home gave: %+v %v", a, ok)
	}
	// 20 supplementary groups, the page's group the 19th: only 16 travel
	member := Cred{UID: 2000, GID: 2000}
	for i := range 20 {
		member.Groups = append(member.Groups, uint32(500+i))
	}
	member.Groups[18] = 100
	if c := x.ok(1, Request{Op: HostLoad, GVA: g, Len: 1, Cred: member}); c.Data[0] != 7 {
		t.Fatalf("a member's load read %v, want 7", c.Data)
	}
	if c := x.do(1, Request{Op: HostStore, GVA: g, Data: []byte{9}, Cred: member}); errno(c) != syscall.EACCES {
		t.Fatalf("a member's store to a 0640 page: %v, want EACCES", c.Err)
	}
	x.ok(1, Request{Op: HostStore, GVA: g, Data: []byte{8}, Cred: owner})

	never := g.PageAt(1000)
	if c := x.do(1, Request{Op: HostLoad, GVA: never, Len: 1, Cred: owner}); errno(c) != syscall.ENOENT {
		t.Fatalf("a load of a page its home never made: %v, want ENOENT", c.Err)
	}

	x.ok(0, Request{Op: HostRef, GVA: g, Cred: owner})
	if c := x.do(0, Request{Op: HostFree, GVA: g, Cred: owner}); errno(c) != syscall.EBUSY {
		t.Fatalf("a free of a page a session maps: %v, want EBUSY", c.Err)
	}
	x.ok(0, Request{Op: HostUnref, GVA: g, Cred: owner})
	x.ok(0, Request{Op: HostFree, GVA: g, Cred: owner})
}

// TestCompletionErrno: a completion's errno, and none of the allocation
// errors.As costs on the success every request of the hot path ends with.
func TestCompletionErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{&HostError{Op: HostCAS, Errno: syscall.EACCES}, syscall.EACCES},
		{fmt.Errorf("wrapped: %w", &HostError{Op: HostLoad, Errno: syscall.ENOENT}), syscall.ENOENT},
		{errors.New("not a host error"), syscall.EIO},
	} {
		if got := (&Completion{Err: tc.err}).Errno(); got != tc.want {
			t.Errorf("Errno of %v = %v, want %v", tc.err, got, tc.want)
		}
	}
	c := &Completion{}
	if n := testing.AllocsPerRun(100, func() { _ = c.Errno() }); n != 0 {
		t.Errorf("Errno of a success allocates %.0f times", n)
	}
}
