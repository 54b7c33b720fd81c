package coherence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/topo"
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

// heldFrame is a frame a delayer kept back: the node and port it came in
// by, and its bytes.
type heldFrame struct {
	node noc.NodeID
	in   noc.PortID
	b    []byte
}

// delayer is a test double between a node core and its engine: the frames
// hold reports true for are kept back, as a node's backpressure queue
// would, to be handed on later with (*fab).release.
type delayer struct {
	*Engine
	hold func(self noc.NodeID, f *noc.Frame) bool
	held *[]heldFrame
}

func (d delayer) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes) {
	if d.hold(d.Self(), f) {
		b, err := f.AppendTo(nil)
		if err != nil {
			panic(err)
		}
		*d.held = append(*d.held, heldFrame{node: d.Self(), in: in, b: b})
		return
	}
	d.Engine.HandleFrame(now, in, f, rt)
}

// newFabDelay is newFabLinks with the frames hold reports true for kept
// back in held.
func newFabDelay(t *testing.T, g *topo.Graph, lc *link.Config, tune func(*Config), hold func(self noc.NodeID, f *noc.Frame) bool, held *[]heldFrame) *fab {
	t.Helper()
	return newFabWrap(t, g, lc, tune, func(e *Engine) node.Handler { return delayer{e, hold, held} })
}

// deliver hands a held frame to node n's engine now, as if it came in by
// port in.
func (x *fab) deliver(n int, in noc.PortID, h heldFrame) {
	x.t.Helper()
	var f noc.Frame
	if err := f.Decode(h.b); err != nil {
		x.t.Fatal(err)
	}
	x.eng[n].HandleFrame(x.f.Now(), in, &f, x.f.Cores[n])
}

// firstCopy reports whether f is the first copy of an atomic request of
// node src.
func firstCopy(f *noc.Frame, src noc.NodeID) bool {
	return f.Src == src && f.Class == noc.ClassAtomic && f.Flags&noc.FlagReply == 0 && f.PageVersion == 0
}

// resentCopy reports whether f is a re-sent copy of an atomic request of
// node src.
func resentCopy(f *noc.Frame, src noc.NodeID) bool {
	return f.Src == src && f.Class == noc.ClassAtomic && f.Flags&noc.FlagReply == 0 && f.PageVersion != 0
}

// slowRequests gives requests a bound long enough for a swap or a
// failover to happen while one is in flight.
func slowRequests(r int, lc link.Config) func(*Config) {
	return func(c *Config) {
		c.Replicas, c.DeadInterval, c.RequestTimeout = r, lc.DeadInterval, 2*time.Second
	}
}

func TestDelayedAtomicAfterASwapIsAnsweredFromTheCarriedRecord(t *testing.T) {
	// Node 2's CAS 0→1 to node 0's page: its first copy is held back at
	// node 0, its re-sent copy is applied and answered. Node 1 takes the
	// page over (a swap) and sets the word back to 0. Then the first copy
	// arrives: it follows the page to node 1, which must answer it from
	// the record that came with the page, not apply it again (the word
	// would be 1).
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			var held []heldFrame
			holding := true
			hold := func(self noc.NodeID, f *noc.Frame) bool {
				return holding && self == 0 && firstCopy(f, 2)
			}
			lc := fastLinks()
			x := newFabDelay(t, ringGraph(t, 4), &lc, slowRequests(r, lc), hold, &held)
			p := x.alloc(0)
			x.settle()
			c := x.ok(2, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
			if !c.Swapped || c.Value != 0 {
				t.Fatalf("CAS 0→1 by its re-sent copy: %v", c)
			}
			if len(held) != 1 {
				t.Fatalf("%d first copies held back", len(held))
			}
			holding = false
			x.ok(1, Request{Op: HostRef, GVA: p})
			x.ok(1, Request{Op: HostAcquire, GVA: p})
			if o, _ := x.eng[1].Holding(p.Key()); !o {
				t.Fatal("node 1 does not own the page after its acquire")
			}
			if c := x.ok(1, Request{Op: HostCAS, GVA: p, Expected: 1, Operand: 0}); !c.Swapped {
				t.Fatalf("CAS 1→0 at the new owner: %v", c)
			}
			before := x.atomicsApplied()
			x.deliver(0, held[0].in, held[0])
			x.settle()
			if got := x.word(1, p); got != 0 {
				t.Fatalf("the word is %d: the delayed first copy of the CAS 0→1 was applied again after the swap", got)
			}
			if n := x.atomicsApplied(); n != before {
				t.Fatalf("%d atomics applied by the delayed copy", n-before)
			}
			if x.eng[1].Stats().RepliesAgain == 0 {
				t.Fatal("the new owner answered nothing from its records")
			}
		})
	}
}

func TestResentAtomicAfterASwapGetsItsResult(t *testing.T) {
	// Node 2's CAS 0→1 is applied by node 0, and every answer to it is
	// lost, and every re-sent copy, until node 1 has taken the page over.
	// The next re-sent copy reaches node 1: it must be answered with the
	// CAS's result (swapped, previous 0), not "outcome unknown".
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			cut := true
			lose := func(self noc.NodeID, f *noc.Frame) bool {
				if !cut {
					return false
				}
				reply := self == 2 && f.Class == noc.ClassAtomic && f.Flags&noc.FlagReply != 0
				return reply || resentCopy(f, 2)
			}
			lc := fastLinks()
			x := newFabFilter(t, ringGraph(t, 4), &lc, slowRequests(r, lc), lose)
			p := x.alloc(0)
			x.settle()
			id := x.submit(2, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
			x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[0].Stats().Atomics == 1 })
			if x.eng[0].Stats().Atomics != 1 {
				t.Fatal("the owner did not apply the CAS")
			}
			x.ok(1, Request{Op: HostRef, GVA: p})
			x.ok(1, Request{Op: HostAcquire, GVA: p})
			if o, _ := x.eng[1].Holding(p.Key()); !o {
				t.Fatal("node 1 does not own the page after its acquire")
			}
			cut = false
			x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := x.sinks[2].done[id]; return ok })
			c := x.result(2, id)
			if c.Err != nil || !c.Swapped || c.Value != 0 {
				t.Fatalf("re-sent CAS after the swap: %v", c)
			}
			if n := x.atomicsApplied(); n != 1 {
				t.Fatalf("%d atomics applied for one CAS", n)
			}
			if got := x.word(1, p); got != 1 {
				t.Fatalf("the word is %d after one CAS 0→1", got)
			}
		})
	}
}

func TestResentAtomicAfterAFailoverGetsItsResult(t *testing.T) {
	// R = 2. Node 3's CAS 0→1 is committed by node 0 (its backup holds
	// it), every answer and re-sent copy is lost, and node 0 dies. Its
	// backup takes the page over; node 3 sends the CAS again to it, which
	// must answer with the CAS's result from the records its copy came
	// with, not "outcome unknown".
	cut := true
	lose := func(self noc.NodeID, f *noc.Frame) bool {
		if !cut {
			return false
		}
		reply := self == 3 && f.Class == noc.ClassAtomic && f.Flags&noc.FlagReply != 0
		return reply || resentCopy(f, 3)
	}
	lc := fastLinks()
	x := newFabFilter(t, ringGraph(t, 6), &lc, slowRequests(2, lc), lose)
	p := x.alloc(0)
	x.settle()
	id := x.submit(3, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[0].Stats().Atomics == 1 })
	if x.eng[0].Stats().Atomics != 1 {
		t.Fatal("the owner did not apply the CAS")
	}
	backup := x.eng[0].Backups(p.Key())[0]
	x.f.Kill(0)
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { o, _ := x.eng[backup].Holding(p.Key()); return o })
	if o, _ := x.eng[backup].Holding(p.Key()); !o {
		t.Fatalf("backup %v did not take the page over", backup)
	}
	cut = false
	x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := x.sinks[3].done[id]; return ok })
	c := x.result(3, id)
	if c.Err != nil || !c.Swapped || c.Value != 0 {
		t.Fatalf("CAS sent again after the failover: %v", c)
	}
	if n := x.eng[3].Stats().ReplResentInFlight; n != 1 {
		t.Fatalf("node 3 counts %d writes re-sent after the failover, want 1 (the CAS)", n)
	}
	if st := x.eng[3].Stats(); st.Resends < 1 || st.Resends > 100 || st.Retries < st.Resends || st.Retries > 1000 {
		t.Fatalf("node 3 counts %d resends and %d retries of one CAS whose copies were lost", st.Resends, st.Retries)
	}
	if n := x.eng[backup].Stats().Atomics; n != 0 {
		t.Fatalf("the new owner applied the CAS again (%d atomics)", n)
	}
	if got := x.word(int(backup), p); got != 1 {
		t.Fatalf("the word is %d after one CAS 0→1", got)
	}
}

func TestDelayedAtomicAfterAFailoverIsAnsweredFromTheCopysRecord(t *testing.T) {
	// R = 2. Node 3's CAS 0→1: its first copy is held back on the way,
	// its re-sent copy is committed by node 0 and answered. Node 0 dies,
	// its backup takes the page over, node 4 sets the word back to 0, and
	// the first copy arrives at the new owner: answered from the record
	// that came with the backup's copy, not applied again.
	var held []heldFrame
	holding := true
	hold := func(self noc.NodeID, f *noc.Frame) bool {
		return holding && self != 0 && self != 3 && firstCopy(f, 3)
	}
	lc := fastLinks()
	x := newFabDelay(t, ringGraph(t, 6), &lc, slowRequests(2, lc), hold, &held)
	p := x.alloc(0)
	x.settle()
	c := x.ok(3, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
	if !c.Swapped || c.Value != 0 {
		t.Fatalf("CAS 0→1 by its re-sent copy: %v", c)
	}
	if len(held) != 1 {
		t.Fatalf("%d first copies held back", len(held))
	}
	holding = false
	backup := x.eng[0].Backups(p.Key())[0]
	x.f.Kill(0)
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { o, _ := x.eng[backup].Holding(p.Key()); return o })
	if o, _ := x.eng[backup].Holding(p.Key()); !o {
		t.Fatalf("backup %v did not take the page over", backup)
	}
	var back Completion
	for try := 0; try < 200; try++ {
		if back = x.do(4, Request{Op: HostCAS, GVA: p, Expected: 1, Operand: 0}); back.Err == nil {
			break
		}
		x.f.Run(5 * time.Millisecond)
	}
	if back.Err != nil || !back.Swapped {
		t.Fatalf("CAS 1→0 after the failover: %v", back)
	}
	in, _, ok := x.f.Cores[backup].NextHop(3)
	if !ok {
		t.Fatal("no route from the new owner to node 3")
	}
	before := x.eng[backup].Stats().Atomics
	x.deliver(int(backup), in, held[0])
	x.settle()
	if got := x.word(int(backup), p); got != 0 {
		t.Fatalf("the word is %d: the delayed first copy of the CAS 0→1 was applied again after the failover", got)
	}
	if n := x.eng[backup].Stats().Atomics; n != before {
		t.Fatalf("%d atomics applied by the delayed copy", n-before)
	}
	if x.eng[backup].Stats().RepliesAgain == 0 {
		t.Fatal("the new owner answered nothing from its records")
	}
}

func TestCarriedRecordsAreBoundedAndPastTheBoundUnknown(t *testing.T) {
	// Config.PageReplies = 2: of node 2's three fetch-adds answered by
	// node 0, the newest two travel with the page to node 1. Re-sent
	// copies of all three reach node 1: the newest two are answered from
	// their records, the oldest "outcome unknown" (ETIMEDOUT), and none
	// is applied again.
	var held []heldFrame
	holding := true
	hold := func(self noc.NodeID, f *noc.Frame) bool {
		return holding && self == 0 && firstCopy(f, 2)
	}
	lc := fastLinks()
	x := newFabDelay(t, ringGraph(t, 4), &lc, func(c *Config) {
		slowRequests(1, lc)(c)
		c.PageReplies = 2
	}, hold, &held)
	p := x.alloc(0)
	x.settle()
	for i := range 3 {
		if c := x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1}); c.Value != uint64(i) {
			t.Fatalf("fetch-add %d saw %d", i, c.Value)
		}
	}
	if len(held) != 3 {
		t.Fatalf("%d first copies held back", len(held))
	}
	holding = false
	x.ok(1, Request{Op: HostRef, GVA: p})
	x.ok(1, Request{Op: HostAcquire, GVA: p})
	if got := x.eng[1].Stats().RepliesCarried; got != 2 {
		t.Fatalf("%d records came with the page, want 2", got)
	}
	in, _, _ := x.f.Cores[1].NextHop(2)
	for _, h := range held {
		var f noc.Frame
		if err := f.Decode(h.b); err != nil {
			t.Fatal(err)
		}
		f.PageVersion = resentMark
		b, err := f.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		x.deliver(1, in, heldFrame{b: b})
	}
	x.settle()
	st := x.eng[1].Stats()
	if st.RepliesAgain != 2 || st.ResendsUnknown != 1 || st.Atomics != 0 {
		t.Fatalf("new owner: %d answered from records, %d unknown, %d applied; want 2, 1, 0", st.RepliesAgain, st.ResendsUnknown, st.Atomics)
	}
	if got := x.word(1, p); got != 3 {
		t.Fatalf("the word is %d after three fetch-adds", got)
	}
}

func TestRepliesBlockRoundTrip(t *testing.T) {
	now := 10 * time.Second
	key := gva.New(3, 0x1000, 0, 0).Key()
	pr := pageReplies{from: now - 300*time.Millisecond, recs: []carriedReply{
		{k: opKey{2, 7}, rec: replyRecord{at: now - 5*time.Millisecond, key: key, class: noc.ClassAtomic, op: OpCAS, version: 9, res: atomicResult{prev: 4, swapped: true}}},
		{k: opKey{5, 1 << 40}, rec: replyRecord{at: now - time.Millisecond, key: key, class: noc.ClassStore, op: OpStore, version: 10}},
	}}
	b := appendReplies(nil, now, pr)
	if len(b) != repliesHead+2*replyLen {
		t.Fatalf("block of %d bytes", len(b))
	}
	got, err := decodeReplies(b, now+time.Second, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.from != pr.from+time.Second || len(got.recs) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	for i, r := range got.recs {
		want := pr.recs[i]
		want.rec.at += time.Second
		if r != want {
			t.Fatalf("record %d: %+v, want %+v", i, r, want)
		}
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(slices.Clone(b), 0), b[:repliesHead-1]} {
		if _, err := decodeReplies(bad, now, key, nil); err == nil {
			t.Fatalf("a block of %d bytes decoded", len(bad))
		}
	}
	c := slices.Clone(b)
	c[repliesHead+16] = byte(noc.ClassControl) // not a write or an atomic
	if _, err := decodeReplies(c, now, key, nil); err == nil {
		t.Fatal("a record of a control op decoded")
	}
	// An OpData without the flag (a node that predates records) decodes
	// as before; with it, the records come apart from the stand-ins.
	d := dataMsg{epoch: 1, seq: 2, flags: dataReplies, content: make([]byte, gva.PageSize), replies: b, backups: []noc.NodeID{4, 6}}
	dm, err := decodeData(appendData(nil, d))
	if err != nil || len(dm.replies) != len(b) || !slices.Equal(dm.backups, d.backups) {
		t.Fatalf("OpData with records: %+v, %v", dm.backups, err)
	}
	d.flags, d.replies = 0, nil
	if dm, err = decodeData(appendData(nil, d)); err != nil || dm.replies != nil || len(dm.backups) != 2 {
		t.Fatalf("OpData without records: %v", err)
	}
	m := replMsg{epoch: 1, ownerInc: 2, flags: replReplies, rank: 0, backups: []noc.NodeID{4}, off: 8, data: []byte{1, 2, 3}, replies: b}
	rm, err := decodeReplicate(appendReplicate(nil, m))
	if err != nil || len(rm.replies) != len(b) || rm.off != 8 || !slices.Equal(rm.data, m.data) {
		t.Fatalf("OpReplicate with records: %+v, %v", rm, err)
	}
}

func TestOwnHostsAtomicSentAgainBeforeItsSwapIsAppliedOnce(t *testing.T) {
	// Node 1's fetch-add to node 0's page: every copy of it (the first
	// and the re-sent ones) is held back at node 0 while node 1 takes the
	// page over. Then they arrive, and follow the page to node 1: its own
	// host's request, applied once, and the other copies dropped or
	// answered from the record, not applied again.
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			var held []heldFrame
			holding := true
			hold := func(self noc.NodeID, f *noc.Frame) bool {
				return holding && self == 0 && f.Src == 1 && f.Class == noc.ClassAtomic && f.Flags&noc.FlagReply == 0
			}
			lc := fastLinks()
			x := newFabDelay(t, ringGraph(t, 4), &lc, slowRequests(r, lc), hold, &held)
			p := x.alloc(0)
			x.ok(1, Request{Op: HostRef, GVA: p})
			x.settle()
			id := x.submit(1, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
			x.f.Run(100 * time.Millisecond)
			if len(held) < 2 {
				t.Fatalf("%d copies held back, want the first and a re-sent one", len(held))
			}
			holding = false
			x.ok(1, Request{Op: HostAcquire, GVA: p})
			for _, h := range held {
				x.deliver(0, h.in, h)
			}
			x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := x.sinks[1].done[id]; return ok })
			x.settle()
			if c := x.result(1, id); c.Err != nil || c.Value != 0 {
				t.Fatalf("fetch-add: %v", c)
			}
			if got := x.word(1, p); got != 1 {
				t.Fatalf("the word is %d after one fetch-add of 1", got)
			}
			if n := x.atomicsApplied(); n != 1 {
				t.Fatalf("%d atomics applied for one fetch-add", n)
			}
		})
	}
}

func TestWriteAnsweredUnknownEndsSoAtAFailover(t *testing.T) {
	// R = 2, owners keeping one reply record. Node 4's two fetch-adds on
	// node 0's page make node 0 drop the first one's record for room, so
	// its records no longer cover a re-sent request's life. Node 3's CAS
	// 0→1: its first copy is lost, its re-sent copy reaches node 0, which
	// has no record of it: "outcome unknown". Node 3 still counts the first
	// copy out and waits for it. Node 0 dies and its backup takes the page
	// over: the CAS an owner already answered "outcome unknown" must end
	// so at once (ETIMEDOUT, counted as failed in flight), not go again to
	// the new owner.
	lose := func(self noc.NodeID, f *noc.Frame) bool { return firstCopy(f, 3) }
	lc := fastLinks()
	slow := slowRequests(2, lc)
	x := newFabFilter(t, ringGraph(t, 6), &lc, func(c *Config) { slow(c); c.MaxReplies = 1 }, lose)
	p := x.alloc(0)
	x.settle()
	for range 2 {
		x.ok(4, Request{Op: HostFetchAdd, GVA: p.WithOffset(8), Operand: 1})
	}
	if n := x.eng[0].Stats().RepliesForgotten; n < 1 {
		t.Fatalf("the owner forgot %d reply records for room, want at least 1", n)
	}
	id := x.submit(3, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[0].Stats().ResendsUnknown >= 1 })
	if n := x.eng[0].Stats().ResendsUnknown; n < 1 {
		t.Fatal("the owner did not answer the re-sent CAS \"outcome unknown\"")
	}
	x.f.Run(10 * time.Millisecond) // the answer reaches node 3
	if _, done := x.sinks[3].done[id]; done {
		t.Fatalf("the CAS ended while its first copy counts as out: %v", x.result(3, id))
	}
	backup := x.eng[0].Backups(p.Key())[0]
	x.f.Kill(0)
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[3].done[id]; return ok })
	c := x.result(3, id)
	if !errors.Is(c.Err, syscall.ETIMEDOUT) {
		t.Fatalf("CAS answered \"outcome unknown\" before the failover: %v, want ETIMEDOUT", c)
	}
	st := x.eng[3].Stats()
	if st.ReplFailedInFlight != 1 || st.ReplResentInFlight != 0 {
		t.Fatalf("node 3 counts %d writes failed and %d re-sent at the failover, want 1 and 0", st.ReplFailedInFlight, st.ReplResentInFlight)
	}
	if n := x.eng[backup].Stats().Atomics; n != 0 {
		t.Fatalf("the new owner applied the CAS (%d atomics)", n)
	}
	if got := x.word(int(backup), p); got != 0 {
		t.Fatalf("the word is %d, no copy of the CAS was applied", got)
	}
}

func TestWriteAnsweredUnknownIsNotSentAgainAtARouteChange(t *testing.T) {
	// The setup of TestWriteAnsweredUnknownEndsSoAtAFailover: node 3's
	// CAS, its first copy lost, its re-sent copy answered "outcome
	// unknown" by an owner whose records do not cover it. Node 3 waits for
	// the first copy until the bound. A route change at node 3 (link 4–5
	// cut) re-sends the writes in flight: not this one, whose copies an
	// owner can no longer answer.
	lose := func(self noc.NodeID, f *noc.Frame) bool { return firstCopy(f, 3) }
	lc := fastLinks()
	slow := slowRequests(2, lc)
	x := newFabFilter(t, ringGraph(t, 6), &lc, func(c *Config) { slow(c); c.MaxReplies = 1 }, lose)
	p := x.alloc(0)
	x.settle()
	for range 2 {
		x.ok(4, Request{Op: HostFetchAdd, GVA: p.WithOffset(8), Operand: 1})
	}
	id := x.submit(3, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[0].Stats().ResendsUnknown >= 1 })
	if n := x.eng[0].Stats().ResendsUnknown; n < 1 {
		t.Fatal("the owner did not answer the re-sent CAS \"outcome unknown\"")
	}
	x.f.Run(300 * time.Millisecond) // the answer has gone
	if _, done := x.sinks[3].done[id]; done {
		t.Fatalf("the CAS ended while its first copy counts as out: %v", x.result(3, id))
	}
	if n := x.eng[0].Stats().ResendsUnknown; n != 1 {
		t.Fatalf("the owner answered %d copies \"outcome unknown\": the re-send timer armed before the answer sent another", n)
	}
	resends, unknown := x.eng[3].Stats().Resends, x.eng[0].Stats().ResendsUnknown
	v := x.f.Cores[3].RoutesVersion()
	if err := x.f.SetLink(4, 5, false); err != nil {
		t.Fatal(err)
	}
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.f.Cores[3].RoutesVersion() != v })
	if x.f.Cores[3].RoutesVersion() == v {
		t.Fatal("node 3's routes did not change after the cut")
	}
	x.f.Run(100 * time.Millisecond)
	if _, done := x.sinks[3].done[id]; done {
		t.Fatalf("the CAS ended before its bound: %v", x.result(3, id))
	}
	if n, u := x.eng[3].Stats().Resends, x.eng[0].Stats().ResendsUnknown; n != resends || u != unknown {
		t.Fatalf("after the route change node 3 counts %d resends (was %d), the owner %d answered unknown (was %d): "+
			"a CAS answered \"outcome unknown\" was sent again", n, resends, u, unknown)
	}
	if got := x.word(0, p); got != 0 {
		t.Fatalf("the word is %d, no copy of the CAS was applied", got)
	}
}

// acquireTwice hands every acquire its engine gets to it twice.
type acquireTwice struct{ *Engine }

func (d acquireTwice) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes) {
	d.Engine.HandleFrame(now, in, f, rt)
	if f.Flags&noc.FlagReply == 0 && f.Class == noc.ClassControl && f.Op == OpAcquire {
		d.Engine.HandleFrame(now, in, f, rt)
	}
}

func TestDuplicateAcquireWaitingAtTheOwnerIsDropped(t *testing.T) {
	// Line 0–1–2, node 0 owns the page and gets every acquire twice.
	// Node 1 locks the page, so node 2's acquire waits in node 0's
	// arbiter when its copy comes: the copy is a duplicate of the request
	// held there, counted and dropped. Once node 1 unlocks, the page moves
	// to node 2 by one swap.
	x := newFabWrap(t, lineGraph(t, 3), nil, nil, func(e *Engine) node.Handler {
		if e.Self() == 0 {
			return acquireTwice{e}
		}
		return e
	})
	p := x.alloc(0)
	x.settle()
	x.ok(1, Request{Op: HostRef, GVA: p})
	x.ok(2, Request{Op: HostRef, GVA: p})
	x.ok(1, Request{Op: HostLock, GVA: p, Holder: 1})
	id := x.submit(2, Request{Op: HostAcquire, GVA: p})
	x.f.Run(50 * time.Millisecond)
	if _, done := x.sinks[2].done[id]; done {
		t.Fatalf("acquire of a locked page granted: %v", x.result(2, id))
	}
	if d := x.eng[0].Stats().Duplicates; d != 1 {
		t.Fatalf("the owner counted %d duplicates of the waiting acquire, want 1", d)
	}
	x.ok(1, Request{Op: HostUnlock, GVA: p, Holder: 1})
	x.f.RunUntil(x.f.Now()+2*time.Second, func() bool { _, ok := x.sinks[2].done[id]; return ok })
	if c := x.result(2, id); c.Err != nil {
		t.Fatalf("acquire after the unlock: %v", c)
	}
	x.f.Run(100 * time.Millisecond)
	if o, _ := x.eng[2].Holding(p.Key()); !o {
		t.Fatal("node 2 does not own the page after its acquire")
	}
	if n := x.eng[2].Stats().SwapsCompleted; n != 1 {
		t.Fatalf("%d swaps for one acquire", n)
	}
	if d := x.eng[0].Stats().Duplicates; d != 1 {
		t.Fatalf("the owner counted %d duplicates, want 1", d)
	}
}
