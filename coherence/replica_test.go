package coherence

import (
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

func replicas(r int) func(*Config) {
	return func(c *Config) {
		c.Replicas = r
		c.RequestTimeout = 50 * time.Millisecond
		c.HomeRefresh = 10 * time.Millisecond
	}
}

// word reads the 64-bit word at the start of content.
func word(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func TestReplicasBackupHoldsEveryAcknowledgedWrite(t *testing.T) {
	x := newFab(t, ringGraph(t, 5), replicas(2))
	p := x.alloc(0)
	x.settle()
	bs := x.eng[0].Backups(p.Key())
	if len(bs) != 1 || bs[0] == 0 {
		t.Fatalf("backups of node 0's page: %v", bs)
	}
	// The backup is a neighbour.
	nb := false
	for port := noc.PortID(0); port < 4; port++ {
		if peer, ok := x.g.Peer(0, port); ok && peer.Node == bs[0] {
			nb = true
		}
	}
	if !nb {
		t.Fatalf("backup %v is not a neighbour of node 0", bs[0])
	}
	for i := range 20 {
		c := x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		// Acknowledged: the backup already holds that version.
		v, ok := x.eng[bs[0]].Backing(p.Key())
		if !ok || v < c.Version {
			t.Fatalf("add %d acknowledged at version %d, backup holds %d (%v)", i, c.Version, v, ok)
		}
	}
	// A CAS that does not swap writes nothing and needs no backup round.
	before := x.eng[0].Stats().ReplStaged
	if c := x.ok(3, Request{Op: HostCAS, GVA: p, Expected: 99, Operand: 1}); c.Swapped || c.Value != 20 {
		t.Fatalf("failing CAS: %v", c)
	}
	if x.eng[0].Stats().ReplStaged != before {
		t.Fatal("a CAS that did not swap was staged")
	}
}

func TestReplicasOneIsTodaysBehaviour(t *testing.T) {
	x := newFab(t, ringGraph(t, 4), replicas(1))
	p := x.alloc(0)
	x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	x.settle()
	for i, e := range x.eng {
		if _, ok := e.Backing(p.Key()); ok {
			t.Fatalf("node %d keeps a backup copy with replicas = 1", i)
		}
		if st := e.Stats(); st.ReplStaged+st.ReplFullSent != 0 {
			t.Fatalf("node %d replicated with replicas = 1: %+v", i, st)
		}
	}
}

func TestFailoverKeepsAcknowledgedCountAndServesSurvivors(t *testing.T) {
	x := newFab(t, ringGraph(t, 6), replicas(2))
	p := x.alloc(0)
	x.ok(3, Request{Op: HostRef, GVA: p})
	acked := x.fetchAdds(3, p, 25)
	x.ok(0, Request{Op: HostFetchAdd, GVA: p, Operand: 1}) // from the owner's own host too
	acked++
	backup := x.eng[0].Backups(p.Key())[0]
	killed := x.f.Now()
	x.f.Kill(0)
	// Clients on other nodes keep going on the same GVA: errors only until
	// the backup took the page over.
	var first time.Duration
	for try := 0; try < 400 && first == 0; try++ {
		c := x.do(3, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		switch {
		case c.Err == nil:
			first = x.f.Now()
			if c.Value != acked {
				t.Fatalf("first add after the failover read %d, %d were acknowledged", c.Value, acked)
			}
			acked++
		case errno(c) == syscall.ETIMEDOUT || errno(c) == syscall.EAGAIN || errno(c) == syscall.EHOSTUNREACH || errno(c) == syscall.EHOSTDOWN || errno(c) == syscall.EBUSY:
			x.f.Run(2 * time.Millisecond)
		default:
			t.Fatalf("add during failover: %v", c.Err)
		}
	}
	if first == 0 {
		t.Fatal("no add succeeded after the owner died")
	}
	t.Logf("failover: kill to first successful add from node 3: %v", first-killed)
	if o, _ := x.eng[backup].Holding(p.Key()); !o {
		t.Fatalf("backup %v did not take the page over", backup)
	}
	if x.eng[backup].Stats().Promotions != 1 {
		t.Fatalf("promotions at the backup: %d", x.eng[backup].Stats().Promotions)
	}
	// Re-replicated: the new owner has a live backup again.
	x.settle()
	nbs := x.eng[backup].Backups(p.Key())
	if len(nbs) != 1 || nbs[0] == 0 {
		t.Fatalf("new owner's backups: %v", nbs)
	}
	// Every survivor reaches the page, and reads the count.
	for _, n := range []int{1, 2, 4, 5} {
		x.ok(n, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		acked++
	}
	if got := word(x.load(3, p, 8)); got != acked {
		t.Fatalf("counter %d after the failover, %d acknowledged", got, acked)
	}
	// The dead node returns as a new incarnation: it does not own the page
	// again, and the page keeps working.
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !x.f.RunUntil(x.f.Now()+10*time.Second, x.f.Converged) {
		t.Fatal("no convergence after the restart")
	}
	x.f.Run(100 * time.Millisecond)
	if o, _ := x.eng[0].Holding(p.Key()); o {
		t.Fatal("the restarted node owns the page again")
	}
	c := x.ok(0, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	if c.Value != acked {
		t.Fatalf("add from the restarted node read %d, want %d", c.Value, acked)
	}
	owners := 0
	for _, e := range x.eng {
		if o, _ := e.Holding(p.Key()); o {
			owners++
		}
	}
	if owners != 1 {
		t.Fatalf("%d owners", owners)
	}
}

func TestBackupFailureIsReplaced(t *testing.T) {
	x := newFab(t, ringGraph(t, 6), replicas(2))
	p := x.alloc(0)
	x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 5})
	old := x.eng[0].Backups(p.Key())[0]
	x.f.Kill(old)
	x.f.Run(2 * time.Second)
	nbs := x.eng[0].Backups(p.Key())
	if len(nbs) != 1 || nbs[0] == old {
		t.Fatalf("backups after backup %v died: %v", old, nbs)
	}
	c := x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	if c.Value != 5 {
		t.Fatalf("add read %d", c.Value)
	}
	if v, ok := x.eng[nbs[0]].Backing(p.Key()); !ok || v < c.Version {
		t.Fatalf("new backup holds %d (%v), acknowledged %d", v, ok, c.Version)
	}
}

func TestOwnershipTransferMovesBackups(t *testing.T) {
	x := newFab(t, ringGraph(t, 6), replicas(2))
	p := x.alloc(0)
	x.ok(3, Request{Op: HostRef, GVA: p})
	x.ok(3, Request{Op: HostAcquire, GVA: p})
	x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 7})
	x.settle()
	bs := x.eng[3].Backups(p.Key())
	if len(bs) != 1 {
		t.Fatalf("new owner's backups: %v", bs)
	}
	for i, e := range x.eng {
		if _, ok := e.Backing(p.Key()); ok && !slices.Contains(bs, noc.NodeID(i)) {
			t.Fatalf("node %d keeps the old owner's copy", i)
		}
	}
	x.f.Kill(3)
	var c Completion
	for try := 0; try < 400; try++ {
		c = x.do(1, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		if c.Err == nil {
			break
		}
		x.f.Run(2 * time.Millisecond)
	}
	if c.Err != nil || c.Value != 7 {
		t.Fatalf("add after the new owner died: %v", c)
	}
}

func TestReplicateDecoderRefusesGarbage(t *testing.T) {
	for _, p := range [][]byte{nil, make([]byte, replHead-1), append(make([]byte, 18), 9), append(make([]byte, replHead), 0, 0)} {
		if _, err := decodeReplicate(p); err == nil {
			t.Fatalf("decodeReplicate(%x) accepted", p)
		}
	}
}

func TestHandedOverPageSurvivesTheNewOwnersDeathBeforeItsBackups(t *testing.T) {
	// The old owner's backup keeps its copy for the new owner until the
	// new owner's backups hold the page: if the new owner dies at once,
	// the old backup takes the page over with every acknowledged write.
	x := newFab(t, ringGraph(t, 6), replicas(2))
	p := x.alloc(0)
	x.ok(3, Request{Op: HostRef, GVA: p})
	x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 9})
	old := x.eng[0].Backups(p.Key())[0]
	id := x.submit(3, Request{Op: HostAcquire, GVA: p})
	// Run until node 3 owns the page, then kill it before anything else.
	if !x.f.RunUntil(x.f.Now()+time.Second, func() bool { o, _ := x.eng[3].Holding(p.Key()); return o }) {
		t.Fatal("node 3 never owned the page")
	}
	x.f.Kill(3)
	_ = id
	var c Completion
	for try := 0; try < 400; try++ {
		c = x.do(1, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		if c.Err == nil {
			break
		}
		x.f.Run(2 * time.Millisecond)
	}
	if c.Err != nil || c.Value != 9 {
		t.Fatalf("add after the new owner died: %v", c)
	}
	owners := 0
	for i, e := range x.eng {
		if i == 3 {
			continue
		}
		if o, _ := e.Holding(p.Key()); o {
			owners++
		}
	}
	if owners != 1 {
		t.Fatalf("%d owners after the failover", owners)
	}
	t.Logf("old backup %v; promotions: %v", old, func() (s []uint64) {
		for _, e := range x.eng {
			s = append(s, e.Stats().Promotions)
		}
		return
	}())
}

// TestStandInTakesOverWhenTheOldOwnerRestartsAndTheHeirGivesUp: the old
// owner commits a handover (its backup now stands in for the heir, behind
// the old owner itself, ranked first), but the done never reaches the heir:
// the heir's links are cut and declared dead. The old owner restarts at
// once (routing reaches it again, as a new incarnation without the page)
// and the heir, back, gives the swap up. The stand-in must learn that the
// first-ranked stand-in no longer holds the page and take it over with
// every acknowledged write; a stand-in held back by a reachable node that
// lost its copy leaves the page with no owner.
func TestStandInTakesOverWhenTheOldOwnerRestartsAndTheHeirGivesUp(t *testing.T) {
	lc := fastLinks()
	x := newFabLinks(t, ringGraph(t, 4), &lc, replicas(2))
	p := x.alloc(0)
	acked := x.fetchAdds(1, p, 5)
	x.settle()
	standIn := x.eng[0].Backups(p.Key())[0]
	const heir = 2 // ring 0-1-2-3: node 0's neighbours are 1 and 3
	x.ok(heir, Request{Op: HostRef, GVA: p})
	x.submit(heir, Request{Op: HostAcquire, GVA: p, Timeout: time.Second})
	if !x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[0].Stats().SwapsCommitted > 0 }) {
		t.Fatal("the old owner did not commit the handover")
	}
	// The done is on its way: the heir is cut off before it arrives.
	for _, nb := range []noc.NodeID{1, 3} {
		if err := x.f.SetLink(heir, nb, false); err != nil {
			t.Fatal(err)
		}
	}
	x.f.Run(time.Millisecond)
	if _, swapping := x.eng[heir].Holding(p.Key()); !swapping {
		t.Fatal("the heir is not waiting for its done")
	}
	if v, ok := x.eng[standIn].Backing(p.Key()); !ok || v == 0 {
		t.Fatalf("stand-in %v keeps no copy", standIn)
	}
	x.f.Kill(0)
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	x.f.Run(60 * time.Millisecond) // the heir's links are declared dead
	for _, nb := range []noc.NodeID{1, 3} {
		if err := x.f.SetLink(heir, nb, true); err != nil {
			t.Fatal(err)
		}
	}
	var owners []int
	x.f.RunUntil(x.f.Now()+2*time.Second, func() bool {
		owners = owners[:0]
		for i, e := range x.eng {
			if o, _ := e.Holding(p.Key()); o {
				owners = append(owners, i)
			}
		}
		return len(owners) > 0
	})
	if len(owners) != 1 {
		t.Fatalf("owners after the handover's old owner restarted: %v", owners)
	}
	if owners[0] == 0 {
		t.Fatal("the restarted old owner owns the page again")
	}
	x.settle()
	c := x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	if c.Value != acked {
		t.Fatalf("add after the takeover read %d, %d were acknowledged", c.Value, acked)
	}
}

// TestReplicasBeyondTheNeighbours: a node with fewer neighbours than R−1
// (the end of a line) places its other backups on the nearest nodes beyond
// them, and acknowledges a write only once all R−1 hold it; with fewer
// than R nodes to hold the page, no write is acknowledged.
func TestReplicasBeyondTheNeighbours(t *testing.T) {
	x := newFab(t, lineGraph(t, 4), replicas(3))
	p := x.alloc(0)
	x.settle()
	bs := x.eng[0].Backups(p.Key())
	if !slices.Equal(bs, []noc.NodeID{1, 2}) {
		t.Fatalf("backups of the line's end: %v, want the neighbour then the node two hops away", bs)
	}
	for range 5 {
		c := x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		for _, b := range bs {
			if v, ok := x.eng[b].Backing(p.Key()); !ok || v < c.Version {
				t.Fatalf("add acknowledged at version %d, backup %v holds %d (%v)", c.Version, b, v, ok)
			}
		}
	}
	// Node 2 dies, cutting node 3 off: node 0 reaches two of the four
	// nodes, no majority (the split rule): it does not give node 2 up,
	// which may live on the other side of a split.
	x.f.Kill(2)
	x.f.Run(2 * time.Second)
	if bs := x.eng[0].Backups(p.Key()); !slices.Equal(bs, []noc.NodeID{1, 2}) {
		t.Fatalf("backups with node 2 dead and node 3 cut off: %v, want both kept (no majority)", bs)
	}
	// Two of the four nodes reachable from node 0: no write is acknowledged.
	if c := x.do(0, Request{Op: HostFetchAdd, GVA: p, Operand: 1}); errno(c) != syscall.ETIMEDOUT {
		t.Fatalf("add with two copies possible at replicas 3: %v", c)
	}
}

// TestBackupCopiesCountAgainstPages: a backup copy takes one of the node's
// physical pages (the capacity rule). Ring 0-1-2-3, node 0's neighbours 1
// and 3 have one page each: the first two pages' copies fill them, the
// third page's copy is refused there and placed on node 2, two hops away;
// a node full of copies maps nothing more.
func TestBackupCopiesCountAgainstPages(t *testing.T) {
	x := newFab(t, ringGraph(t, 4), func(c *Config) {
		replicas(2)(c)
		if c.Self == 1 || c.Self == 3 {
			c.Pages = 1
		}
	})
	var pages []gva.GVA
	var placed []noc.NodeID
	for range 3 {
		p := x.alloc(0)
		x.settle()
		bs := x.eng[0].Backups(p.Key())
		if len(bs) != 1 {
			t.Fatalf("backups of page %d: %v", len(pages), bs)
		}
		pages, placed = append(pages, p), append(placed, bs[0])
	}
	slices.Sort(placed[:2])
	if !slices.Equal(placed, []noc.NodeID{1, 3, 2}) {
		t.Fatalf("copies placed on %v, want the two neighbours, then node 2 once they are full", placed)
	}
	for _, n := range []int{1, 3} {
		if u := x.eng[n].PageUse(); u.Backups != 1 || u.Capacity != 1 {
			t.Fatalf("node %d's pages: %+v", n, u)
		}
		if x.eng[n].Stats().ReplNoRoom == 0 {
			t.Fatalf("node %d refused no copy", n)
		}
	}
	c := x.ok(1, Request{Op: HostFetchAdd, GVA: pages[2], Operand: 1})
	if c := x.do(3, Request{Op: HostRef, GVA: pages[2]}); errno(c) != syscall.ENOMEM {
		t.Fatalf("node 3, full of copies, mapped a page: %v", c.Err)
	}
	if v, ok := x.eng[2].Backing(pages[2].Key()); !ok || v < c.Version {
		t.Fatalf("node 2 holds %d (%v), acknowledged %d", v, ok, c.Version)
	}
}

// TestOwnerRestartsFast: the owner of a page restarts faster than its
// links' dead interval. Its backup learns of the restart by a probe and
// takes the page over; until then requests for the page wait (the page is
// coming back): they never end as if it were gone (EHOSTDOWN from the
// restarted owner the home redirects them to, or ESTALE from a restarted
// home), and the count survives. Pages homed elsewhere and at the
// restarted node itself.
func TestOwnerRestartsFast(t *testing.T) {
	for _, home := range []int{1, 0} {
		t.Run(fmt.Sprintf("home %d", home), func(t *testing.T) {
			x := newFab(t, ringGraph(t, 4), func(c *Config) {
				replicas(2)(c)
				c.AllocEpoch = uint32(1 + c.Incarnation/1000) // a restart is a new allocation epoch
			})
			p := x.alloc(home)
			if home != 0 {
				x.ok(0, Request{Op: HostRef, GVA: p})
				x.ok(0, Request{Op: HostAcquire, GVA: p})
			}
			acked := x.fetchAdds(2, p, 5)
			x.settle()
			if o, _ := x.eng[0].Holding(p.Key()); !o {
				t.Fatal("node 0 does not own the page")
			}
			backup := x.eng[0].Backups(p.Key())[0]
			x.f.Kill(0)
			if err := x.f.Restart(0); err != nil {
				t.Fatal(err)
			}
			start := x.f.Now()
			var done bool
			for try := 0; try < 200 && !done; try++ {
				c := x.do(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
				switch errno(c) {
				case 0:
					if c.Value != acked {
						t.Fatalf("add after the takeover read %d, %d were acknowledged", c.Value, acked)
					}
					done = true
				case syscall.ETIMEDOUT, syscall.EAGAIN:
					x.f.Run(time.Millisecond)
				default:
					t.Fatalf("add %v after the owner's restart: %v", x.f.Now()-start, c.Err)
				}
			}
			if !done {
				t.Fatal("no add succeeded after the owner restarted")
			}
			if o, _ := x.eng[backup].Holding(p.Key()); !o {
				t.Fatalf("backup %v did not take the page over", backup)
			}
			t.Logf("restart to the first add: %v", x.f.Now()-start)
		})
	}
}

// TestHeirWritesOnlyOnceTheStandInsDroppedTheirCopies: the stand-ins of a
// handover (the old owner and its backup) keep their copies, of the old
// epoch, until the heir's own backup holds the page; the heir then tells
// them to drop them. That word is lost here (the first drop from the heir
// to each node). Had the heir gone on writing, a stand-in would keep its
// old copy and, the heir dead, could take the page over at the old
// version, losing what the heir acknowledged. The heir must re-send until
// each stand-in confirms, and acknowledge no write before: once a write is
// acknowledged, only the heir's own backups keep a copy.
func TestHeirWritesOnlyOnceTheStandInsDroppedTheirCopies(t *testing.T) {
	const heir = 3
	lost := map[noc.NodeID]bool{}
	x := newFabFilter(t, ringGraph(t, 6), nil, replicas(2), func(self noc.NodeID, f *noc.Frame) bool {
		if f.Class == noc.ClassControl && f.Op == OpReplicaDrop && f.Src == heir && len(f.Payload) == dropLen && !lost[self] {
			lost[self] = true
			return true
		}
		return false
	})
	p := x.alloc(0)
	x.ok(heir, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	x.settle()
	standIns := append([]noc.NodeID{0}, x.eng[0].Backups(p.Key())...)
	for _, n := range standIns {
		if _, ok := x.eng[n].Backing(p.Key()); n != 0 && !ok {
			t.Fatalf("backup %v of the old owner keeps no copy", n)
		}
	}
	x.ok(heir, Request{Op: HostRef, GVA: p})
	x.ok(heir, Request{Op: HostAcquire, GVA: p})
	acked := uint64(1)
	for range 3 {
		c := x.ok(heir, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		acked++
		bs := x.eng[heir].Backups(p.Key())
		for i, e := range x.eng {
			if _, ok := e.Backing(p.Key()); ok && !slices.Contains(bs, noc.NodeID(i)) {
				t.Fatalf("add acknowledged at version %d while node %d (stand-ins %v, the heir's backups %v) keeps a copy",
					c.Version, i, standIns, bs)
			}
		}
	}
	for _, n := range standIns {
		if !lost[n] {
			t.Fatalf("the heir's first drop to stand-in %v was not lost (lost: %v): the test lost nothing", n, lost)
		}
	}
	// The heir dies: its backup takes the page over with every
	// acknowledged add.
	x.f.Kill(heir)
	var c Completion
	for try := 0; try < 400; try++ {
		c = x.do(1, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		if c.Err == nil {
			break
		}
		x.f.Run(2 * time.Millisecond)
	}
	if c.Err != nil || c.Value != acked {
		t.Fatalf("add after the heir died: %v, %d were acknowledged", c, acked)
	}
}

// TestBackupPromotesWhileItsOwnAcquireIsInFlight: the owner dies while the
// backup's host is acquiring the page (the acquire went to the dead owner
// and waits for an answer that never comes). The backup holds every
// committed version and is first in rank: it takes the page over at once,
// and its host's acquire is answered by the page now owned there, instead
// of the page staying without an owner until the acquire ends at its bound.
func TestBackupPromotesWhileItsOwnAcquireIsInFlight(t *testing.T) {
	lc := fastLinks()
	x := newFabLinks(t, ringGraph(t, 6), &lc, func(c *Config) {
		replicas(2)(c)
		c.RequestTimeout = 2 * time.Second
	})
	p := x.alloc(0)
	acked := x.fetchAdds(3, p, 5)
	x.settle()
	backup := int(x.eng[0].Backups(p.Key())[0])
	x.ok(backup, Request{Op: HostRef, GVA: p})
	x.f.Kill(0)
	killed := x.f.Now()
	id := x.submit(backup, Request{Op: HostAcquire, GVA: p})
	if !x.f.RunUntil(killed+3*time.Second, func() bool { _, ok := x.sinks[backup].done[id]; return ok }) {
		t.Fatal("the acquire never completed")
	}
	c := x.result(backup, id)
	took := x.f.Now() - killed
	if c.Err != nil {
		t.Fatalf("acquire at the backup after %v: %v", took, c.Err)
	}
	if o, _ := x.eng[backup].Holding(p.Key()); !o {
		t.Fatal("the backup does not own the page after its acquire")
	}
	if took > 200*time.Millisecond { // the link's dead interval is 12 ms, the request's bound 2 s
		t.Fatalf("the acquire took %v: the takeover waited for it", took)
	}
	t.Logf("acquire answered %v after the kill", took)
	x.settle() // the failover's word reaches every node
	if got := x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 1}).Value; got != acked {
		t.Fatalf("add after the takeover read %d, %d were acknowledged", got, acked)
	}
}

// TestBackupAddedDuringAHandoverIsDropped: the old owner replaces a backup
// it lost while it hands the page over (after it sent the content, which
// names its stand-ins then). The heir does not know the new backup: once
// its own backups hold the page, no node but them keeps a copy, the new
// backup included (it kept it until CopyLease, a stand-in for the heir no
// one would release).
func TestBackupAddedDuringAHandoverIsDropped(t *testing.T) {
	lc := fastLinks()
	holdAcks := false
	x := newFabFilter(t, ringGraph(t, 6), &lc, func(c *Config) {
		replicas(2)(c)
		c.SwapTimeout = 300 * time.Millisecond
		c.RequestTimeout = 2 * time.Second
		c.HomeRefresh = time.Second // copies are confirmed (and their owners probed) seldom
	}, func(self noc.NodeID, f *noc.Frame) bool {
		return holdAcks && self == 0 && f.Class == noc.ClassControl && f.Op == OpDataAck
	})
	p := x.alloc(0)
	x.ok(3, Request{Op: HostFetchAdd, GVA: p, Operand: 4})
	x.settle()
	first := x.eng[0].Backups(p.Key())[0]
	// Ring 0-1-2-3-4-5: the heir's route to node 0 avoids the backup.
	heir := 4
	if first == 5 {
		heir = 2
	}
	if first != 1 && first != 5 {
		t.Fatalf("node 0's backup %v is not a neighbour", first)
	}
	x.ok(heir, Request{Op: HostRef, GVA: p})
	holdAcks = true // the old owner waits for the heir's confirmation
	id := x.submit(heir, Request{Op: HostAcquire, GVA: p})
	if !x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, s := x.eng[0].Holding(p.Key()); return s }) {
		t.Fatal("node 0 never started handing the page over")
	}
	x.f.Kill(first)
	var second noc.NodeID
	if !x.f.RunUntil(x.f.Now()+200*time.Millisecond, func() bool {
		bs := x.eng[0].Backups(p.Key())
		if len(bs) == 1 && bs[0] != first {
			second = bs[0]
			return true
		}
		return false
	}) {
		t.Fatalf("node 0 did not replace its dead backup %v during the handover: %v", first, x.eng[0].Backups(p.Key()))
	}
	if _, s := x.eng[0].Holding(p.Key()); !s {
		t.Fatal("the handover ended before the backup was replaced")
	}
	if !x.f.RunUntil(x.f.Now()+50*time.Millisecond, func() bool { _, ok := x.eng[second].Backing(p.Key()); return ok }) {
		t.Fatalf("the new backup %v holds no copy", second)
	}
	if _, s := x.eng[0].Holding(p.Key()); !s {
		t.Fatal("the handover ended before the new backup held a copy")
	}
	holdAcks = false
	if !x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[heir].done[id]; return ok }) {
		t.Fatal("the acquire never completed")
	}
	if c := x.result(heir, id); c.Err != nil {
		t.Fatalf("acquire: %v", c.Err)
	}
	if c := x.ok(heir, Request{Op: HostFetchAdd, GVA: p, Operand: 1}); c.Value != 4 {
		t.Fatalf("add at the heir read %d", c.Value)
	}
	x.f.Run(100 * time.Millisecond) // far below CopyLease
	hb := x.eng[heir].Backups(p.Key())
	t.Logf("first %v second %v heir %v heir's backups %v", first, second, heir, hb)
	for i, e := range x.eng {
		if i == int(first) {
			continue
		}
		if _, ok := e.Backing(p.Key()); ok && !slices.Contains(hb, noc.NodeID(i)) {
			t.Errorf("node %d keeps a copy; the heir's backups are %v (the old owner's were %v, then %v)", i, hb, first, second)
		}
	}
}

// TestImpossibleBackupAnswersAreRefused: a backup's answer that names a
// version of the page its owner never made, or an epoch the page never
// had there, is refused and counted (Stats.ReplAcksRefused), never taken
// as the backup holding the page: the owner sends the page whole again,
// and every acknowledged write is still held by the backup.
func TestImpossibleBackupAnswersAreRefused(t *testing.T) {
	forged := 0
	x := newFabFilter(t, ringGraph(t, 4), nil, replicas(2), func(self noc.NodeID, f *noc.Frame) bool {
		if self != 0 || f.Class != noc.ClassControl || f.Op != OpReplicateAck || len(f.Payload) != replAckLn || f.Payload[16] != 0 || forged >= 6 {
			return false
		}
		if forged++; forged%2 == 1 {
			f.PageVersion += 1000 // a version no owner made
		} else {
			binary.BigEndian.PutUint64(f.Payload, binary.BigEndian.Uint64(f.Payload)+7) // an epoch it never had
		}
		return false
	})
	p := x.alloc(0)
	x.settle()
	forged = 0
	bs := x.eng[0].Backups(p.Key())
	if len(bs) != 1 {
		t.Fatalf("backups of node 0's page: %v", bs)
	}
	for i := range 8 {
		c := x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
		if c.Value != uint64(i) {
			t.Fatalf("add %d returned %d", i, c.Value)
		}
		if v, ok := x.eng[bs[0]].Backing(p.Key()); !ok || v < c.Version {
			t.Fatalf("add %d acknowledged at version %d, the backup holds %d (%v)", i, c.Version, v, ok)
		}
	}
	if forged < 6 {
		t.Fatalf("only %d answers forged", forged)
	}
	if got := x.eng[0].Stats().ReplAcksRefused; got < 6 {
		t.Fatalf("%d answers refused, want 6", got)
	}
}

// TestTakeoverServesNothingBeforeItSettles: at R = 3 the owner dies and
// its first backup takes the page over while every word of it to the
// second backup (its fellow, which keeps a copy of the old epoch) is lost.
// Until that fellow confirms it dropped its copy the new owner serves no
// ref: its copy may hold the dead owner's staged write, which the fellow,
// taking the page over beyond a split, would undo after readers saw it
// (dpu-sim seed 103). Once the fellow hears, the ref is served with every
// acknowledged add.
func TestTakeoverServesNothingBeforeItSettles(t *testing.T) {
	lc := fastLinks()
	var first, fellow noc.NodeID
	cut := false
	x := newFabFilter(t, ringGraph(t, 6), &lc, func(c *Config) {
		replicas(3)(c)
		c.RequestTimeout = 2 * time.Second
	}, func(self noc.NodeID, f *noc.Frame) bool {
		return cut && self == fellow && f.Src == first && f.Class == noc.ClassControl
	})
	p := x.alloc(0)
	acked := x.fetchAdds(0, p, 5)
	x.settle()
	bs := x.eng[0].Backups(p.Key())
	if len(bs) != 2 {
		t.Fatalf("backups %v, want 2", bs)
	}
	first, fellow = bs[0], bs[1]
	reader := -1
	for n := 1; n < 6; n++ {
		if noc.NodeID(n) != first && noc.NodeID(n) != fellow {
			reader = n
			break
		}
	}
	cut = true
	x.f.Kill(0)
	if !x.f.RunUntil(x.f.Now()+time.Second, func() bool { o, _ := x.eng[first].Holding(p.Key()); return o }) {
		t.Fatalf("backup %v never took the page over", first)
	}
	id := x.submit(reader, Request{Op: HostRef, GVA: p})
	x.f.Run(100 * time.Millisecond) // many round trips: the fellow's answer never comes
	if c, ok := x.sinks[reader].done[id]; ok && c.Err == nil {
		t.Fatalf("ref served at version %d by the takeover before its fellow %v dropped its copy", c.Version, fellow)
	}
	if _, ok := x.eng[fellow].Backing(p.Key()); !ok {
		t.Fatalf("the fellow %v dropped its copy: the test lost nothing", fellow)
	}
	cut = false
	if _, ok := x.sinks[reader].done[id]; !ok {
		if !x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[reader].done[id]; return ok }) {
			t.Fatal("the ref never completed after the fellow heard of the takeover")
		}
	}
	if c := x.result(reader, id); c.Err != nil {
		x.ok(reader, Request{Op: HostRef, GVA: p}) // it ended at its bound meanwhile: map it again
	}
	c := x.ok(reader, Request{Op: HostLoad, GVA: p, Len: 8})
	if binary.LittleEndian.Uint64(c.Data) != acked {
		t.Fatalf("load after the takeover settled: %v, %d were acknowledged", c, acked)
	}
	if _, ok := x.eng[fellow].Backing(p.Key()); ok {
		t.Fatalf("the fellow %v still keeps its copy after the takeover settled", fellow)
	}
}

// TestReplicateToTheOwnerIsStale: a full copy of a page (OpReplicate)
// that reaches the page's owner, from a node that still takes itself for
// the owner, is a stale owner's frame: counted once as stale, dropped (the
// owner's content stays), and the owner stays.
func TestReplicateToTheOwnerIsStale(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), func(c *Config) { c.Replicas = 2 })
	p := x.alloc(0)
	x.ok(0, Request{Op: HostFetchAdd, GVA: p, Operand: 7})
	x.settle()
	before := x.eng[0].Stats().Stale
	content := make([]byte, gva.PageSize)
	for i := range content {
		content[i] = 0xab
	}
	f := newFrame(noc.ClassControl, OpReplicate, 0, 2, 0, 0, p.Key(), 9,
		appendReplicate(nil, replMsg{epoch: 1, ownerInc: 102, flags: replFull, backups: []noc.NodeID{0}, data: content}))
	x.eng[0].HandleFrame(x.f.Now(), noc.PortID(0), &f, x.f.Cores[0])
	x.settle()
	if n := x.eng[0].Stats().Stale - before; n != 1 {
		t.Fatalf("the owner counted %d stale frames for one copy from a stale owner, want 1", n)
	}
	if o, _ := x.eng[0].Holding(p.Key()); !o {
		t.Fatal("the owner gave the page up for a stale owner's copy")
	}
	if got := x.word(0, p); got != 7 {
		t.Fatalf("the owner's word is %#x after a stale owner's copy, want 7", got)
	}
}
