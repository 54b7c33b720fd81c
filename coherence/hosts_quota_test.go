package coherence

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// limitLedger is a page quota with one limit per user.
type limitLedger struct {
	limit int
	used  map[uint32]int
}

func (l *limitLedger) Take(uid uint32, n int) error {
	if l.used[uid]+n > l.limit {
		return fmt.Errorf("uid %d over %d pages: %w", uid, l.limit, syscall.EDQUOT)
	}
	l.used[uid] += n
	return nil
}

func (l *limitLedger) Release(uid uint32, n int) { l.used[uid] -= n }

// TestHostsChargeAllocations: the core charges an allocation's pages to
// its user before it makes them (EDQUOT past the limit, nothing made), a
// free gives them back, also for a page that a lock moved to another node
// (its allocator takes it back to free it), and the charge always equals
// what the user holds allocated.
func TestHostsChargeAllocations(t *testing.T) {
	ledgers := map[int]*limitLedger{}
	x := newHostFabTuned(t, 2, func(c *Config) {
		l := &limitLedger{limit: 4, used: map[uint32]int{}}
		ledgers[int(c.Self)] = l
		c.Quota = l
	})
	const uid = 1000
	attr := Attr{UID: uid, Mode: 0o666}
	held := func(when string, want int) {
		t.Helper()
		if got := ledgers[0].used[uid]; got != want || x.h[0].Charged()[uid] != want {
			t.Fatalf("%s: uid %d charged %d, holds %d allocated; want %d", when, uid, got, x.h[0].Charged()[uid], want)
		}
	}
	g := x.ok(0, Request{Op: HostAlloc, Pages: 3, Attr: attr}).GVA
	held("after 3 pages", 3)
	if c := x.do(0, Request{Op: HostAlloc, Pages: 2, Attr: attr}); errno(c) != syscall.EDQUOT {
		t.Fatalf("alloc past the quota: %v, want EDQUOT", c.Err)
	}
	held("after a refused alloc", 3)
	// node 1 locks (and so owns) the second page; the free still gives
	// every page back
	x.ok(1, Request{Op: HostLock, GVA: g.PageAt(1), Timeout: time.Second, Cred: Cred{UID: uid}})
	x.ok(1, Request{Op: HostUnlock, GVA: g.PageAt(1)})
	if owner, _ := x.h[1].Engine().Holding(g.PageAt(1).Key()); !owner {
		t.Fatal("the lock did not move the page")
	}
	x.ok(0, Request{Op: HostFree, GVA: g, Cred: Cred{UID: uid}, Timeout: 5 * time.Second})
	held("after the free", 0)
	if got := ledgers[1].used[uid]; got != 0 {
		t.Fatalf("node 1 charged uid %d %d pages it never allocated", uid, got)
	}
	x.ok(0, Request{Op: HostAlloc, Pages: 4, Attr: attr})
	held("after the quota came back", 4)
}

// TestHostsChargePulledPages: an acquire or a lock that brings another
// node's page here charges it to its user's page quota (EDQUOT past it,
// and the page stays where it was), for as long as the page stays: a
// release keeps the charge, the page leaving gives it back.
func TestHostsChargePulledPages(t *testing.T) {
	ledgers := map[int]*limitLedger{}
	x := newHostFabTuned(t, 2, func(c *Config) {
		l := &limitLedger{limit: 2, used: map[uint32]int{}}
		ledgers[int(c.Self)] = l
		c.Quota = l
	})
	const uid = 1000
	user := Cred{UID: uid}
	g := x.ok(0, Request{Op: HostAlloc, Pages: 2, Attr: Attr{UID: 7, Mode: 0o666}}).GVA
	g2 := x.ok(0, Request{Op: HostAlloc, Pages: 1, Attr: Attr{UID: 8, Mode: 0o666}}).GVA
	charged := func(when string, want int) {
		t.Helper()
		if got := ledgers[1].used[uid]; got != want || x.h[1].Charged()[uid] != want {
			t.Fatalf("%s: node 1 charges uid %d %d pages (held %d), want %d", when, uid, got, x.h[1].Charged()[uid], want)
		}
	}
	x.ok(1, Request{Op: HostAcquire, GVA: g, Cred: user, Timeout: time.Second})
	charged("after an acquire", 1)
	x.ok(1, Request{Op: HostRelease, GVA: g})
	charged("after its release (the page stays here)", 1)
	x.ok(1, Request{Op: HostLock, GVA: g.PageAt(1), Cred: user, Timeout: time.Second})
	x.ok(1, Request{Op: HostUnlock, GVA: g.PageAt(1)})
	charged("after a lock", 2)
	if c := x.do(1, Request{Op: HostAcquire, GVA: g2, Cred: user, Timeout: time.Second}); errno(c) != syscall.EDQUOT {
		t.Fatalf("a third page past the quota: %v, want EDQUOT", c.Err)
	}
	if owner, _ := x.h[0].Engine().Holding(g2.Key()); !owner {
		t.Fatal("the refused acquire moved the page")
	}
	charged("after the refused acquire", 2)
	// node 0 takes the first page back: its charge at node 1 goes
	x.ok(0, Request{Op: HostAcquire, GVA: g, Timeout: time.Second})
	x.f.Run(50 * time.Millisecond)
	charged("after the page left", 1)
	x.ok(1, Request{Op: HostAcquire, GVA: g2, Cred: user, Timeout: time.Second})
	charged("after the quota came back", 2)
}
