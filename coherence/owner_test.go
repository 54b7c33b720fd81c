package coherence

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
)

// controlSent sums the ownership-protocol frames sent by every engine.
func controlSent(c Counters) (n uint64, byOp map[noc.Op]uint64) {
	byOp = map[noc.Op]uint64{}
	for op := OpAcquire; op < opControlEnd; op++ {
		s, _ := c.Messages(noc.ClassControl, op)
		byOp[op] = s
		n += s
	}
	return n, byOp
}

func TestOwnershipTransferOneHopCost(t *testing.T) {
	for _, oldOwnerMaps := range []bool{true, false} {
		x := newFab(t, lineGraph(t, 2), nil)
		p := x.alloc(0)
		x.ok(0, Request{Op: HostStore, GVA: p.WithOffset(100), Data: []byte("content")})
		if oldOwnerMaps {
			x.ok(0, Request{Op: HostRef, GVA: p})
		}
		x.ok(1, Request{Op: HostRef, GVA: p})
		x.settle()
		before := x.sent()
		x.ok(1, Request{Op: HostAcquire, GVA: p})
		x.settle()
		after := x.sent()
		nb, ob := controlSent(before)
		na, oa := controlSent(after)
		// Two round trips (acquire–grant, data-ack–done) plus one content
		// transfer: exactly five frames over the one hop.
		if na-nb != 5 {
			t.Fatalf("swap cost %d frames, want 5 (%v)", na-nb, oa)
		}
		for op, want := range map[noc.Op]uint64{OpAcquire: 1, OpGrant: 1, OpData: 1, OpDataAck: 1, OpDone: 1} {
			if got := oa[op] - ob[op]; got != want {
				t.Errorf("op %d: %d frames, want %d", op, got, want)
			}
		}
		// The old owner keeps its copy as an ordinary replica if its host
		// maps the page (the metadata swap); otherwise it returns the
		// physical page and unrefs: one more frame, outside the swap.
		total := after.TotalSent() - before.TotalSent()
		if oldOwnerMaps && total != 5 || !oldOwnerMaps && total != 6 {
			t.Fatalf("old owner maps=%v: %d frames in all", oldOwnerMaps, total)
		}
		o := x.eng[1].OwnerSnapshot()
		if len(o) != 1 || o[0].Key != p.Key() || o[0].Epoch != 1 {
			t.Fatalf("node 1 owner snapshot %+v", o)
		}
		if len(x.eng[0].OwnerSnapshot()) != 0 {
			t.Fatal("node 0 still owns the page")
		}
		e1, _ := x.eng[1].Entry(p.Key())
		e0, ok0 := x.eng[0].Entry(p.Key())
		if !e1.Owner || oldOwnerMaps != ok0 || oldOwnerMaps && (e0.Owner || e0.Up == noc.NoPort || e1.Down.Len() != 1) {
			t.Fatalf("entries not flipped: node0 %+v node1 %+v", e0, e1)
		}
		if got := x.load(1, p.WithOffset(100), 7); string(got) != "content" {
			t.Fatalf("new owner reads %q", got)
		}
		if oldOwnerMaps {
			if got := x.load(0, p.WithOffset(100), 7); string(got) != "content" {
				t.Fatalf("old owner's replica reads %q", got)
			}
		} else {
			x.ok(0, Request{Op: HostRef, GVA: p})
		}
		c := x.ok(0, Request{Op: HostStore, GVA: p.WithOffset(8), Data: []byte("x")})
		if c.Version != 2 {
			t.Fatalf("write after the transfer: version %d, want 2", c.Version)
		}
		if got := x.load(1, p.WithOffset(8), 1); string(got) != "x" {
			t.Fatalf("owner reads %q", got)
		}
		var lost int
		for _, ev := range x.sinks[0].events {
			if ev.Kind == EventOwnershipLost {
				lost++
			}
		}
		if lost != 1 {
			t.Fatalf("%d ownership-lost events at the old owner", lost)
		}
	}
}

func TestOwnershipTransferMultiHopFlipsPath(t *testing.T) {
	x := newFab(t, lineGraph(t, 5), nil)
	p := x.alloc(0)
	for _, n := range []int{0, 2, 4} {
		if n != 0 {
			x.ok(n, Request{Op: HostRef, GVA: p})
		}
	}
	x.ok(0, Request{Op: HostRef, GVA: p})
	x.ok(4, Request{Op: HostAcquire, GVA: p})
	x.settle()
	// Every entry's up port now leads toward node 4.
	for n := 0; n < 4; n++ {
		ent, ok := x.eng[n].Entry(p.Key())
		if !ok || ent.Owner {
			t.Fatalf("node %d entry %+v", n, ent)
		}
		if peer, _ := x.g.Peer(noc.NodeID(n), ent.Up); int(peer.Node) != n+1 {
			t.Fatalf("node %d up port leads to %v", n, peer.Node)
		}
	}
	if ent, _ := x.eng[4].Entry(p.Key()); !ent.Owner {
		t.Fatal("node 4 is not the owner")
	}
	// Writes at the new owner reach the replicas at 0 and 2 (one update per
	// live branch), and a write from node 0 travels up to node 4.
	before := x.sent()
	x.ok(4, Request{Op: HostStore, GVA: p, Data: []byte{9}})
	x.settle()
	ua, _ := x.sent().Messages(noc.ClassStore, OpUpdate)
	ub, _ := before.Messages(noc.ClassStore, OpUpdate)
	if d := int(ua - ub); d != x.branches(p.Key()) || d != 4 {
		t.Fatalf("%d updates, %d branches", d, x.branches(p.Key()))
	}
	for _, n := range []int{0, 2} {
		if got := x.load(n, p, 1); got[0] != 9 {
			t.Fatalf("node %d reads %v", n, got)
		}
	}
	c := x.ok(0, Request{Op: HostFetchAdd, GVA: p.WithOffset(8), Operand: 1})
	if c.Value != 0 || c.Version != 2 {
		t.Fatalf("fetch-add from the old owner: %v", c)
	}
}

func TestHomeRedirectsToNewOwner(t *testing.T) {
	// Tree: 0 (home) with children 1, 2, 3; 4 and 5 below 1; 6 below 2.
	x := newFab(t, treeGraph(t, 7), nil)
	p := x.alloc(0)
	x.ok(4, Request{Op: HostRef, GVA: p})
	x.ok(4, Request{Op: HostAcquire, GVA: p})
	x.settle()
	// The home kept no replica (its host never mapped the page): its entry
	// is gone, and a ref from node 6 finds the owner through the home's
	// record.
	if _, ok := x.eng[0].Entry(p.Key()); ok {
		t.Fatal("home kept an entry")
	}
	x.ok(6, Request{Op: HostRef, GVA: p})
	c := x.ok(6, Request{Op: HostFetchAdd, GVA: p, Operand: 2})
	if c.Version != 1 {
		t.Fatalf("fetch-add version %d", c.Version)
	}
	if loc := x.ok(6, Request{Op: HostWhere, GVA: p}).Where; loc.Owner != 4 || loc.Hops != 4 {
		t.Fatalf("where: %+v", loc)
	}
	// A second transfer between two nodes that are not the home: the new
	// owner tells the home, which redirects later refs there.
	x.ok(6, Request{Op: HostAcquire, GVA: p})
	x.settle()
	x.ok(5, Request{Op: HostRef, GVA: p})
	if loc := x.ok(5, Request{Op: HostWhere, GVA: p}).Where; loc.Owner != 6 {
		t.Fatalf("where after the second transfer: %+v", loc)
	}
}

func TestLockExcludesAndUnlocks(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	p := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: p})
	x.ok(1, Request{Op: HostRef, GVA: p})
	x.ok(2, Request{Op: HostLock, GVA: p, Holder: 7})
	// Node 1 cannot take the page while node 2 holds the lock; its lock
	// waits (queued at node 2's arbiter, denied when the wait bound runs
	// out, retried) until node 2 unlocks.
	id := x.submit(1, Request{Op: HostLock, GVA: p, Holder: 8})
	x.f.Run(5 * time.Millisecond)
	if _, done := x.sinks[1].done[id]; done {
		t.Fatalf("lock granted while held: %v", x.sinks[1].done[id])
	}
	if c := x.do(2, Request{Op: HostUnlock, GVA: p, Holder: 99}); errno(c) != syscall.EPERM {
		t.Fatalf("unlock by a non-holder: %v", c.Err)
	}
	x.ok(2, Request{Op: HostUnlock, GVA: p, Holder: 7})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[1].done[id]; return ok })
	if c := x.result(1, id); c.Err != nil {
		t.Fatalf("second lock: %v", c.Err)
	}
	if len(x.eng[1].OwnerSnapshot()) != 1 || !x.eng[1].OwnerSnapshot()[0].Arbiter.Pinned {
		t.Fatalf("node 1 owner snapshot %+v", x.eng[1].OwnerSnapshot())
	}
	x.ok(1, Request{Op: HostUnlock, GVA: p, Holder: 8})
}

func TestPinBoundRaisesHostFault(t *testing.T) {
	x := newFab(t, lineGraph(t, 2), func(c *Config) { c.PinBound = 5 * time.Millisecond })
	p := x.alloc(0)
	x.ok(0, Request{Op: HostLock, GVA: p, Holder: 1})
	x.f.Run(20 * time.Millisecond)
	var faults int
	for _, ev := range x.sinks[0].events {
		if ev.Kind == EventHostFault && ev.Holder == 1 && ev.GVA == p.Key() {
			faults++
		}
	}
	if faults != 1 {
		t.Fatalf("%d host faults, want 1", faults)
	}
	if c := x.do(0, Request{Op: HostUnlock, GVA: p, Holder: 1}); errno(c) != syscall.EPERM {
		t.Fatalf("unlock after revocation: %v", c.Err)
	}
	x.ok(1, Request{Op: HostRef, GVA: p})
	x.ok(1, Request{Op: HostLock, GVA: p, Holder: 2})
}

func TestMessagesWaitDuringSwap(t *testing.T) {
	// Writes issued by a third node while the page moves are not lost: they
	// reach whichever side is swapping and are delivered to the new owner.
	x := newFab(t, lineGraph(t, 3), nil)
	p := x.alloc(1)
	x.ok(0, Request{Op: HostRef, GVA: p})
	x.ok(2, Request{Op: HostRef, GVA: p})
	acq := x.submit(2, Request{Op: HostAcquire, GVA: p})
	var ids []uint64
	for i := range 20 {
		ids = append(ids, x.submit(0, Request{Op: HostFetchAdd, GVA: p.WithOffset(8), Operand: 1}))
		x.f.Run(time.Duration(i%3) * 10 * time.Microsecond)
	}
	x.f.Run(200 * time.Millisecond)
	if c := x.result(2, acq); c.Err != nil {
		t.Fatalf("acquire: %v", c.Err)
	}
	seen := map[uint64]bool{}
	for _, id := range ids {
		c := x.result(0, id)
		if c.Err != nil {
			t.Fatalf("fetch-add: %v", c.Err)
		}
		if seen[c.Value] {
			t.Fatalf("fetch-add returned %d twice", c.Value)
		}
		seen[c.Value] = true
	}
	if v := binary.LittleEndian.Uint64(x.load(2, p.WithOffset(8), 8)); v != 20 {
		t.Fatalf("counter at the new owner %d, want 20", v)
	}
}

func TestSameTickAcquiresOrderedByPriority(t *testing.T) {
	s := &recordSink{done: map[uint64]Completion{}}
	e, err := New(Config{Self: 1, Sink: s, Pages: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := &fakeSender{self: 1, record: true}
	e.Submit(0, Request{ID: 1, Op: HostAlloc}, out)
	out.take(e)
	g := s.done[1].GVA
	acquire := func(src noc.NodeID, prio uint8, port noc.PortID) {
		p := appendAcquire(nil, acquireReq{inc: uint64(src)})
		f := newFrame(noc.ClassControl, OpAcquire, noc.FlagPath, src, 1, uint64(src)*100, g, 0, p)
		f.Priority = prio
		e.HandleFrame(10*time.Microsecond, port, &f, out)
		out.take(e)
	}
	// Three acquires in the same arbitration tick; the highest priority
	// wins, the others are queued behind the swap.
	acquire(5, 0, 0)
	acquire(6, 3, 1)
	acquire(7, 1, 2)
	e.Tick(20*time.Microsecond, out)
	out.take(e)
	var grants []noc.NodeID
	for _, f := range out.frames {
		if f.Class == noc.ClassControl && f.Op == OpGrant {
			grants = append(grants, f.Dst)
		}
	}
	if len(grants) != 1 || grants[0] != 6 {
		t.Fatalf("grants to %v, want [6]", grants)
	}
	if snap := e.OwnerSnapshot(); len(snap) != 1 || !snap[0].Swapping || snap[0].Grantee != 6 || snap[0].Arbiter.Queued != 2 {
		t.Fatalf("owner snapshot %+v", snap)
	}
	// The grantee never confirms: the swap is called off and the next in
	// line (priority 1) is granted.
	e.Tick(20*time.Microsecond+DefaultSwapTimeout+time.Millisecond, out)
	out.take(e)
	grants = grants[:0]
	for _, f := range out.frames {
		if f.Class == noc.ClassControl && f.Op == OpGrant {
			grants = append(grants, f.Dst)
		}
	}
	if len(grants) != 2 || grants[1] != 7 {
		t.Fatalf("grants after the abort: %v", grants)
	}
}
