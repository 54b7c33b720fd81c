package coherence

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// hostFab is a line of real node cores whose handlers are session layers.
type hostFab struct {
	t     *testing.T
	f     *nodetest.Fabric
	h     []*Hosts
	sinks []*recordSink
	next  uint64
}

func newHostFab(t *testing.T, n int) *hostFab {
	t.Helper()
	return newHostFabTuned(t, n, nil)
}

// newHostFabTuned is newHostFab with tune applied to every node's Config.
func newHostFabTuned(t *testing.T, n int, tune func(*Config)) *hostFab {
	t.Helper()
	x := &hostFab{t: t, h: make([]*Hosts, n), sinks: make([]*recordSink, n)}
	mk := func(id noc.NodeID) node.Handler {
		s := &recordSink{done: map[uint64]Completion{}}
		cfg := Config{Self: id, Incarnation: uint64(id) + 100, Pages: 64, Seed: 7, PinBound: 10 * time.Second, Arbiter: arbiter.Config{MaxPin: 10 * time.Second}}
		if tune != nil {
			tune(&cfg)
		}
		h, err := NewHosts(cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Open(1); err != nil {
			t.Fatal(err)
		}
		x.h[id], x.sinks[id] = h, s
		return h
	}
	f, err := nodetest.New(lineGraph(t, n), nodetest.Config{Seed: 1, Handler: mk})
	if err != nil {
		t.Fatal(err)
	}
	x.f = f
	if !f.RunUntil(10*time.Second, f.Converged) {
		t.Fatal("routing did not converge")
	}
	f.Run(50 * time.Millisecond)
	return x
}

func (x *hostFab) submit(n int, r Request) uint64 {
	x.next++
	r.ID = x.next
	x.h[n].Submit(x.f.Now(), 1, r, x.f.Cores[n])
	return r.ID
}

func (x *hostFab) do(n int, r Request) Completion {
	x.t.Helper()
	id := x.submit(n, r)
	s := x.sinks[n]
	x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := s.done[id]; return ok })
	c, ok := s.done[id]
	if !ok {
		x.t.Fatalf("node %d %v %v: no completion", n, r.Op, r.GVA)
	}
	return c
}

func (x *hostFab) ok(n int, r Request) Completion {
	x.t.Helper()
	c := x.do(n, r)
	if c.Err != nil {
		x.t.Fatalf("node %d %v %v: %v", n, r.Op, r.GVA, c.Err)
	}
	return c
}

// TestHostsAllocStatFree: an alloc of 3 pages is 3 consecutive pages with
// their attributes; free takes them all; a second free is ENOENT.
func TestHostsAllocStatFree(t *testing.T) {
	x := newHostFab(t, 2)
	c := x.ok(0, Request{Op: HostAlloc, Pages: 3, Attr: Attr{UID: 5, GID: 6, Mode: 0o640}})
	first := c.GVA
	for i := range 3 {
		st := x.ok(0, Request{Op: HostStat, GVA: first.PageAt(i)})
		if st.Attr != (Attr{UID: 5, GID: 6, Mode: 0o640}) {
			t.Fatalf("page %d attributes %+v", i, st.Attr)
		}
	}
	if st := x.ok(1, Request{Op: HostStat, GVA: first.PageAt(2)}); st.Attr != (Attr{UID: 5, GID: 6, Mode: 0o640}) {
		t.Fatalf("a page made elsewhere: %+v, want its home's attributes", st.Attr)
	}
	x.ok(0, Request{Op: HostFree, GVA: first})
	if c := x.do(0, Request{Op: HostFree, GVA: first}); !errors.Is(c.Err, syscall.ENOENT) {
		t.Fatalf("second free: %v", c.Err)
	}
	if c := x.do(0, Request{Op: HostStat, GVA: first}); !errors.Is(c.Err, syscall.ENOENT) {
		t.Fatalf("stat of a freed page: %v", c.Err)
	}
}

// TestHostsLockAcrossNodes: node 2 locks a page of node 0 (ref + acquire +
// pin in one request), CASes it, unlocks; the session holds nothing after
// the unlock and the owner's word is the CAS's.
func TestHostsLockAcrossNodes(t *testing.T) {
	x := newHostFab(t, 3)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.ok(2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	if refs, _, locks := x.h[2].Held(1); refs != 1 || locks != 1 {
		t.Fatalf("after lock: %d refs, %d locks held", refs, locks)
	}
	if c := x.ok(2, Request{Op: HostCAS, GVA: g, Expected: 0, Operand: 9}); !c.Swapped {
		t.Fatal("CAS under the lock did not swap")
	}
	x.ok(2, Request{Op: HostUnlock, GVA: g})
	x.f.Run(100 * time.Millisecond)
	if refs, acq, locks := x.h[2].Held(1); refs+acq+locks != 0 {
		t.Fatalf("after unlock: %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	if c := x.ok(0, Request{Op: HostLoad, GVA: g, Len: 8}); c.Data[0] != 9 {
		t.Fatalf("owner reads %d, want 9", c.Data[0])
	}
}

// TestHostsBusyLockWaits: while node 1 holds the lock, node 2's lock
// request retries inside the core (no caller loop) and gets the lock once
// node 1 unlocks, within its own bound; a lock whose bound passes first
// fails with a retryable errno and leaves nothing held.
func TestHostsBusyLockWaits(t *testing.T) {
	x := newHostFab(t, 3)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.ok(1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	short := x.submit(2, Request{Op: HostLock, GVA: g, Timeout: 50 * time.Millisecond})
	x.f.Run(300 * time.Millisecond)
	c, ok := x.sinks[2].done[short]
	if !ok || c.Err == nil || !retryable(c.Errno()) {
		t.Fatalf("lock past its bound while held elsewhere: done %v, %v", ok, c.Err)
	}
	x.f.Run(100 * time.Millisecond)
	if refs, acq, locks := x.h[2].Held(1); refs+acq+locks != 0 {
		t.Fatalf("a failed lock left %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	long := x.submit(2, Request{Op: HostLock, GVA: g, Timeout: 3 * time.Second})
	x.f.Run(50 * time.Millisecond)
	if _, ok := x.sinks[2].done[long]; ok {
		t.Fatalf("lock ended while node 1 holds it: %v", x.sinks[2].done[long].Err)
	}
	x.ok(1, Request{Op: HostUnlock, GVA: g})
	x.f.RunUntil(x.f.Now()+2*time.Second, func() bool { _, ok := x.sinks[2].done[long]; return ok })
	if c, ok := x.sinks[2].done[long]; !ok || c.Err != nil {
		t.Fatalf("waiting lock after the unlock: done %v, %v", ok, c.Err)
	}
}

// TestHostsAbandonAndClose: a lock whose caller gave up is undone when it
// succeeds (the page is lockable by others at once after), and Close gives
// back every ref, acquisition and lock of a session.
func TestHostsAbandonAndClose(t *testing.T) {
	x := newHostFab(t, 3)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 2}).GVA
	g2 := g.PageAt(1)
	id := x.submit(2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	x.h[2].Abandon(x.f.Now(), 1, id, x.f.Cores[2])
	x.f.Run(500 * time.Millisecond)
	if _, ok := x.sinks[2].done[id]; ok {
		t.Fatal("an abandoned request completed")
	}
	if refs, acq, locks := x.h[2].Held(1); refs+acq+locks != 0 {
		t.Fatalf("abandoned lock not undone: %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	x.ok(1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second}) // free for others
	x.ok(1, Request{Op: HostUnlock, GVA: g})

	x.ok(2, Request{Op: HostRef, GVA: g})
	x.ok(2, Request{Op: HostAcquire, GVA: g2, Timeout: 2 * time.Second})
	x.ok(2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	if refs, acq, locks := x.h[2].Held(1); refs != 3 || acq != 1 || locks != 1 {
		t.Fatalf("before close: %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	x.h[2].Close(x.f.Now(), 1, x.f.Cores[2])
	x.f.Run(500 * time.Millisecond)
	if refs, acq, locks := x.h[2].Held(1); refs+acq+locks != 0 {
		t.Fatalf("after close: %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	if _, ok := x.h[2].sessions[1]; ok {
		t.Fatal("closed session still known")
	}
	if ent, ok := x.h[2].Engine().Entry(g.Key()); ok && ent.Pins > 0 {
		t.Fatal("closed session's pin still raised")
	}
	x.ok(1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	if c := x.do(2, Request{Op: HostLoad, GVA: g, Len: 8}); !errors.Is(c.Err, syscall.EBADF) {
		t.Fatalf("request on a closed session: %v", c.Err)
	}
}

// TestHostsLoadUnmapped: a load of a page the session does not hold refs
// it for the read and drops it after.
func TestHostsLoadUnmapped(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.ok(0, Request{Op: HostStore, GVA: g.WithOffset(16), Data: []byte{7}})
	if c := x.ok(1, Request{Op: HostLoad, GVA: g.WithOffset(16), Len: 1}); c.Data[0] != 7 {
		t.Fatalf("read %d", c.Data[0])
	}
	x.f.Run(100 * time.Millisecond)
	if refs, _, _ := x.h[1].Held(1); refs != 0 {
		t.Fatalf("%d refs left after a load", refs)
	}
	_ = gva.PageSize
}

// TestHostsFinishedBoundsLeaveTheTimers: a finished request's bound leaves
// the timer heap at once, so completed requests neither pile up there nor
// set the node's next deadline; a running one's bound stays.
func TestHostsFinishedBoundsLeaveTheTimers(t *testing.T) {
	x := newHostFab(t, 2)
	a := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{Mode: 0o600}}).GVA
	for i := range 200 {
		x.ok(0, Request{Op: HostCAS, GVA: a, Expected: uint64(i), Operand: uint64(i + 1)})
		x.ok(1, Request{Op: HostFetchAdd, GVA: a, Operand: 0})
	}
	for n, h := range x.h {
		if len(h.timers) != 0 {
			t.Fatalf("node %d: %d timers left after every request finished", n, len(h.timers))
		}
	}
	// A request of one engine step within the engine's bound is bounded
	// by the engine alone; one with a bound of its own keeps it here.
	id := x.submit(1, Request{Op: HostCAS, GVA: a, Expected: 200, Operand: 201})
	if len(x.h[1].timers) != 0 {
		t.Fatalf("a one-step request put %d timers in the heap", len(x.h[1].timers))
	}
	x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := x.sinks[1].done[id]; return ok })
	if c := x.sinks[1].done[id]; c.Err != nil || c.Value != 200 {
		t.Fatalf("CAS: %+v", c)
	}
	id = x.submit(1, Request{Op: HostCAS, GVA: a, Expected: 201, Operand: 202, Timeout: time.Second})
	if len(x.h[1].timers) != 1 || x.h[1].timers[0].r.hr.ID != id {
		t.Fatalf("a running request's bound is not in the heap: %d timers", len(x.h[1].timers))
	}
	x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := x.sinks[1].done[id]; return ok })
	if c := x.sinks[1].done[id]; c.Err != nil || c.Value != 201 {
		t.Fatalf("CAS: %+v", c)
	}
	if len(x.h[1].timers) != 0 {
		t.Fatalf("%d timers left", len(x.h[1].timers))
	}
}

// TestHostsOneStepBoundedByTheEngine: a one-step request (no bound of its
// own in the session layer) to an owner that stopped answering still
// completes, with ETIMEDOUT or EHOSTDOWN, by the engine's request bound.
func TestHostsOneStepBoundedByTheEngine(t *testing.T) {
	x := newHostFab(t, 2)
	a := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{Mode: 0o666}}).GVA
	x.ok(1, Request{Op: HostCAS, GVA: a, Expected: 0, Operand: 1})
	x.f.Kill(0)
	start := x.f.Now()
	for _, op := range []HostOp{HostCAS, HostStore, HostFetchAdd} {
		r := Request{Op: op, GVA: a, Expected: 1, Operand: 2}
		if op == HostStore {
			r.Data = []byte{1}
		}
		c := x.do(1, r)
		if !errors.Is(c.Err, syscall.ETIMEDOUT) && !errors.Is(c.Err, syscall.EHOSTDOWN) {
			t.Fatalf("%v to a dead owner: %v", op, c.Err)
		}
		if len(x.h[1].timers) != 0 {
			t.Fatalf("%v left %d timers", op, len(x.h[1].timers))
		}
	}
	if took := x.f.Now() - start; took > 3*(DefaultRequestTimeout+10*time.Millisecond) {
		t.Fatalf("three requests to a dead owner took %v", took)
	}
}

// TestHostsLockOfALostPageEndsAtOnce: the only copy of node 0's page is
// gone with node 0 (R = 1). Node 2's lock of it, with a bound of 20 s,
// ends with the engine's answer (EHOSTDOWN, owner unreachable until the
// request's bound) when it comes: a lost owner is not a reason a later
// attempt may not meet, so the lock is not tried again until its own
// bound (virtual time, the fabric's clock).
func TestHostsLockOfALostPageEndsAtOnce(t *testing.T) {
	x := newHostFab(t, 3)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.ok(2, Request{Op: HostLoad, GVA: g, Len: 8}) // node 2 knows the page
	x.f.Kill(0)
	x.f.Run(time.Second)
	start := x.f.Now()
	const bound = 20 * time.Second
	id := x.submit(2, Request{Op: HostLock, GVA: g, Timeout: bound})
	x.f.RunUntil(start+bound+time.Second, func() bool { _, ok := x.sinks[2].done[id]; return ok })
	c, ok := x.sinks[2].done[id]
	if !ok {
		t.Fatal("no completion of the lock")
	}
	if !errors.Is(c.Err, syscall.EHOSTDOWN) {
		t.Fatalf("lock of a page whose owner died: %v, want EHOSTDOWN", c.Err)
	}
	if took := c.At - start; took >= bound/2 {
		t.Fatalf("lock of a lost page ended after %v, its bound is %v: it was tried again", took, bound)
	}
	if refs, acq, locks := x.h[2].Held(1); refs+acq+locks != 0 {
		t.Fatalf("the failed lock left %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
}
