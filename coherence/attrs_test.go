package coherence

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestAttributesFromTheHome: a node asked for the attributes of a page
// made elsewhere gets the home's, for pages that moved owner too; a freed
// page or one never made is ENOENT there as well.
func TestAttributesFromTheHome(t *testing.T) {
	x := newHostFab(t, 3)
	attr := Attr{UID: 1000, GID: 100, Mode: 0o604}
	first := x.ok(0, Request{Op: HostAlloc, Pages: 2, Attr: attr}).GVA
	for _, n := range []int{1, 2} {
		if st := x.ok(n, Request{Op: HostStat, GVA: first}); st.Attr != attr {
			t.Fatalf("node %d: %+v, want %+v", n, st.Attr, attr)
		}
	}
	// ownership moves to node 2; the attributes stay the page's
	second := first.PageAt(1)
	x.ok(2, Request{Op: HostAcquire, GVA: second})
	if st := x.ok(1, Request{Op: HostStat, GVA: second}); st.Attr != attr {
		t.Fatalf("after an ownership move: %+v", st.Attr)
	}
	x.ok(2, Request{Op: HostRelease, GVA: second})
	other := x.ok(0, Request{Op: HostAlloc, Attr: attr}).GVA
	x.ok(1, Request{Op: HostStat, GVA: other})
	x.ok(0, Request{Op: HostFree, GVA: other})
	if c := x.do(1, Request{Op: HostStat, GVA: other}); !errors.Is(c.Err, syscall.ENOENT) {
		t.Fatalf("stat of a freed page elsewhere: %v", c.Err)
	}
	if c := x.do(2, Request{Op: HostStat, GVA: first.PageAt(40)}); !errors.Is(c.Err, syscall.ENOENT) {
		t.Fatalf("stat of a page never made: %v", c.Err)
	}
	if x.h[1].Engine().Stats().Malformed != 0 {
		t.Fatal("malformed frames")
	}
}

// FuzzAttrAnswer: the attribute answer's decoder refuses what it cannot
// encode back byte for byte.
func FuzzAttrAnswer(f *testing.F) {
	f.Add(appendAttr(nil, Attr{UID: 1, GID: 2, Mode: 0o644}))
	f.Add(make([]byte, attrLen+1))
	f.Fuzz(func(t *testing.T, p []byte) {
		a, err := decodeAttr(p)
		if err != nil {
			return
		}
		if a.Mode&^0o777 != 0 || !bytes.Equal(appendAttr(nil, a), p) {
			t.Fatalf("%x decoded as %+v", p, a)
		}
	})
}
