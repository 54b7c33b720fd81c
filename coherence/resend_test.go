package coherence

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/node"
)

// word reads the 64-bit word at p from its owner's host.
func (x *fab) word(owner int, p gva.GVA) uint64 {
	x.t.Helper()
	return binary.LittleEndian.Uint64(x.load(owner, p, 8))
}

// atomicsApplied sums the atomics every owner applied.
func (x *fab) atomicsApplied() uint64 {
	var n uint64
	for _, e := range x.eng {
		n += e.Stats().Atomics
	}
	return n
}

func TestAtomicSurvivesTheLinkItWasLostWith(t *testing.T) {
	// Ring of 4: node 2's CAS to node 0's page crosses node 1 or node 3.
	// The link from that middle node to the owner is cut as the CAS leaves:
	// the frame waits in the link, which is declared down (stalled) and
	// drops it. The other side of the ring is a path: the CAS must succeed,
	// once, within its bound.
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			lc := fastLinks()
			x := newFabLinks(t, ringGraph(t, 4), &lc, func(c *Config) {
				c.Replicas, c.DeadInterval = r, lc.DeadInterval
			})
			p := x.alloc(0)
			x.settle()
			hop, _, ok := x.f.Cores[2].NextHop(0)
			if !ok {
				t.Fatal("no route from node 2 to node 0")
			}
			mid, _ := x.g.Peer(2, hop)
			if err := x.f.SetLink(mid.Node, 0, false); err != nil {
				t.Fatal(err)
			}
			c := x.do(2, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
			if c.Err != nil || !c.Swapped || c.Value != 0 {
				t.Fatalf("CAS across the lost link: %v", c)
			}
			x.settle()
			if got := x.word(0, p); got != 1 {
				t.Fatalf("the word is %d after one CAS 0→1", got)
			}
			if n := x.atomicsApplied(); n != 1 {
				t.Fatalf("%d atomics applied for one CAS", n)
			}
			// The link returns; the fabric goes on as before.
			if err := x.f.SetLink(mid.Node, 0, true); err != nil {
				t.Fatal(err)
			}
			x.f.Run(200 * time.Millisecond)
			if c := x.do(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1}); c.Err != nil || c.Value != 1 {
				t.Fatalf("fetch-add after the link returned: %v", c)
			}
		})
	}
}

func TestAtomicWhoseReplyIsLostIsAnsweredOnce(t *testing.T) {
	// The owner applies node 2's CAS and its reply is lost: the re-sent CAS
	// must get the first answer (swapped, previous 0), not a second
	// application (not swapped, previous 1).
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			lost := 0
			lose := func(self noc.NodeID, f *noc.Frame) bool {
				if self == 2 && f.Class == noc.ClassAtomic && f.Flags&noc.FlagReply != 0 && lost == 0 {
					lost++
					return true
				}
				return false
			}
			lc := fastLinks()
			x := newFabFilter(t, ringGraph(t, 4), &lc, func(c *Config) {
				c.Replicas, c.DeadInterval = r, lc.DeadInterval
			}, lose)
			p := x.alloc(0)
			x.settle()
			c := x.do(2, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
			if lost != 1 {
				t.Fatalf("%d replies lost", lost)
			}
			if c.Err != nil || !c.Swapped || c.Value != 0 {
				t.Fatalf("CAS whose reply was lost: %v", c)
			}
			if got := x.word(0, p); got != 1 {
				t.Fatalf("the word is %d after one CAS 0→1", got)
			}
			if n := x.atomicsApplied(); n != 1 {
				t.Fatalf("%d atomics applied for one CAS", n)
			}
			if d := x.eng[0].Stats().Duplicates; d == 0 {
				t.Fatal("the owner counted no duplicate")
			}
		})
	}
}

// twice is a test double that hands every up-going write and atomic to
// the engine twice: a duplicate delivery (put at the owner).
type twice struct{ *Engine }

func (d twice) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes) {
	d.Engine.HandleFrame(now, in, f, rt)
	if f.Flags&noc.FlagReply == 0 && (f.Class == noc.ClassAtomic || f.Class == noc.ClassStore && f.Op == OpStore) {
		d.Engine.HandleFrame(now, in, f, rt)
	}
}

func TestDuplicateAtomicIsAppliedOnce(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			x := newFabWrap(t, ringGraph(t, 4), nil, func(c *Config) { c.Replicas = r },
				func(e *Engine) node.Handler {
					if e.Self() == 0 {
						return twice{e}
					}
					return e
				})
			p := x.alloc(0)
			x.settle()
			for i := range 3 {
				c := x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
				if c.Value != uint64(i) {
					t.Fatalf("fetch-add %d saw %d", i, c.Value)
				}
			}
			c := x.ok(2, Request{Op: HostCAS, GVA: p, Expected: 3, Operand: 10})
			if !c.Swapped || c.Value != 3 {
				t.Fatalf("CAS 3→10 delivered twice: %v", c)
			}
			x.ok(2, Request{Op: HostStore, GVA: p.WithOffset(8), Data: []byte{7}})
			x.settle()
			if got := x.word(0, p); got != 10 {
				t.Fatalf("the word is %d, want 10", got)
			}
			if n := x.atomicsApplied(); n != 4 {
				t.Fatalf("%d atomics applied for 4", n)
			}
			if w := x.eng[0].Stats().Writes; w != 1 {
				t.Fatalf("%d writes applied for 1", w)
			}
			if d := x.eng[0].Stats().Duplicates; d != 5 {
				t.Fatalf("the owner counted %d duplicates, want 5", d)
			}
		})
	}
}
