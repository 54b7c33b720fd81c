package coherence

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

func TestLinkDownDetachesSubtreeAndReplicasReRef(t *testing.T) {
	// Ring of 6: node 0 owns; node 3 maps through 1-2 or 5-4. Cutting a link
	// on its path resets the entries beyond it; node 3's next load re-refs
	// along the other side of the ring and reads the current content.
	g := ringGraph(t, 6)
	x := newFab(t, g, nil)
	p := x.alloc(0)
	x.ok(3, Request{Op: HostRef, GVA: p})
	ent, _ := x.eng[3].Entry(p.Key())
	up, _ := x.g.Peer(3, ent.Up)
	if err := x.f.SetLink(3, up.Node, false); err != nil {
		t.Fatal(err)
	}
	x.f.Run(2 * time.Second) // the link layer declares the link dead
	if _, ok := x.eng[3].Entry(p.Key()); ok {
		t.Fatal("node 3 kept its entry after its up link died")
	}
	invalidated := false
	for _, ev := range x.sinks[3].events {
		invalidated = invalidated || ev.Kind == EventInvalidated && ev.GVA == p.Key()
	}
	if !invalidated {
		t.Fatal("the host was not told its replica became invalid")
	}
	x.ok(0, Request{Op: HostStore, GVA: p.WithOffset(10), Data: []byte("after")})
	if got := x.load(3, p.WithOffset(10), 5); string(got) != "after" {
		t.Fatalf("node 3 reads %q after re-ref", got)
	}
	// The owner lost the dead branch; the new branch is live.
	before := x.sent()
	x.ok(0, Request{Op: HostStore, GVA: p, Data: []byte{1}})
	x.settle()
	us, _ := x.sent().Messages(noc.ClassStore, OpUpdate)
	ub, _ := before.Messages(noc.ClassStore, OpUpdate)
	if int(us-ub) != x.branches(p.Key()) {
		t.Fatalf("%d updates for %d branches", us-ub, x.branches(p.Key()))
	}
}

func TestOwnerFailureEndsRequestsWithHostDown(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), func(c *Config) {
		c.RequestTimeout = 50 * time.Millisecond
		c.HomeRefresh = 10 * time.Millisecond
	})
	p := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: p})
	x.f.Kill(0)
	x.f.Run(3 * time.Second) // neighbours declare the node dead, routes drop it
	for _, r := range []Request{
		{Op: HostStore, GVA: p, Data: []byte{1}},
		{Op: HostFetchAdd, GVA: p, Operand: 1},
		{Op: HostLoad, GVA: p, Len: 1},
	} {
		if c := x.do(2, r); errno(c) != syscall.EHOSTDOWN {
			t.Fatalf("%v on a page whose owner failed: %v", r.Op, c.Err)
		}
	}
	// The node returns as a new incarnation without the page: still
	// EHOSTDOWN (the page is lost), now answered at once by its home.
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !x.f.RunUntil(x.f.Now()+10*time.Second, x.f.Converged) {
		t.Fatal("no convergence after the restart")
	}
	x.f.Run(100 * time.Millisecond)
	start := x.f.Now()
	c := x.do(2, Request{Op: HostStore, GVA: p, Data: []byte{1}})
	if errno(c) != syscall.EHOSTDOWN {
		t.Fatalf("store after the owner returned: %v", c.Err)
	}
	if c.At-start > 50*time.Millisecond {
		t.Fatalf("answered after %v", c.At-start)
	}
}

func TestEvictionDetachesAndReplicasReRef(t *testing.T) {
	// Node 1 is an intermediate with room for two entries: a third page
	// through it evicts the first page's entry, which detaches node 2's
	// replica of it; node 2 re-refs on its next load.
	x := newFab(t, lineGraph(t, 3), func(c *Config) {
		if c.Self == 1 {
			c.Pages, c.PathCache = 1, pathcache.Config{MaxEntries: 2}
		}
	})
	a := x.alloc(0)
	b := x.alloc(0)
	c := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: a})
	x.ok(2, Request{Op: HostRef, GVA: b})
	x.ok(2, Request{Op: HostRef, GVA: c})
	x.settle()
	if _, ok := x.eng[1].Entry(a.Key()); ok {
		t.Fatal("node 1 holds three entries with room for two")
	}
	if _, ok := x.eng[2].Entry(a.Key()); ok {
		t.Fatal("node 2 kept the entry of the evicted branch")
	}
	if e0, _ := x.eng[0].Entry(a.Key()); !e0.Down.Empty() {
		t.Fatalf("owner still counts the evicted branch: %v", e0.Down)
	}
	if x.eng[1].Stats().Evictions == 0 {
		t.Fatal("no eviction counted")
	}
	x.ok(0, Request{Op: HostStore, GVA: a, Data: []byte("new")})
	if got := x.load(2, a, 3); string(got) != "new" {
		t.Fatalf("node 2 reads %q after the eviction", got)
	}
	if _, err := New(Config{Self: 1, Sink: &recordSink{}, Pages: 8, PathCache: pathcache.Config{MaxEntries: 8}}); err == nil {
		t.Fatal("a path cache no larger than the pages was accepted")
	}
}

func TestSwapAbortedWhenAcquirerGoesSilent(t *testing.T) {
	// The acquirer's link dies right after the grant: the old owner calls
	// the swap off and keeps serving writes.
	x := newFab(t, lineGraph(t, 3), func(c *Config) { c.SwapTimeout = 5 * time.Millisecond })
	p := x.alloc(1)
	x.ok(2, Request{Op: HostRef, GVA: p})
	x.ok(0, Request{Op: HostRef, GVA: p})
	id := x.submit(2, Request{Op: HostAcquire, GVA: p})
	// Let the acquire reach node 1 and the grant leave, then cut 1-2.
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[1].Stats().SwapsStarted > 0 })
	if err := x.f.SetLink(1, 2, false); err != nil {
		t.Fatal(err)
	}
	x.f.Run(50 * time.Millisecond)
	if s := x.eng[1].Stats(); s.SwapsAborted == 0 && s.SwapsCommitted == 0 {
		t.Fatalf("swap neither aborted nor committed: %+v", s)
	}
	if owner, swapping := x.eng[1].Holding(p.Key()); !owner || swapping {
		if x.eng[1].Stats().SwapsCommitted == 0 {
			t.Fatalf("old owner: owner=%v swapping=%v", owner, swapping)
		}
	}
	c := x.ok(0, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	if c.Value != 0 {
		t.Fatalf("fetch-add after the aborted swap: %v", c)
	}
	x.f.Run(200 * time.Millisecond)
	if c := x.result(2, id); c.Err == nil {
		t.Fatal("acquire across a dead link succeeded")
	}
}

func TestWriteInvalidateTellsTheHost(t *testing.T) {
	x := newFab(t, lineGraph(t, 2), nil)
	p := x.alloc(0)
	x.ok(1, Request{Op: HostRef, GVA: p})
	big := bytes.Repeat([]byte{5}, 300)
	x.ok(0, Request{Op: HostStore, GVA: p, Data: big})
	x.settle()
	var inv []Event
	for _, ev := range x.sinks[1].events {
		if ev.Kind == EventInvalidated {
			inv = append(inv, ev)
		}
	}
	if len(inv) != 1 || inv[0].Version != 1 {
		t.Fatalf("invalidation events %+v", inv)
	}
	if pe := x.eng[1].PathCacheSnapshot(); len(pe) != 1 || pe[0].Replica != pathcache.ReplicaInvalid {
		t.Fatalf("snapshot %+v", pe)
	}
	if got := x.load(1, p, 300); !bytes.Equal(got, big) {
		t.Fatal("re-fetch after invalidate reads the wrong bytes")
	}
}

func TestWhereAndSnapshots(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	p := x.alloc(0)
	if loc := x.ok(0, Request{Op: HostWhere, GVA: p}).Where; loc.Hops != 0 || loc.Owner != 0 {
		t.Fatalf("where at the owner: %+v", loc)
	}
	x.ok(2, Request{Op: HostRef, GVA: p})
	loc := x.ok(2, Request{Op: HostWhere, GVA: p}).Where
	// The primary's distance: whether a process maps a valid replica
	// (tier local) is the host interface's to say.
	if loc.Owner != 0 || loc.Hops != 2 || loc.Tier.String() != "remote" {
		t.Fatalf("where at a mapped replica: %+v", loc)
	}
	x.ok(1, Request{Op: HostRef, GVA: p})
	x.ok(1, Request{Op: HostLock, GVA: p, Holder: 4})
	snap := x.eng[1].OwnerSnapshot()
	if len(snap) != 1 || !snap[0].Arbiter.Pinned || snap[0].Arbiter.Holder != 4 || snap[0].Epoch != 1 {
		t.Fatalf("owner snapshot %+v", snap)
	}
	pc := x.eng[2].PathCacheSnapshot()
	if len(pc) != 1 || pc[0].Key != p.Key() || !pc[0].HasPage || !pc[0].Down.Has(noc.LocalPort) {
		t.Fatalf("path cache snapshot %+v", pc)
	}
}

// TestDoneCutByADeadLinkResetsTheBranch: a swap's done travels the
// acquire's route back from the old owner, turning every entry on it
// toward the new owner. When a link of that route went down after the
// acquire crossed it (its port-down has passed), the node before that
// link must not turn its entry toward it: nothing would ever reset it,
// and the branch below (its own replica included) would stay valid at the
// versions before the swap while the new owner writes. Ring 0-1-2-3-4:
// node 0 owns and locks the page, node 2 acquires along 2-1-0 and waits
// at the lock; the link is cut (1-2: the done stops at node 1; 0-1: at the
// old owner itself), routing goes the other way round, node 0 unlocks and
// the swap completes by the routed done.
func TestDoneCutByADeadLinkResetsTheBranch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cut      [2]noc.NodeID
		stranded int // the node whose replica the done stranded
	}{
		{"done stops on the route", [2]noc.NodeID{1, 2}, 1},
		{"done stops at the old owner", [2]noc.NodeID{0, 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := fastLinks()
			x := newFabLinks(t, ringGraph(t, 5), &lc, func(c *Config) {
				c.Arbiter.MaxWait, c.Arbiter.MaxPin = time.Second, time.Second
				c.SwapTimeout, c.RequestTimeout = 200*time.Millisecond, 2*time.Second
			})
			p := x.alloc(0)
			x.ok(0, Request{Op: HostRef, GVA: p})
			x.ok(1, Request{Op: HostRef, GVA: p})
			x.ok(2, Request{Op: HostRef, GVA: p})
			if ent, _ := x.eng[2].Entry(p.Key()); func() bool { nb, _ := x.g.Peer(2, ent.Up); return nb.Node != 1 }() {
				t.Fatal("node 2 is not below node 1")
			}
			x.ok(0, Request{Op: HostStore, GVA: p, Data: []byte("old")})
			x.ok(0, Request{Op: HostLock, GVA: p, Holder: 1})
			acq := x.submit(2, Request{Op: HostAcquire, GVA: p, Timeout: 2 * time.Second})
			x.f.Run(2 * time.Millisecond) // the acquire waits at the lock
			if _, ok := x.sinks[2].done[acq]; ok {
				t.Fatalf("acquire ended under the lock: %v", x.result(2, acq))
			}
			if err := x.f.SetLink(tc.cut[0], tc.cut[1], false); err != nil {
				t.Fatal(err)
			}
			x.f.Run(100 * time.Millisecond) // dead interval, routes go round the other way
			x.ok(0, Request{Op: HostUnlock, GVA: p, Holder: 1})
			x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[2].done[acq]; return ok })
			if c := x.result(2, acq); c.Err != nil {
				t.Fatalf("acquire: %v", c.Err)
			}
			if owner, _ := x.eng[2].Holding(p.Key()); !owner {
				t.Fatal("node 2 does not own the page after its acquire")
			}
			cut := uint64(0)
			for _, e := range x.eng {
				cut += e.Stats().FlipsCut
			}
			if cut == 0 {
				t.Fatal("no done was cut by the dead link")
			}
			x.ok(2, Request{Op: HostStore, GVA: p, Data: []byte("new")})
			x.settle()
			if got := x.load(tc.stranded, p, 3); string(got) != "new" {
				t.Fatalf("node %d reads %q after the new owner wrote", tc.stranded, got)
			}
			// With the link back, every replica follows the new owner's
			// writes.
			if err := x.f.SetLink(tc.cut[0], tc.cut[1], true); err != nil {
				t.Fatal(err)
			}
			x.f.Run(100 * time.Millisecond)
			x.ok(2, Request{Op: HostStore, GVA: p, Data: []byte("end")})
			x.settle()
			for n := range 3 {
				if got := x.load(n, p, 3); string(got) != "end" {
					t.Fatalf("node %d reads %q at the end", n, got)
				}
			}
		})
	}
}

// TestReplicaGoingBackIsAnInvariant: content installed over a replica at
// an older version than the replica holds stops the node with an
// *InvariantError naming the page and both versions.
func TestReplicaGoingBackIsAnInvariant(t *testing.T) {
	e, err := New(Config{Self: 1, Sink: &recordSink{}, Pages: 8})
	if err != nil {
		t.Fatal(err)
	}
	key := gva.New(2, 1, 0, 0)
	pg := &page{key: key, has: true, version: 7}
	e.advanced(pg, 8) // forward: fine
	defer func() {
		ie, ok := recover().(*InvariantError)
		if !ok {
			t.Fatalf("going back from 7 to 6 did not stop the node with an invariant (%v)", ie)
		}
		if !strings.Contains(ie.What, "from version 7 to 6") {
			t.Fatalf("invariant %q does not name the versions", ie.What)
		}
	}()
	e.advanced(pg, 6)
}
