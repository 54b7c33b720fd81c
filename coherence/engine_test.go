package coherence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

func TestRefLoadStore(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	g := x.alloc(0)
	x.ok(0, Request{Op: HostStore, GVA: g.WithOffset(16), Data: []byte("hello")})
	x.ok(2, Request{Op: HostRef, GVA: g})
	if got := x.load(2, g.WithOffset(16), 5); string(got) != "hello" {
		t.Fatalf("replica reads %q", got)
	}
	// The path: node 2 up to node 1 up to node 0.
	ent0, _ := x.eng[0].Entry(g.Key())
	ent1, _ := x.eng[1].Entry(g.Key())
	ent2, _ := x.eng[2].Entry(g.Key())
	if !ent0.Owner || ent0.Down.Len() != 1 || ent1.Up == noc.NoPort || ent1.Down.Len() != 1 || !ent2.Down.Has(noc.LocalPort) {
		t.Fatalf("tree: %+v / %+v / %+v", ent0, ent1, ent2)
	}
	if ent1.Down.Has(noc.LocalPort) || ent1.Replica != pathcache.ReplicaNone {
		t.Fatalf("intermediate holds a replica: %+v", ent1)
	}
	// A write from the replica goes through to the owner, then comes back
	// down as an update.
	c := x.ok(2, Request{Op: HostStore, GVA: g.WithOffset(16), Data: []byte("world")})
	if c.Version != 2 {
		t.Fatalf("version %d, want 2", c.Version)
	}
	if got := x.load(0, g.WithOffset(16), 5); string(got) != "world" {
		t.Fatalf("owner reads %q", got)
	}
	if got := x.load(2, g.WithOffset(16), 5); string(got) != "world" {
		t.Fatalf("writer reads %q", got)
	}
	x.ok(0, Request{Op: HostStore, GVA: g.WithOffset(16), Data: []byte("again")})
	x.settle()
	if got := x.load(2, g.WithOffset(16), 5); string(got) != "again" {
		t.Fatalf("replica reads %q after the owner's write", got)
	}
	if s := x.eng[2].Stats(); s.UpdatesApplied == 0 {
		t.Fatalf("no write-update applied at the replica: %+v", s)
	}
}

func TestLoadRequiresMap(t *testing.T) {
	x := newFab(t, lineGraph(t, 2), nil)
	g := x.alloc(0)
	if c := x.do(1, Request{Op: HostLoad, GVA: g, Len: 8}); errno(c) != syscall.EINVAL {
		t.Fatalf("load of an unmapped page: %v", c.Err)
	}
	if c := x.do(1, Request{Op: HostLoad, GVA: g.WithOffset(4090), Len: 8}); errno(c) != syscall.EINVAL {
		t.Fatalf("load across the page end: %v", c.Err)
	}
}

func TestAtomicsRemoteAndLocal(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	g := x.alloc(0).WithOffset(64)
	x.ok(2, Request{Op: HostRef, GVA: g})
	c := x.ok(2, Request{Op: HostFetchAdd, GVA: g, Operand: 5})
	if c.Value != 0 {
		t.Fatalf("first fetch-add returned %d", c.Value)
	}
	c = x.ok(0, Request{Op: HostFetchAdd, GVA: g, Operand: 3})
	if c.Value != 5 {
		t.Fatalf("local fetch-add returned %d, want 5", c.Value)
	}
	c = x.ok(2, Request{Op: HostCAS, GVA: g, Expected: 7, Operand: 100})
	if c.Swapped || c.Value != 8 {
		t.Fatalf("failing CAS: %v", c)
	}
	c = x.ok(2, Request{Op: HostCAS, GVA: g, Expected: 8, Operand: 100})
	if !c.Swapped || c.Value != 8 {
		t.Fatalf("CAS: %v", c)
	}
	x.settle()
	for _, n := range []int{0, 2} {
		if v := binary.LittleEndian.Uint64(x.load(n, g, 8)); v != 100 {
			t.Fatalf("node %d reads %d", n, v)
		}
	}
	if c := x.do(2, Request{Op: HostCAS, GVA: g.WithOffset(3)}); errno(c) != syscall.EINVAL {
		t.Fatalf("unaligned CAS: %v", c.Err)
	}
}

func TestMessagesPerWriteAreLiveBranches(t *testing.T) {
	// A tree of 15 nodes; replicas on some leaves only.
	g := treeGraph(t, 15)
	x := newFab(t, g, nil)
	p := x.alloc(0)
	for _, n := range []int{7, 9, 14} {
		x.ok(n, Request{Op: HostRef, GVA: p})
	}
	x.settle()
	want := x.branches(p.Key())
	if want == 0 {
		t.Fatal("no branches")
	}
	for i, size := range []int{8, 256, 257, 4096} {
		before := x.sent()
		x.ok(0, Request{Op: HostStore, GVA: p, Data: bytes.Repeat([]byte{byte(i + 1)}, size)})
		x.settle()
		after := x.sent()
		upd := after.UpdatesSent - before.UpdatesSent
		inv := after.InvalidatesSent - before.InvalidatesSent
		us, _ := after.Messages(noc.ClassStore, OpUpdate)
		ub, _ := before.Messages(noc.ClassStore, OpUpdate)
		is, _ := after.Messages(noc.ClassStore, OpInvalidate)
		ib, _ := before.Messages(noc.ClassStore, OpInvalidate)
		msgs := int(us - ub + is - ib)
		if msgs != want {
			t.Fatalf("write of %d bytes: %d messages, live branches %d", size, msgs, want)
		}
		if size <= DefaultUpdateThreshold && (upd == 0 || inv != 0) || size > DefaultUpdateThreshold && (inv == 0 || upd != 0) {
			t.Fatalf("write of %d bytes: %d updates %d invalidates sent by the owner", size, upd, inv)
		}
	}
	// Replicas re-fetch after the invalidating write and read the owner's bytes.
	for _, n := range []int{7, 9, 14} {
		if got := x.load(n, p.WithOffset(100), 3); !bytes.Equal(got, []byte{4, 4, 4}) {
			t.Fatalf("node %d reads %v", n, got)
		}
	}
}

func TestConcurrentRefsMerge(t *testing.T) {
	// Tree: 0 is the root with children 1, 2, 3; 1 has children 4 and 5;
	// 2 has child 6. Node 1 is on the page's tree (its host maps the page)
	// but its replica is invalid; refs from 4 and 5 issued at the same
	// instant merge at 1 into one upstream fetch.
	x := newFab(t, treeGraph(t, 7), nil)
	p := x.alloc(0)
	x.ok(1, Request{Op: HostRef, GVA: p})
	x.ok(0, Request{Op: HostStore, GVA: p, Data: make([]byte, 1000)}) // invalidates
	x.settle()
	before := x.sent()
	a := x.submit(4, Request{Op: HostRef, GVA: p})
	b := x.submit(5, Request{Op: HostRef, GVA: p})
	x.settle()
	if x.result(4, a).Err != nil || x.result(5, b).Err != nil {
		t.Fatal("refs failed")
	}
	after := x.sent()
	if after.Merges-before.Merges != 1 {
		t.Fatalf("merges %d, want 1", after.Merges-before.Merges)
	}
	rs, _ := after.Messages(noc.ClassLoad, OpRef)
	rb, _ := before.Messages(noc.ClassLoad, OpRef)
	// 4→1, 5→1, 1→0 (one upstream request), 0→1, 1→4, 1→5 answers.
	if rs-rb != 6 {
		t.Fatalf("%d ref messages, want 6", rs-rb)
	}
	if after.Grafts-before.Grafts != 2 {
		t.Fatalf("%d grafts, want 2", after.Grafts-before.Grafts)
	}
	for _, n := range []int{4, 5} {
		ent, _ := x.eng[n].Entry(p.Key())
		if peer, _ := x.g.Peer(noc.NodeID(n), ent.Up); peer.Node != 1 || !ent.Down.Has(noc.LocalPort) {
			t.Fatalf("node %d entry %+v", n, ent)
		}
	}
	if x.branches(p.Key()) != 3 {
		t.Fatalf("%d branches, want 3", x.branches(p.Key()))
	}
	// A ref whose path crosses a valid replica is answered there.
	x.ok(1, Request{Op: HostLoad, GVA: p, Len: 1}) // re-fetches node 1's replica
	x.ok(5, Request{Op: HostUnref, GVA: p})
	x.settle()
	before = x.sent()
	x.ok(5, Request{Op: HostRef, GVA: p})
	after = x.sent()
	if after.AnsweredByReplica-before.AnsweredByReplica != 1 {
		t.Fatalf("answered by replica %d, want 1", after.AnsweredByReplica-before.AnsweredByReplica)
	}
	rs, _ = after.Messages(noc.ClassLoad, OpRef)
	rb, _ = before.Messages(noc.ClassLoad, OpRef)
	if rs-rb != 2 {
		t.Fatalf("%d ref messages for a ref answered one hop away, want 2", rs-rb)
	}
}

func TestUnrefPrunesPath(t *testing.T) {
	x := newFab(t, lineGraph(t, 4), nil)
	p := x.alloc(0)
	x.ok(3, Request{Op: HostRef, GVA: p})
	x.ok(2, Request{Op: HostRef, GVA: p})
	x.ok(3, Request{Op: HostUnref, GVA: p})
	x.settle()
	if _, ok := x.eng[3].Entry(p.Key()); ok {
		t.Fatal("node 3 kept its entry")
	}
	if ent, _ := x.eng[2].Entry(p.Key()); ent.Down != localOnly() {
		t.Fatalf("node 2 down ports %v", ent.Down)
	}
	x.ok(2, Request{Op: HostUnref, GVA: p})
	x.settle()
	for _, n := range []int{1, 2} {
		if _, ok := x.eng[n].Entry(p.Key()); ok {
			t.Fatalf("node %d kept its entry", n)
		}
	}
	if ent, _ := x.eng[0].Entry(p.Key()); !ent.Down.Empty() {
		t.Fatalf("owner still has branches %v", ent.Down)
	}
}

func TestCapacityRule(t *testing.T) {
	x := newFab(t, lineGraph(t, 2), func(c *Config) { c.Pages = 3 })
	var pages []Completion
	for range 3 {
		pages = append(pages, x.ok(0, Request{Op: HostAlloc}))
	}
	c := x.do(0, Request{Op: HostAlloc})
	if errno(c) != syscall.ENOMEM || !errors.Is(c.Err, syscall.ENOMEM) {
		t.Fatalf("alloc beyond capacity: %v", c.Err)
	}
	// Replicas count too.
	for range 3 {
		x.ok(1, Request{Op: HostAlloc})
	}
	if c := x.do(1, Request{Op: HostRef, GVA: pages[0].GVA}); errno(c) != syscall.ENOMEM {
		t.Fatalf("ref beyond capacity: %v", c.Err)
	}
	x.ok(0, Request{Op: HostFree, GVA: pages[0].GVA})
	x.ok(0, Request{Op: HostAlloc})
	if _, err := NewMemStore(1).Alloc(pages[1].GVA.Key(), false); err != nil {
		t.Fatal(err)
	}
	st := NewMemStore(1)
	st.Alloc(pages[1].GVA.Key(), false)
	if _, err := st.Alloc(pages[2].GVA.Key(), false); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("store beyond capacity: %v", err)
	}
}

func TestRequestsEndWithinBound(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), func(c *Config) { c.RequestTimeout = 20 * time.Millisecond })
	p := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: p})
	// Cut the fabric: node 2 cannot reach the owner.
	if err := x.f.SetLink(1, 2, false); err != nil {
		t.Fatal(err)
	}
	start := x.f.Now()
	id := x.submit(2, Request{Op: HostStore, GVA: p, Data: []byte{1}})
	x.f.Run(100 * time.Millisecond)
	c := x.result(2, id)
	if c.Err == nil || c.At-start > 20*time.Millisecond+time.Millisecond {
		t.Fatalf("store across a cut: %v at +%v", c.Err, c.At-start)
	}
}

func localOnly() pathcache.PortSet {
	s, _ := pathcache.PortSet(0).Add(noc.LocalPort)
	return s
}

func TestFreeDetachesAndLaterRefsFail(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	p := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: p})
	if c := x.do(2, Request{Op: HostFree, GVA: p}); errno(c) != syscall.EINVAL {
		t.Fatalf("free by a non-owner: %v", c.Err)
	}
	x.ok(0, Request{Op: HostFree, GVA: p})
	x.settle()
	if _, ok := x.eng[2].Entry(p.Key()); ok {
		t.Fatal("replica's entry survived the free")
	}
	if c := x.do(1, Request{Op: HostRef, GVA: p}); errno(c) != syscall.ENOENT {
		t.Fatalf("ref of a freed page: %v", c.Err)
	}
	// A page that moved and was freed by its new owner: the home learns it.
	q := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: q})
	x.ok(2, Request{Op: HostAcquire, GVA: q})
	x.ok(2, Request{Op: HostFree, GVA: q})
	x.settle()
	if c := x.do(1, Request{Op: HostRef, GVA: q}); errno(c) != syscall.ENOENT {
		t.Fatalf("ref of a page freed by its second owner: %v", c.Err)
	}
}

// TestRefAnswerOutlastsMergeWindow: a ref whose answer comes back later
// than the merge window (a long path: here 11 hops against a 50 µs
// window) still reaches the replica. Every node on the path keeps the
// ports waiting below it until the answer passes; only merging into the
// fetch ends with the window. On a 1,024-node torus a page's tree had
// grown 49 hops deep, past the 1 ms window of the simulated fabric, and
// final loads of its replicas timed out (dpu-sim seed 1, issue 28).
func TestRefAnswerOutlastsMergeWindow(t *testing.T) {
	const n = 12
	x := newFab(t, lineGraph(t, n), func(c *Config) { c.MergeTTL = 50 * time.Microsecond })
	p := x.alloc(0)
	x.ok(n-1, Request{Op: HostRef, GVA: p})
	want := bytes.Repeat([]byte{7}, 1000)
	w := x.ok(0, Request{Op: HostStore, GVA: p, Data: want}) // invalidates the replica
	x.settle()
	before := x.sent()
	c := x.do(n-1, Request{Op: HostLoad, GVA: p, Len: len(want)})
	if c.Err != nil {
		t.Fatalf("load at the end of the path: %v", c.Err)
	}
	if !bytes.Equal(c.Data, want) || c.Version != w.Version {
		t.Fatalf("load reads version %d (equal %v), the write made %d", c.Version, bytes.Equal(c.Data, want), w.Version)
	}
	// One ref up the path and one answer down: nothing was re-sent.
	rs, _ := x.sent().Messages(noc.ClassLoad, OpRef)
	rb, _ := before.Messages(noc.ClassLoad, OpRef)
	if rs-rb != 2*(n-1) {
		t.Fatalf("%d ref messages, want %d", rs-rb, 2*(n-1))
	}
}
