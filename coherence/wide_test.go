package coherence

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// TestAtomicsUseTheFullWord: CAS compares all 64 bits and fetch-add carries
// into the high half, at the owner alone and with the replicated owner
// (whose staging step makes its own comparison), for a remote and a local
// requester. Each expected value below differs from the word only in its
// high 32 bits.
func TestAtomicsUseTheFullWord(t *testing.T) {
	const (
		w0   = uint64(0xdead_beef_0000_0005)
		w1   = uint64(0x0000_0001_ffff_ffff)
		hiNo = uint64(0x1111_1111_0000_0005) // low half of w0, high half not
	)
	for _, r := range []int{1, 2} {
		for _, from := range []int{2, 0} {
			t.Run(fmt.Sprintf("replicas=%d/from=%d", r, from), func(t *testing.T) {
				x := newFab(t, lineGraph(t, 3), replicas(r))
				g := x.alloc(0).WithOffset(16)
				x.ok(2, Request{Op: HostRef, GVA: g})
				if c := x.ok(from, Request{Op: HostCAS, GVA: g, Expected: 0, Operand: w0}); !c.Swapped || c.Value != 0 {
					t.Fatalf("CAS 0 -> %#x: %v", w0, c)
				}
				if c := x.ok(from, Request{Op: HostCAS, GVA: g, Expected: hiNo, Operand: 1}); c.Swapped || c.Value != w0 {
					t.Fatalf("CAS expecting %#x on %#x (equal low halves) swapped: %v", hiNo, w0, c)
				}
				if c := x.ok(from, Request{Op: HostCAS, GVA: g, Expected: w0 & 0xffff_ffff, Operand: 1}); c.Swapped || c.Value != w0 {
					t.Fatalf("CAS expecting the low half only swapped: %v", c)
				}
				if c := x.ok(from, Request{Op: HostCAS, GVA: g, Expected: w0, Operand: w1}); !c.Swapped || c.Value != w0 {
					t.Fatalf("CAS %#x -> %#x: %v", w0, w1, c)
				}
				if c := x.ok(from, Request{Op: HostFetchAdd, GVA: g, Operand: 1}); c.Value != w1 {
					t.Fatalf("fetch-add on %#x returned %#x", w1, c.Value)
				}
				want := w1 + 1 // 0x2_0000_0000: the carry crossed into the high half
				x.settle()
				for _, n := range []int{0, 2} {
					if v := binary.LittleEndian.Uint64(x.load(n, g, 8)); v != want {
						t.Fatalf("node %d reads %#x, want %#x", n, v, want)
					}
				}
				if r > 1 {
					bs := x.eng[0].Backups(g.Key())
					if len(bs) == 0 {
						t.Fatal("no backups")
					}
					for _, b := range bs {
						if v, ok := x.eng[b].Backing(g.Key()); !ok || v != 3 {
							t.Fatalf("backup %v holds version %d (%v), want 3 (three writes)", b, v, ok)
						}
					}
				}
			})
		}
	}
}
