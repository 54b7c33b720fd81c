package coherence

import (
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// TestHostsWhereFollowsTheOwner: after a lock moved the page from node 0
// to node 1, where on node 0 says the owner is one hop away (neighbour),
// also while node 0's own lock claim still holds its ref of the page (a
// lock of node 1 that timed out while node 0 held it keeps node 0's unlock
// waiting on the arbiter a while). The engine's refs are not a process's
// mapping: only the host interface, which knows the mappings, says local.
func TestHostsWhereFollowsTheOwner(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.ok(0, Request{Op: HostStore, GVA: g, Data: []byte{41, 0, 0, 0, 0, 0, 0, 0}})
	if c := x.ok(0, Request{Op: HostWhere, GVA: g}); c.Where.Tier != gva.TierMachine || c.Where.Hops != 0 || c.Where.Owner != 0 {
		t.Fatalf("where on the allocating owner: %+v", c.Where)
	}
	x.ok(0, Request{Op: HostLock, GVA: g, Timeout: time.Second})
	if c := x.do(1, Request{Op: HostLock, GVA: g, Timeout: 20 * time.Millisecond}); errno(c) != syscall.ETIMEDOUT {
		t.Fatalf("lock on node 1 while node 0 holds it: %v, want ETIMEDOUT", c.Err)
	}
	x.ok(0, Request{Op: HostUnlock, GVA: g})
	x.ok(1, Request{Op: HostLock, GVA: g, Timeout: 5 * time.Second})
	x.ok(1, Request{Op: HostStore, GVA: g, Data: []byte{42, 0, 0, 0, 0, 0, 0, 0}})
	if c := x.ok(1, Request{Op: HostWhere, GVA: g}); c.Where.Tier != gva.TierMachine || c.Where.Hops != 0 || c.Where.Owner != 1 {
		t.Errorf("where on node 1 holding the lock: %+v", c.Where)
	}
	if c := x.ok(0, Request{Op: HostWhere, GVA: g}); c.Where.Tier != gva.TierNeighbour || c.Where.Hops != 1 || c.Where.Owner != 1 {
		t.Errorf("where on node 0 after the move: %+v", c.Where)
	}
}

// TestHostsWhereOfNoPage: where of an address nobody allocated, of a freed
// page and of a page of an earlier run of its home fails (ENOENT, ESTALE)
// on the home and one hop from it, instead of naming a made-up owner.
func TestHostsWhereOfNoPage(t *testing.T) {
	x := newHostFabTuned(t, 2, func(c *Config) { c.AllocEpoch = 2 })
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	never := g.PageAt(5)
	old := gva.New(g.Machine(), gva.PageNumber(uint64(1)<<counterBits|3), 0, 0) // allocation epoch 1
	if AllocEpochOf(old) != 1 || AllocEpochOf(g) != 2 {
		t.Fatalf("epochs: %d %d", AllocEpochOf(old), AllocEpochOf(g))
	}
	// Past the home's grace after its start (until then it cannot tell
	// an earlier run's page from one whose owner has not told it yet).
	x.f.Run(2*x.h[0].e.cfg.HomeRefresh + time.Second)
	for _, n := range []int{0, 1} {
		if c := x.do(n, Request{Op: HostWhere, GVA: never}); errno(c) != syscall.ENOENT {
			t.Errorf("node %d: where of a page never allocated: %+v %v, want ENOENT", n, c.Where, c.Err)
		}
		if c := x.do(n, Request{Op: HostWhere, GVA: old}); errno(c) != syscall.ESTALE {
			t.Errorf("node %d: where of a page of an earlier run: %+v %v, want ESTALE", n, c.Where, c.Err)
		}
		if c := x.ok(n, Request{Op: HostWhere, GVA: g}); c.Where.Owner != 0 {
			t.Errorf("node %d: where of the page: %+v", n, c.Where)
		}
	}
	x.ok(0, Request{Op: HostFree, GVA: g})
	x.f.Run(50 * time.Millisecond)
	for _, n := range []int{0, 1} {
		if c := x.do(n, Request{Op: HostWhere, GVA: g}); errno(c) != syscall.ENOENT {
			t.Errorf("node %d: where of a freed page: %+v %v, want ENOENT", n, c.Where, c.Err)
		}
	}
}

// TestHostsDataOfNoPage: a load, a store and an atomic on a page this run
// of its home never allocated fail at once with ENOENT, on the home and
// one hop from it, instead of waiting out their bound for an owner the
// home would have had to lose.
func TestHostsDataOfNoPage(t *testing.T) {
	x := newHostFabTuned(t, 2, func(c *Config) { c.AllocEpoch = 1 })
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	never := g.PageAt(9)
	for _, n := range []int{0, 1} {
		for _, r := range []Request{
			{Op: HostLoad, GVA: never, Len: 8},
			{Op: HostStore, GVA: never, Data: make([]byte, 8)},
			{Op: HostFetchAdd, GVA: never, Operand: 1},
		} {
			r.Timeout = 10 * time.Second
			start := x.f.Now()
			if c := x.do(n, r); errno(c) != syscall.ENOENT {
				t.Errorf("node %d: %v of a page never allocated: %v, want ENOENT", n, r.Op, c.Err)
			} else if took := x.f.Now() - start; took >= r.Timeout {
				t.Errorf("node %d: %v of a page never allocated waited out its bound (%v)", n, r.Op, took)
			}
		}
	}
}

// TestHostsWhereOfAnUncheckedUser: while the page's home restarts (it
// cannot yet tell which pages of its earlier run live on), a node that
// knows nothing of the page cannot check an ordinary user's where of it:
// the where fails instead of naming the location of a page the user may
// not read. Root still gets what the node knows; a user the node can
// check (it learnt the page's attributes before) gets the mode's answer.
// (The simulator's garblers found the where that named it: seeds 2 and 4
// of sim.TestOwnerRestartsWhileHalfIsDown's "line2 R2 kill 0, restart
// 0", seed 1 of its "kill 1, restart 1".)
func TestHostsWhereOfAnUncheckedUser(t *testing.T) {
	epochs := map[noc.NodeID]uint32{}
	x := newHostFabTuned(t, 3, func(c *Config) { epochs[c.Self]++; c.AllocEpoch = epochs[c.Self]; c.Replicas = 2 }) // a new epoch each run
	secret := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{UID: 0, Mode: 0o600}}).GVA
	open := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{UID: 0, Mode: 0o644}}).GVA
	outsider := Cred{UID: 3000, GID: 3000}
	x.ok(2, Request{Op: HostLoad, GVA: open, Len: 8, Cred: outsider}) // node 2 learns open's attributes
	x.f.Kill(0)
	x.f.Run(100 * time.Millisecond)
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	x.f.Run(20 * time.Millisecond)
	if c := x.do(2, Request{Op: HostWhere, GVA: secret, Cred: outsider}); c.Err == nil {
		t.Errorf("an outsider's where while the page's home restarts: %+v, want an error", c.Where)
	} else if errno(c) == syscall.EACCES {
		t.Errorf("an outsider's where: EACCES, though nothing said the mode forbids it")
	} else {
		t.Logf("an outsider's where while the page's home restarts: %v", c.Err)
	}
	if c := x.do(2, Request{Op: HostWhere, GVA: secret}); c.Err != nil || c.Where.Owner != 0 {
		t.Errorf("root's where while the home restarts: %+v %v, want owner 0", c.Where, c.Err)
	}
	if c := x.do(2, Request{Op: HostWhere, GVA: open, Cred: outsider}); c.Err != nil || c.Where.Owner != 0 {
		t.Errorf("an outsider's where of a page it may read, its attributes known: %+v %v", c.Where, c.Err)
	}
}
