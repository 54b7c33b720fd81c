package coherence

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// The stand-in of a handover at R = 1 with durable pages (durableStandIn):
// the old owner keeps a copy of the page on its log from the commit until
// the heir owns the page. These tests run a line of two nodes, each with a
// MemDisk that survives its crashes; node 0 hands a page to node 1 (the
// heir), and a lose switch lets the test lose the handover's frames.

// standIns is a line of durable nodes at R = 1.
type standIns struct {
	*fab
	disks []*pagelog.MemDisk
	// lose, if set, loses the frames it reports true for on their way to
	// node self's engine.
	lose func(self noc.NodeID, f *noc.Frame) bool
}

func newStandIns(t *testing.T) *standIns { return newStandInLine(t, 2) }

func newStandInLine(t *testing.T, n int) *standIns {
	t.Helper()
	s := &standIns{}
	for i := range n {
		s.disks = append(s.disks, pagelog.NewMemDisk(fmt.Sprintf("node%d", i), uint64(i+1)))
	}
	s.fab = newFabFilter(t, lineGraph(t, n), nil, func(c *Config) {
		l, _, err := pagelog.Open(s.disks[c.Self], pagelog.Identity{Node: c.Self})
		if err != nil {
			t.Fatal(err)
		}
		c.Durable = l
	}, func(self noc.NodeID, f *noc.Frame) bool {
		return s.lose != nil && s.lose(self, f)
	})
	return s
}

// crash kills node n with a power cut of its disk; restart starts it again
// on what its disk kept.
func (s *standIns) crash(n noc.NodeID) {
	s.f.Kill(n)
	s.disks[n].Crash()
}

func (s *standIns) restart(n noc.NodeID) {
	s.t.Helper()
	if err := s.f.Restart(n); err != nil {
		s.t.Fatal(err)
	}
}

// standIn is node n's stand-in copy of key, if it keeps one.
func (s *standIns) standIn(n noc.NodeID, key gva.GVA) *backupCopy {
	if c := s.eng[n].copies[key]; c != nil && c.hasHeir {
		return c
	}
	return nil
}

func (s *standIns) owns(n noc.NodeID, key gva.GVA) bool {
	pg := s.eng[n].pages[key]
	return pg != nil && pg.owner
}

// handOver has node 1 acquire p from node 0 and runs until node 0 has
// committed the handover (it keeps a stand-in): the acquire may still be
// on its way.
func (s *standIns) handOver(p gva.GVA) uint64 {
	s.t.Helper()
	s.ok(1, Request{Op: HostRef, GVA: p})
	id := s.submit(1, Request{Op: HostAcquire, GVA: p})
	if !s.f.RunUntil(s.f.Now()+time.Second, func() bool { return s.standIn(0, p.Key()) != nil }) {
		s.t.Fatal("node 0 did not hand the page over to node 1")
	}
	c, ok := syncedPage(s.t, s.disks[0], 0, p.Key())
	if !ok || !c.HasHeir || c.Heir != 1 || c.Owned {
		s.t.Fatalf("the old owner's log holds %+v (%v) at the commit, want a stand-in for node 1", c, ok)
	}
	return id
}

// word refs p at node n and reads its first word, each within a bound.
func (s *standIns) word(n noc.NodeID, p gva.GVA) uint64 {
	s.t.Helper()
	var c Completion
	for _, r := range []Request{{Op: HostRef, GVA: p}, {Op: HostLoad, GVA: p, Len: 8}} {
		id := s.submit(int(n), r)
		done := func() bool { _, ok := s.sinks[n].done[id]; return ok }
		if !s.f.RunUntil(s.f.Now()+10*time.Second, done) {
			s.t.Fatalf("node %d: %v %v got no answer", n, r.Op, p)
		}
		if c = s.result(int(n), id); c.Err != nil {
			s.t.Fatalf("node %d: %v %v: %v", n, r.Op, p, c.Err)
		}
	}
	return binary.LittleEndian.Uint64(c.Data)
}

// isOp reports whether f is a control frame of op from src.
func isOp(f *noc.Frame, op noc.Op, src noc.NodeID) bool {
	return f.Class == noc.ClassControl && f.Op == op && f.Src == src
}

// TestStandInDropsWhenTheHeirOwnsThePage: the old owner's stand-in ends
// once the heir owns the page, on the heir's drop (sent as the acquire
// completes, its log holding the page), not later on a probe; the heir's
// log holds the page, the old owner's a tombstone.
func TestStandInDropsWhenTheHeirOwnsThePage(t *testing.T) {
	s := newStandIns(t)
	p := s.alloc(0)
	s.fetchAdds(0, p, 3)
	id := s.handOver(p)
	if !s.f.RunUntil(s.f.Now()+time.Second, func() bool { _, ok := s.sinks[1].done[id]; return ok }) {
		t.Fatal("the acquire got no answer")
	}
	if c := s.result(1, id); c.Err != nil {
		t.Fatalf("acquire: %v", c.Err)
	}
	// The drop crosses one link; a probe of the stand-in comes no sooner
	// than a missed confirmation (min(CopyLease, 2 HomeRefresh)).
	s.f.Run(20 * time.Millisecond)
	if c := s.standIn(0, p.Key()); c != nil {
		t.Fatalf("the old owner keeps its stand-in (epoch %d) after the heir owns the page", c.epoch)
	}
	if pg, ok := syncedPage(t, s.disks[0], 0, p.Key()); ok {
		t.Fatalf("the old owner's log still holds %+v", pg)
	}
	if pg, ok := syncedPage(t, s.disks[1], 1, p.Key()); !ok || !pg.Owned {
		t.Fatalf("the heir's log holds %+v (%v), want the page it owns", pg, ok)
	}
	if v := s.word(1, p); v != 3 {
		t.Fatalf("the heir reads %d, want 3", v)
	}
}

// TestStandInWaitsOutTheHeirsSilence: a heir that owns the page, has
// acknowledged writes and dies before its drop reached the stand-in is
// silent: the stand-in never takes the page over on that (its copy lacks
// what the heir acknowledged, which the heir's log holds). The heir comes
// back on its log, and every acknowledged write is there.
func TestStandInWaitsOutTheHeirsSilence(t *testing.T) {
	s := newStandIns(t)
	p := s.alloc(0)
	acked := s.fetchAdds(0, p, 1)
	s.lose = func(self noc.NodeID, f *noc.Frame) bool { return self == 0 && isOp(f, OpReplicaDrop, 1) }
	s.handOver(p)
	acked += s.fetchAdds(1, p, 3) // the heir owns the page: these are its own
	if !s.owns(1, p.Key()) || s.standIn(0, p.Key()) == nil {
		t.Fatal("want the heir to own the page and the old owner to keep its stand-in (its drop lost)")
	}
	s.crash(1)
	if s.f.RunUntil(s.f.Now()+20*time.Second, func() bool { return s.owns(0, p.Key()) }) {
		t.Fatalf("the stand-in took the page over at version %d while its heir was silent", s.eng[0].pages[p.Key()].version)
	}
	if c, ok := syncedPage(t, s.disks[0], 0, p.Key()); !ok || !c.HasHeir {
		t.Fatalf("the old owner's log holds %+v (%v), want its stand-in still", c, ok)
	}
	s.lose = nil
	s.restart(1)
	// The heir's reloaded copy takes the page over after its restore
	// grace; the stand-in, probing, learns the heir holds a later epoch.
	if !s.f.RunUntil(s.f.Now()+20*time.Second, func() bool { return s.owns(1, p.Key()) && s.standIn(0, p.Key()) == nil }) {
		t.Fatalf("the restarted heir did not take its page back (it owns it: %v; the stand-in stays: %v)", s.owns(1, p.Key()), s.standIn(0, p.Key()) != nil)
	}
	if v := s.word(0, p); v != acked {
		t.Fatalf("after the heir's restart node 0 reads %d, want %d (every acknowledged add)", v, acked)
	}
	if v := s.word(1, p); v != acked {
		t.Fatalf("after the heir's restart node 1 reads %d, want %d", v, acked)
	}
}

// TestStandInTakesThePageBackWhenTheHeirAnswersWithoutIt: a heir that
// restarts before the handover reached it holds nothing of the page (its
// log held nothing of a page it was acquiring); asked, it answers without
// the page as a new incarnation, and the stand-in takes the page back
// with every acknowledged write.
func TestStandInTakesThePageBackWhenTheHeirAnswersWithoutIt(t *testing.T) {
	s := newStandIns(t)
	p := s.alloc(0)
	acked := s.fetchAdds(0, p, 2)
	s.lose = func(self noc.NodeID, f *noc.Frame) bool { return self == 1 && isOp(f, OpDone, 0) }
	s.handOver(p)
	s.crash(1)
	s.lose = nil
	s.restart(1)
	if !s.f.RunUntil(s.f.Now()+20*time.Second, func() bool { return s.owns(0, p.Key()) }) {
		t.Fatal("the stand-in did not take the page back from a heir that answered without it")
	}
	if v := s.word(0, p); v != acked {
		t.Fatalf("node 0 reads %d, want %d", v, acked)
	}
	if v := s.word(1, p); v != acked {
		t.Fatalf("node 1 reads %d, want %d", v, acked)
	}
}

// TestStandInOutlivesAnOlderTombstoneOfItsHeir: the heir held the page
// once before (it allocated it and handed it to node 0), so its log keeps
// a tombstone of that epoch. Node 0 hands the page back; the heir restarts
// before the handover reached it and, probed, answers with a drop naming
// its tombstone's epoch (a drop for copies of that epoch) before saying it
// holds nothing. That drop names the stand-in's own epoch, not the heir's
// (one past it): it must not end the stand-in, which then takes the page
// back.
func TestStandInOutlivesAnOlderTombstoneOfItsHeir(t *testing.T) {
	s := newStandIns(t)
	p := s.alloc(1)
	acked := s.fetchAdds(1, p, 1)
	s.ok(1, Request{Op: HostRef, GVA: p}) // node 1 keeps the page's entry: its tombstone names the epoch it handed the page on in
	s.ok(0, Request{Op: HostRef, GVA: p})
	s.ok(0, Request{Op: HostAcquire, GVA: p})
	acked += s.fetchAdds(0, p, 2)
	s.settle()
	epoch := s.eng[0].pages[p.Key()].epoch
	var tombDrops int
	loseDone := true
	s.lose = func(self noc.NodeID, f *noc.Frame) bool {
		if self == 0 && isOp(f, OpReplicaDrop, 1) && len(f.Payload) == dropLen && binary.BigEndian.Uint64(f.Payload) == epoch {
			tombDrops++
		}
		return loseDone && self == 1 && isOp(f, OpDone, 0)
	}
	s.handOver(p)
	s.crash(1)
	loseDone = false
	s.restart(1)
	if tomb, ok := s.eng[1].durGone[p.Key()]; !ok || tomb != epoch {
		t.Fatalf("the restarted heir's tombstone: epoch %d (%v), want %d (the stand-in's)", tomb, ok, epoch)
	}
	s.f.RunUntil(s.f.Now()+20*time.Second, func() bool { return s.owns(0, p.Key()) })
	if tombDrops == 0 {
		t.Fatal("the heir never sent the stand-in a drop of its tombstone's epoch: the test does not test its rule")
	}
	if !s.owns(0, p.Key()) {
		t.Fatalf("the stand-in did not take the page back (copy %v)", s.eng[0].copies[p.Key()] != nil)
	}
	if v := s.word(1, p); v != acked {
		t.Fatalf("node 1 reads %d, want %d", v, acked)
	}
}

// TestStandInEndsOnTheTombstoneOfAHeirThatHandedThePageOn: node 0 hands
// the page to node 1, whose drop is lost; node 1 hands it on to node 2,
// which owns it and acknowledges adds, the word of it to the page's home
// (node 0) lost. A power cut takes every node. Node 1 comes back first and
// its host keeps refing the page (a page entry, no more); node 0 comes
// back, and node 2 (the owner) only later. Node 0's reloaded stand-in asks node 1,
// whose log's tombstone names the epoch it handed the page on in: the
// stand-in is told to drop and never takes the page back (versions short,
// beside node 2); node 2, back, takes its page over with every
// acknowledged add.
func TestStandInEndsOnTheTombstoneOfAHeirThatHandedThePageOn(t *testing.T) {
	s := newStandInLine(t, 3)
	p := s.alloc(0)
	acked := s.fetchAdds(0, p, 1)
	s.lose = func(self noc.NodeID, f *noc.Frame) bool { return self == 0 && isOp(f, OpReplicaDrop, 1) }
	s.handOver(p)
	acked += s.fetchAdds(1, p, 1)
	s.ok(1, Request{Op: HostRef, GVA: p}) // node 1 keeps the page's entry once it hands it on
	s.ok(2, Request{Op: HostRef, GVA: p})
	// The page's home (node 0, its allocator) misses the word of the
	// second handover: its record names node 1 still, so it does not end
	// node 0's stand-in (movedOn).
	s.lose = func(self noc.NodeID, f *noc.Frame) bool {
		return self == 0 && (isOp(f, OpReplicaDrop, 1) || f.Class == noc.ClassControl && f.Op == OpOwnerMoved)
	}
	s.ok(2, Request{Op: HostAcquire, GVA: p})
	acked += s.fetchAdds(2, p, 2)
	s.settle()
	if s.standIn(0, p.Key()) == nil || s.standIn(1, p.Key()) != nil || !s.owns(2, p.Key()) {
		t.Fatalf("want node 0's stand-in kept (its drop lost), node 1's ended and node 2 the owner: %v %v %v",
			s.standIn(0, p.Key()) != nil, s.standIn(1, p.Key()) != nil, s.owns(2, p.Key()))
	}
	if rec := s.eng[0].home[p.Key()]; rec == nil || rec.owner != 1 {
		t.Fatalf("the home's record %+v, want it to name node 1 still", rec)
	}
	for n := range noc.NodeID(3) {
		s.crash(n)
	}
	s.lose = nil
	s.restart(1)
	if _, ok := s.eng[1].durGone[p.Key()]; !ok {
		t.Fatal("node 1's log keeps no tombstone of the page it handed on")
	}
	s.restart(0)
	if s.standIn(0, p.Key()) == nil {
		t.Fatal("node 0 did not reload its stand-in")
	}
	// Node 1's host keeps asking for the page (its refs fail while no
	// node owns it): node 1 keeps a page entry throughout.
	end := s.f.Now() + 10*time.Second
	for s.f.Now() < end && !s.owns(0, p.Key()) {
		if s.eng[1].pages[p.Key()] == nil {
			s.submit(1, Request{Op: HostRef, GVA: p})
			if s.eng[1].pages[p.Key()] == nil {
				t.Fatal("node 1's host ref made no page entry: the test does not test its rule")
			}
		}
		s.f.RunUntil(s.f.Now()+10*time.Millisecond, func() bool { return s.owns(0, p.Key()) || s.eng[1].pages[p.Key()] == nil })
	}
	if s.owns(0, p.Key()) {
		t.Fatalf("node 0's stand-in took the page back at version %d (node 2 owns it)", s.eng[0].pages[p.Key()].version)
	}
	if s.eng[0].copies[p.Key()] != nil {
		t.Fatal("node 0's stand-in was never told to drop")
	}
	s.restart(2)
	if !s.f.RunUntil(s.f.Now()+20*time.Second, func() bool { return s.owns(2, p.Key()) }) {
		t.Fatal("node 2 did not take its page back")
	}
	if v := s.word(0, p); v != acked {
		t.Fatalf("node 0 reads %d, want %d (every acknowledged add)", v, acked)
	}
}
