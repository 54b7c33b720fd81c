package coherence

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
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

// TestReplicatedWriteWaitsForItsOwnVersion: a replicated owner answers a
// write only once every backup holds that write's version; holding the
// version before it is not enough. The backup's copies of the write are
// lost for a while (the backup holds the previous version all along): the
// write stays unanswered, and is answered once a re-sent copy lands. The
// requester is the owner's own host, so the answer needs no travel that
// could hide an early commit behind the copy's own delay.
func TestReplicatedWriteWaitsForItsOwnVersion(t *testing.T) {
	var backup noc.NodeID
	hold, lost := false, 0
	x := newFabFilter(t, ringGraph(t, 5), nil, replicas(2), func(self noc.NodeID, f *noc.Frame) bool {
		if hold && self == backup && f.Class == noc.ClassControl && f.Op == OpReplicate && f.Flags&noc.FlagReply == 0 {
			lost++
			return true
		}
		return false
	})
	p := x.alloc(0)
	x.ok(0, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	x.settle()
	bs := x.eng[0].Backups(p.Key())
	if len(bs) != 1 {
		t.Fatalf("backups %v", bs)
	}
	backup = bs[0]
	if v, ok := x.eng[backup].Backing(p.Key()); !ok || v != 1 {
		t.Fatalf("backup holds %d (%v) before the test write, want 1", v, ok)
	}
	for _, op := range []Request{
		{Op: HostFetchAdd, GVA: p, Operand: 1},
		{Op: HostCAS, GVA: p, Expected: 2, Operand: 1 << 40},
		{Op: HostStore, GVA: p.WithOffset(8), Data: []byte{1, 2, 3}},
	} {
		before, _ := x.eng[backup].Backing(p.Key())
		hold, lost = true, 0
		id := x.submit(0, op)
		x.f.RunUntil(x.f.Now()+20*time.Millisecond, func() bool { return lost >= 2 })
		if c, done := x.sinks[0].done[id]; done {
			v, _ := x.eng[backup].Backing(p.Key())
			t.Fatalf("%v answered (%v) while the backup holds version %d", op.Op, c, v)
		}
		if lost < 2 {
			t.Fatalf("%v: %d copies to the backup lost, want a first one and a re-sent one", op.Op, lost)
		}
		if v, _ := x.eng[backup].Backing(p.Key()); v != before {
			t.Fatalf("backup moved from %d to %d with its copies lost", before, v)
		}
		hold = false
		x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[0].done[id]; return ok })
		c := x.result(0, id)
		if c.Err != nil || c.Version != before+1 {
			t.Fatalf("%v after the copies flow again: %v, want version %d", op.Op, c, before+1)
		}
		if v, _ := x.eng[backup].Backing(p.Key()); v < c.Version {
			t.Fatalf("%v acknowledged at version %d, backup holds %d", op.Op, c.Version, v)
		}
	}
}

// TestEntryReplicaStateFollowsTheHostsCopy: an entry's Replica says what
// the local host holds: none at the owner (its copy is the primary) and
// at a node the tree only passes through, valid at a node whose host
// mapped the page; after a transfer the two ends trade states.
func TestEntryReplicaStateFollowsTheHostsCopy(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	p := x.alloc(0)
	x.ok(0, Request{Op: HostRef, GVA: p})
	x.ok(2, Request{Op: HostRef, GVA: p})
	want := func(when string, states ...pathcache.ReplicaState) {
		t.Helper()
		for n, st := range states {
			ent, ok := x.eng[n].Entry(p.Key())
			if !ok || ent.Replica != st {
				t.Fatalf("%s: node %d entry %+v (%v), want replica %v", when, n, ent, ok, st)
			}
		}
	}
	want("after the refs", pathcache.ReplicaNone, pathcache.ReplicaNone, pathcache.ReplicaValid)
	x.ok(2, Request{Op: HostAcquire, GVA: p})
	x.settle()
	want("after node 2 took the page", pathcache.ReplicaValid, pathcache.ReplicaNone, pathcache.ReplicaNone)
	// Node 1's host maps the page and lets it go: node 1 stays on the tree
	// (node 0's branch passes it) with no replica of its own.
	x.ok(1, Request{Op: HostRef, GVA: p})
	want("after node 1's ref", pathcache.ReplicaValid, pathcache.ReplicaValid, pathcache.ReplicaNone)
	x.ok(1, Request{Op: HostUnref, GVA: p})
	x.settle()
	x.ok(2, Request{Op: HostStore, GVA: p, Data: []byte{1}})
	x.settle()
	want("after node 1's unref and a write", pathcache.ReplicaValid, pathcache.ReplicaNone, pathcache.ReplicaNone)
}

// TestHopLimitDropsAndCounts: with MaxHops 1, a ref from three hops away
// is dropped on its way (counted in HopLimit, once per drop) and ends at
// its bound; one hop away it is served.
func TestHopLimitDropsAndCounts(t *testing.T) {
	x := newFab(t, lineGraph(t, 4), func(c *Config) { c.MaxHops = 1; c.RequestTimeout = 20 * time.Millisecond })
	p := x.alloc(0)
	x.ok(1, Request{Op: HostRef, GVA: p})
	hops := func() (n uint64) {
		for _, e := range x.eng {
			n += e.Stats().HopLimit
		}
		return n
	}
	if n := hops(); n != 0 {
		t.Fatalf("%d drops for a one-hop ref", n)
	}
	if c := x.do(3, Request{Op: HostRef, GVA: p}); c.Err == nil {
		t.Fatalf("a ref over three hops with MaxHops 1: %v", c)
	}
	if n := hops(); n < 1 || n > 100 {
		t.Fatalf("HopLimit %d after a ref past the limit (and its re-sent copies)", n)
	}
}

// TestReplicateWithBadRecordsIsDropped: a write's copy to a backup whose
// reply records do not decode is malformed: the backup counts it and takes
// nothing of it (the write stays unacknowledged until a good copy lands).
func TestReplicateWithBadRecordsIsDropped(t *testing.T) {
	var backup noc.NodeID
	var held []heldFrame
	holding := false
	x := newFabDelay(t, ringGraph(t, 5), nil, replicas(2), func(self noc.NodeID, f *noc.Frame) bool {
		return holding && self == backup && f.Class == noc.ClassControl && f.Op == OpReplicate && f.Flags&noc.FlagReply == 0
	}, &held)
	p := x.alloc(0)
	x.ok(0, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	x.settle()
	backup = x.eng[0].Backups(p.Key())[0]
	holding = true
	id := x.submit(2, Request{Op: HostCAS, GVA: p, Expected: 1, Operand: 5})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return len(held) > 0 })
	if len(held) == 0 {
		t.Fatal("no copy of the CAS reached the backup")
	}
	var f noc.Frame
	if err := f.Decode(held[0].b); err != nil {
		t.Fatal(err)
	}
	m, err := decodeReplicate(f.Payload)
	if err != nil || m.flags&replReplies == 0 || len(m.replies) < repliesHead+replyLen {
		t.Fatalf("the CAS's copy: %+v %v, want one with its reply record", m, err)
	}
	before, _ := x.eng[backup].Backing(p.Key())
	bad := held[0]
	bad.b = append([]byte(nil), held[0].b...)
	// The class byte of the first record: past the payload's head, its
	// backups and the records block's head.
	at := len(bad.b) - len(f.Payload) + replHead + 4*len(m.backups) + repliesHead + 16
	bad.b[at] = 0xff
	var g noc.Frame
	if err := g.Decode(bad.b); err != nil {
		t.Fatalf("the changed frame does not decode as a frame: %v", err)
	}
	if _, err := decodeReplicate(g.Payload); err != nil {
		t.Fatalf("the change broke the copy's framing, not only its record: %v", err)
	}
	mal := x.eng[backup].Stats().Malformed
	x.deliver(int(backup), bad.in, bad)
	if n := x.eng[backup].Stats().Malformed; n != mal+1 {
		t.Fatalf("copy with a bad record: Malformed %d, was %d", n, mal)
	}
	if v, _ := x.eng[backup].Backing(p.Key()); v != before {
		t.Fatalf("backup went from version %d to %d on a copy with a bad record", before, v)
	}
	holding = false
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[2].done[id]; return ok })
	if c := x.result(2, id); c.Err != nil || !c.Swapped {
		t.Fatalf("CAS once good copies flow: %v", c)
	}
}

// TestRefCrossesMoreThan64Nodes: with the default MaxHops a ref and its
// answer cross a path of 79 nodes. The hop limit bounds loops, not
// paths: on a 1,024-node torus a ref that went to a stale owner, on to
// the page's home and up a deep tree crossed 64 nodes, where the old
// default of 64 dropped it and final loads timed out (dpu-sim seed 1,
// issue 28).
func TestRefCrossesMoreThan64Nodes(t *testing.T) {
	const n = 80
	x := newFab(t, lineGraph(t, n), nil)
	p := x.alloc(0)
	x.ok(0, Request{Op: HostStore, GVA: p, Data: []byte("far")})
	x.ok(n-1, Request{Op: HostRef, GVA: p})
	if got := x.load(n-1, p, 3); string(got) != "far" {
		t.Fatalf("load %d nodes away reads %q", n-1, got)
	}
	for i, e := range x.eng {
		if d := e.Stats().HopLimit; d != 0 {
			t.Fatalf("node %d dropped %d frames at the hop limit", i, d)
		}
	}
}
