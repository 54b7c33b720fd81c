package coherence

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// Locks between the sessions of one node: the session layer serialises
// them (hosts.go, nodeLock).

// submitAs submits r on node n as session sess.
func (x *hostFab) submitAs(n int, sess SessionID, r Request) uint64 {
	x.next++
	r.ID = x.next
	x.h[n].Submit(x.f.Now(), sess, r, x.f.Cores[n])
	return r.ID
}

// doAs runs r on node n as session sess to its completion.
func (x *hostFab) doAs(n int, sess SessionID, r Request) Completion {
	x.t.Helper()
	id := x.submitAs(n, sess, r)
	x.f.RunUntil(x.f.Now()+3*time.Second, func() bool { _, ok := x.sinks[n].done[id]; return ok })
	c, ok := x.sinks[n].done[id]
	if !ok {
		x.t.Fatalf("node %d session %d %v %v: no completion", n, sess, r.Op, r.GVA)
	}
	return c
}

func (x *hostFab) okAs(n int, sess SessionID, r Request) Completion {
	x.t.Helper()
	c := x.doAs(n, sess, r)
	if c.Err != nil {
		x.t.Fatalf("node %d session %d %v %v: %v", n, sess, r.Op, r.GVA, c.Err)
	}
	return c
}

func (x *hostFab) open(n int, ids ...SessionID) {
	x.t.Helper()
	for _, id := range ids {
		if err := x.h[n].Open(id); err != nil {
			x.t.Fatal(err)
		}
	}
}

// done reports the completion of request id on node n, if it came.
func (x *hostFab) done(n int, id uint64) (Completion, bool) {
	c, ok := x.sinks[n].done[id]
	return c, ok
}

// TestHostsLocalLockFIFO: sessions of one node asking for a lock another
// of its sessions holds wait in the core and get it one after the other
// in the order they asked, as each holder unlocks or closes; at no time
// do two sessions hold it.
func TestHostsLocalLockFIFO(t *testing.T) {
	for _, node := range []int{0, 1} { // at the owner, and one hop from it
		x := newHostFab(t, 2)
		g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
		x.open(node, 2, 3, 4, 5)
		x.okAs(node, 2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
		// Asked in the order 4, 3, 5: served in that order.
		w4 := x.submitAs(node, 4, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
		x.f.Run(time.Millisecond)
		w3 := x.submitAs(node, 3, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
		x.f.Run(time.Millisecond)
		w5 := x.submitAs(node, 5, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
		x.f.Run(50 * time.Millisecond)
		for _, id := range []uint64{w4, w3, w5} {
			if c, ok := x.done(node, id); ok {
				t.Fatalf("node %d: a waiter completed while session 2 holds the lock: %v", node, c.Err)
			}
		}
		holders := func() (n int) {
			for _, s := range []SessionID{1, 2, 3, 4, 5} {
				_, _, locks := x.h[node].Held(s)
				n += locks
			}
			return n
		}
		next := func(holder SessionID, id uint64, others ...uint64) {
			t.Helper()
			x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.done(node, id); return ok })
			if c, ok := x.done(node, id); !ok || c.Err != nil {
				t.Fatalf("node %d: session %d's lock: done %v, %v", node, holder, ok, c.Err)
			}
			if _, _, locks := x.h[node].Held(holder); locks != 1 || holders() != 1 {
				t.Fatalf("node %d: session %d holds %d locks, the node's sessions %d", node, holder, locks, holders())
			}
			for _, o := range others {
				if _, ok := x.done(node, o); ok {
					t.Fatalf("node %d: a later waiter completed before its turn", node)
				}
			}
		}
		x.okAs(node, 2, Request{Op: HostUnlock, GVA: g})
		next(4, w4, w3, w5)
		if c := x.okAs(node, 4, Request{Op: HostFetchAdd, GVA: g, Operand: 1}); c.Value != 0 {
			t.Fatalf("fetch-add under the lock found %d", c.Value)
		}
		x.okAs(node, 4, Request{Op: HostUnlock, GVA: g})
		next(3, w3, w5)
		// The holder's session closes: the lock passes on.
		x.h[node].Close(x.f.Now(), 3, x.f.Cores[node])
		next(5, w5)
		x.okAs(node, 5, Request{Op: HostUnlock, GVA: g})
		x.f.Run(100 * time.Millisecond)
		if holders() != 0 || x.h[node].locks[g.Key()] != nil {
			t.Fatalf("node %d: after the last unlock %d sessions hold the lock (entry %v)", node, holders(), x.h[node].locks[g.Key()] != nil)
		}
		for _, s := range []SessionID{2, 4, 5} {
			if refs, acq, locks := x.h[node].Held(s); refs+acq+locks != 0 {
				t.Fatalf("node %d session %d holds %d refs, %d acquisitions, %d locks", node, s, refs, acq, locks)
			}
		}
		if x.h[node].Known(3) {
			t.Fatalf("node %d: the closed session is still known", node)
		}
	}
}

// TestHostsLocalLockBoundAndErrors: a waiter whose bound passes fails with
// ETIMEDOUT at its bound and leaves the queue; a try-lock of a page
// another session holds fails with EBUSY at once; a session locking a
// page it holds gets EDEADLK; unlock and release of what the session does
// not hold fail with EPERM; free of an allocation with a locked page
// fails with EBUSY.
func TestHostsLocalLockBoundAndErrors(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 2}).GVA
	x.open(1, 2)
	x.okAs(1, 1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})

	start := x.f.Now()
	c := x.doAs(1, 2, Request{Op: HostLock, GVA: g, Timeout: 30 * time.Millisecond})
	if !errors.Is(c.Err, syscall.ETIMEDOUT) {
		t.Fatalf("waiter past its bound: %v", c.Err)
	}
	if took := c.At - start; took < 30*time.Millisecond || took > 32*time.Millisecond {
		t.Fatalf("waiter failed after %v, bound 30ms", took)
	}
	if nl := x.h[1].locks[g.Key()]; nl == nil || len(nl.waiters) != 0 {
		t.Fatal("the timed-out waiter is still queued")
	}
	start = x.f.Now()
	id := x.submitAs(1, 2, Request{Op: HostLock, GVA: g, Try: true, Timeout: time.Second})
	if c, ok := x.done(1, id); !ok || !errors.Is(c.Err, syscall.EBUSY) || x.f.Now() != start {
		t.Fatalf("try-lock of a lock held by another session: done at once %v, %v", ok, c.Err)
	}
	if c := x.doAs(1, 1, Request{Op: HostLock, GVA: g, Timeout: time.Second}); !errors.Is(c.Err, syscall.EDEADLK) {
		t.Fatalf("second lock by the holder: %v", c.Err)
	}
	if c := x.doAs(1, 1, Request{Op: HostLock, GVA: g, Try: true, Timeout: time.Second}); !errors.Is(c.Err, syscall.EDEADLK) {
		t.Fatalf("second try-lock by the holder: %v", c.Err)
	}
	if c := x.doAs(1, 2, Request{Op: HostUnlock, GVA: g}); !errors.Is(c.Err, syscall.EPERM) {
		t.Fatalf("unlock by another session: %v", c.Err)
	}
	if c := x.doAs(1, 2, Request{Op: HostRelease, GVA: g}); !errors.Is(c.Err, syscall.EPERM) {
		t.Fatalf("release without an acquisition: %v", c.Err)
	}
	if _, _, locks := x.h[1].Held(1); locks != 1 {
		t.Fatalf("the holder holds %d locks after the others' attempts", locks)
	}
	if refs, acq, locks := x.h[1].Held(2); refs+acq+locks != 0 {
		t.Fatalf("the refused session holds %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	// Free at the owner while a page of the allocation is locked there.
	x.open(0, 2)
	x.okAs(0, 2, Request{Op: HostLock, GVA: g.PageAt(1), Timeout: 2 * time.Second})
	if c := x.do(0, Request{Op: HostFree, GVA: g}); !errors.Is(c.Err, syscall.EBUSY) {
		t.Fatalf("free with a locked page: %v", c.Err)
	}
	x.okAs(0, 2, Request{Op: HostUnlock, GVA: g.PageAt(1)})
	// A try-lock of a free node lock is an ordinary lock.
	x.okAs(1, 1, Request{Op: HostUnlock, GVA: g})
	x.okAs(1, 2, Request{Op: HostLock, GVA: g, Try: true, Timeout: time.Second})
}

// TestHostsLocalLockWaiterLeaves: a waiter whose caller gives up, and one
// whose session closes, leave the queue at once (nothing completes, and
// nothing is taken for them); the next waiter gets the lock.
func TestHostsLocalLockWaiterLeaves(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.open(1, 2, 3, 4)
	x.okAs(1, 1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	w2 := x.submitAs(1, 2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	w3 := x.submitAs(1, 3, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	w4 := x.submitAs(1, 4, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	x.f.Run(10 * time.Millisecond)
	x.h[1].Abandon(x.f.Now(), 2, w2, x.f.Cores[1])
	x.h[1].Close(x.f.Now(), 3, x.f.Cores[1])
	if nl := x.h[1].locks[g.Key()]; nl == nil || len(nl.waiters) != 1 || nl.waiters[0].s.id != 4 {
		t.Fatal("the queue does not hold only session 4's lock")
	}
	if x.h[1].Known(3) {
		t.Fatal("a closed session that only waited is still known")
	}
	x.okAs(1, 1, Request{Op: HostUnlock, GVA: g})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.done(1, w4); return ok })
	if c, ok := x.done(1, w4); !ok || c.Err != nil {
		t.Fatalf("session 4's lock: done %v, %v", ok, c.Err)
	}
	for _, id := range []uint64{w2, w3} {
		if _, ok := x.done(1, id); ok {
			t.Fatal("a waiter that left completed")
		}
	}
	if refs, acq, locks := x.h[1].Held(2); refs+acq+locks != 0 {
		t.Fatalf("the abandoned waiter's session holds %d refs, %d acquisitions, %d locks", refs, acq, locks)
	}
	// Two locks of one session waiting: it gets the lock once.
	a := x.submitAs(1, 2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	b := x.submitAs(1, 2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	x.okAs(1, 4, Request{Op: HostUnlock, GVA: g})
	x.f.Run(100 * time.Millisecond)
	ca, oka := x.done(1, a)
	cb, okb := x.done(1, b)
	if !oka || !okb || ca.Err != nil || !errors.Is(cb.Err, syscall.EDEADLK) {
		t.Fatalf("two waiting locks of one session: %v %v, %v %v", oka, ca.Err, okb, cb.Err)
	}
}

// TestHostsLocalLockRevoked: a holder whose pin outlives its bound loses
// the lock (EventHostFault names its session) and the next waiter of the
// node gets it.
func TestHostsLocalLockRevoked(t *testing.T) {
	x := newHostFabTuned(t, 2, func(c *Config) { c.PinBound = 50 * time.Millisecond })
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.open(0, 2)
	x.okAs(0, 1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	w := x.submitAs(0, 2, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.done(0, w); return ok })
	if c, ok := x.done(0, w); !ok || c.Err != nil {
		t.Fatalf("the waiter after the revocation: done %v, %v", ok, c.Err)
	}
	var fault *Event
	for i, ev := range x.sinks[0].events {
		if ev.Kind == EventHostFault {
			fault = &x.sinks[0].events[i]
		}
	}
	if fault == nil || fault.Session != 1 {
		t.Fatalf("host fault event %+v, want one for session 1", fault)
	}
	if _, _, locks := x.h[0].Held(1); locks != 0 {
		t.Fatal("the revoked session still holds the lock")
	}
	if c := x.doAs(0, 1, Request{Op: HostUnlock, GVA: g}); !errors.Is(c.Err, syscall.EPERM) {
		t.Fatalf("unlock after the revocation: %v", c.Err)
	}
}

// TestHostsLocalLockAfterAbandon: a session that gave up on a lock and asks
// again waits for its abandoned claim to be undone, then gets the lock
// (not EDEADLK: it does not hold it as far as its caller knows).
func TestHostsLocalLockAfterAbandon(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	id := x.submitAs(1, 1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	x.h[1].Abandon(x.f.Now(), 1, id, x.f.Cores[1])
	x.okAs(1, 1, Request{Op: HostLock, GVA: g, Timeout: 2 * time.Second})
	if _, _, locks := x.h[1].Held(1); locks != 1 {
		t.Fatalf("%d locks held", locks)
	}
	if _, ok := x.done(1, id); ok {
		t.Fatal("the abandoned lock completed")
	}
}

// TestHostsOwnershipLostPerSession: when another node takes a page, every
// session of this node that acquired it hears EventOwnershipLost, once, in
// session order, and no other session does.
func TestHostsOwnershipLostPerSession(t *testing.T) {
	x := newHostFab(t, 3)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.open(1, 2, 3, 4)
	x.okAs(1, 3, Request{Op: HostAcquire, GVA: g, Timeout: 2 * time.Second})
	x.okAs(1, 2, Request{Op: HostAcquire, GVA: g, Timeout: 2 * time.Second})
	x.okAs(1, 4, Request{Op: HostRef, GVA: g})
	x.ok(2, Request{Op: HostAcquire, GVA: g, Timeout: 2 * time.Second})
	x.f.Run(50 * time.Millisecond)
	var heard []SessionID
	for _, ev := range x.sinks[1].events {
		if ev.Kind == EventOwnershipLost && ev.GVA.Key() == g.Key() {
			heard = append(heard, ev.Session)
		}
	}
	if len(heard) != 2 || heard[0] != 2 || heard[1] != 3 {
		t.Fatalf("ownership-lost heard by sessions %v, want [2 3]", heard)
	}
	if c := x.doAs(1, 2, Request{Op: HostRelease, GVA: g}); !errors.Is(c.Err, syscall.EPERM) {
		t.Fatalf("release after the loss: %v", c.Err)
	}
}

// TestHostsReleaseAtTheLastAcquirer: the engine's release of a page comes
// with the release of the node's last acquiring session; the others give
// back only their claim's ref.
func TestHostsReleaseAtTheLastAcquirer(t *testing.T) {
	x := newHostFab(t, 2)
	g := x.ok(0, Request{Op: HostAlloc, Pages: 1}).GVA
	x.open(1, 2)
	x.okAs(1, 1, Request{Op: HostAcquire, GVA: g, Timeout: 2 * time.Second})
	x.okAs(1, 2, Request{Op: HostAcquire, GVA: g, Timeout: 2 * time.Second})
	engineRequests := func() uint64 { return x.h[1].Engine().Stats().HostRequests }
	before := engineRequests()
	x.okAs(1, 2, Request{Op: HostRelease, GVA: g})
	x.f.Run(10 * time.Millisecond)
	if n := engineRequests() - before; n != 1 {
		t.Fatalf("a release with another acquirer left made %d engine requests, want 1 (the unref)", n)
	}
	before = engineRequests()
	x.okAs(1, 1, Request{Op: HostRelease, GVA: g})
	x.f.Run(10 * time.Millisecond)
	if n := engineRequests() - before; n != 2 {
		t.Fatalf("the last release made %d engine requests, want 2 (release, unref)", n)
	}
	for _, s := range []SessionID{1, 2} {
		if refs, acq, locks := x.h[1].Held(s); refs+acq+locks != 0 {
			t.Fatalf("session %d holds %d refs, %d acquisitions, %d locks", s, refs, acq, locks)
		}
	}
}
