package hostif_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/view"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// node is one host: a server in front of one Node of a fabric.
type node struct {
	fab  *hostiftest.Fabric
	be   *hostiftest.Node
	path string
}

func startNode(t testing.TB, fab *hostiftest.Fabric, m gva.MachineIndex, opts hostif.Options) *node {
	t.Helper()
	be := fab.Node(m)
	t.Cleanup(be.Close)
	return &node{fab: fab, be: be, path: hostiftest.StartServer(t, be, opts)}
}

func dial(t testing.TB, path string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), path, client.Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantErrno(t testing.TB, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func TestEveryOp(t *testing.T) {
	n := startNode(t, hostiftest.NewFabric(), 1, hostif.Options{})
	c := dial(t, n.path)
	ctx := ctxT(t)

	if h := c.Hello(); h.Version != 1 || h.Machine != 1 || h.MaxOutstanding != 64 || h.PageSize != 4096 {
		t.Fatalf("hello = %+v", h)
	}
	g, err := c.Alloc(ctx, 3*4096-5, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if g.Machine() != 1 || g.Offset() != 0 {
		t.Fatalf("alloc = %v", g)
	}
	page1 := wire.PageAt(g, 1)

	// store / load, 1..8 bytes and a range
	v1, err := c.Store(ctx, page1.WithOffset(3), []byte{1, 2, 3})
	if err != nil || v1 != 1 {
		t.Fatalf("store = %v, %v", v1, err)
	}
	buf := make([]byte, 5)
	if v, err := c.Load(ctx, page1.WithOffset(2), buf); err != nil || v != 1 || string(buf) != "\x00\x01\x02\x03\x00" {
		t.Fatalf("load = %v %v %v", buf, v, err)
	}
	big := make([]byte, 4096)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if _, err := c.Store(ctx, g, big); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if _, err := c.Load(ctx, g, got); err != nil || string(got) != string(big) {
		t.Fatalf("page load mismatch: %v", err)
	}
	if _, err := c.Store(ctx, g.WithOffset(4090), make([]byte, 8)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("store across a page: %v", err)
	}

	// 64-bit atomics
	w := wire.PageAt(g, 2).WithOffset(64)
	if _, err := c.Store64(ctx, w, 10); err != nil {
		t.Fatal(err)
	}
	if old, ok, err := c.CompareAndSwap(ctx, w, 10, 20); err != nil || !ok || old != 10 {
		t.Fatalf("cas = %d %v %v", old, ok, err)
	}
	if old, ok, err := c.CompareAndSwap(ctx, w, 10, 30); err != nil || ok || old != 20 {
		t.Fatalf("failing cas = %d %v %v", old, ok, err)
	}
	if old, err := c.FetchAdd(ctx, w, 5); err != nil || old != 20 {
		t.Fatalf("fetch-add = %d %v", old, err)
	}
	if v, err := c.Load64(ctx, w); err != nil || v != 25 {
		t.Fatalf("load64 = %d %v", v, err)
	}
	_, _, err = c.CompareAndSwap(ctx, w.WithOffset(65), 0, 1)
	wantErrno(t, err, syscall.EINVAL)

	// ownership
	if err := c.Acquire(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	if !n.fab.Acquired(g, 1) {
		t.Fatal("acquire did not reach the backend")
	}
	if err := c.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, c.Release(ctx, g), syscall.EPERM)
	if err := c.Lock(ctx, page1, 0); err != nil {
		t.Fatal(err)
	}
	if m, ok := n.fab.LockedBy(page1); !ok || m != 1 {
		t.Fatal("lock did not reach the backend")
	}
	wantErrno(t, c.Lock(ctx, page1, 0), syscall.EDEADLK)
	if err := c.Unlock(ctx, page1); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, c.Unlock(ctx, page1), syscall.EPERM)

	// where
	loc, err := c.Where(ctx, w)
	if err != nil || loc.Tier != gva.TierMachine || loc.Owner != 1 || loc.Hops != 0 || loc.Version != 3 {
		t.Fatalf("where = %+v %v", loc, err)
	}

	// map, translate, where local, unmap
	m, err := c.Map(ctx, g, 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Bytes()[:4096]) != string(big) {
		t.Fatal("mapped page 0 differs")
	}
	if v, err := m.Load64(ctx, 2*4096+64); err != nil || v != 25 {
		t.Fatalf("mapped load64 = %d %v", v, err)
	}
	back, err := c.TranslateLVA(ctx, m.LVA()+4096+17)
	if err != nil || back != page1.WithOffset(17) {
		t.Fatalf("translate lva = %v %v", back, err)
	}
	lva, err := c.TranslateGVA(ctx, w)
	if err != nil || lva != m.LVA()+2*4096+64 {
		t.Fatalf("translate gva = %#x %v (mapping at %#x)", lva, err, m.LVA())
	}
	if loc, err := c.Where(ctx, w); err != nil || loc.Tier != gva.TierLocal {
		t.Fatalf("where mapped = %+v %v", loc, err)
	}
	if n.fab.Refs(g, 1) != 1 {
		t.Fatalf("refs = %d", n.fab.Refs(g, 1))
	}
	wantErrno(t, c.Free(ctx, g), syscall.EBUSY)
	if err := m.Unmap(ctx); err != nil {
		t.Fatal(err)
	}
	if n.fab.Refs(g, 1) != 0 {
		t.Fatal("unmap left a ref")
	}
	_, err = c.TranslateLVA(ctx, m.LVA())
	wantErrno(t, err, syscall.ENOENT)

	// subscribe, GPU ops reserved, free
	if err := c.Subscribe(ctx, wire.AllEvents); err != nil {
		t.Fatal(err)
	}
	_, err = c.Raw(ctx, wire.OpGPUMemLimit, gva.GVA{}, []byte{1, 2, 3})
	wantErrno(t, err, syscall.ENOSYS)
	if err := c.Free(ctx, g); err != nil {
		t.Fatal(err)
	}
	_, err = c.Load(ctx, g, buf)
	wantErrno(t, err, syscall.ENOENT)
	wantErrno(t, c.Free(ctx, g), syscall.ENOENT)
}

func nextEvent(t testing.TB, c *client.Client, want wire.EventType) wire.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("event stream closed waiting for %v", want)
			}
			if ev.Type == want {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event", want)
		}
	}
}

// TestReplicaConsistency: two hosts share a fabric. Host 1 maps a page;
// writes made through host 2 reach host 1's replica as updates (small) or
// invalidations (large, then refetched); writes acknowledged on host 1 are
// in its replica before the reply.
func TestReplicaConsistency(t *testing.T) {
	fab := hostiftest.NewFabric()
	h1 := startNode(t, fab, 1, hostif.Options{})
	h2 := startNode(t, fab, 2, hostif.Options{})
	c1, c1b, c2 := dial(t, h1.path), dial(t, h1.path), dial(t, h2.path)
	ctx := ctxT(t)
	g, err := c2.Alloc(ctx, 2*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Subscribe(ctx, wire.AllEvents); err != nil {
		t.Fatal(err)
	}
	m, err := c1.Map(ctx, g, 2*4096)
	if err != nil {
		t.Fatal(err)
	}
	word := func(off int) uint64 { return binary.LittleEndian.Uint64(m.Bytes()[off:]) }

	// write-update from another host: applied in place, event says so
	if _, err := c2.Store64(ctx, g.WithOffset(16), 0xabcdef); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, c1, wire.EventUpdated)
	if ev.Page != g || ev.Version != 1 || ev.Offset != 16 || ev.Length != 8 {
		t.Fatalf("update event %+v", ev)
	}
	if word(16) != 0xabcdef {
		t.Fatalf("replica word = %#x after the update event", word(16))
	}
	if v, valid := m.Version(0); v != 1 || !valid {
		t.Fatalf("replica version %d valid %v", v, valid)
	}

	// write-invalidate from another host: stale until refetched, and a
	// library read never returns the old content once the event is seen
	big := make([]byte, 1024)
	for i := range big {
		big[i] = 0x5a
	}
	if _, err := c2.Store(ctx, wire.PageAt(g, 1), big); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, c1, wire.EventInvalidated)
	if ev.Page != wire.PageAt(g, 1) || ev.Version != 1 {
		t.Fatalf("invalidate event %+v", ev)
	}
	if v, err := m.Load64(ctx, 4096+8); err != nil || v != 0x5a5a5a5a5a5a5a5a {
		t.Fatalf("load64 after invalidation = %#x %v", v, err)
	}
	got := make([]byte, 1024)
	if err := m.Read(ctx, 4096, got); err != nil || string(got) != string(big) {
		t.Fatalf("read after invalidation: %v", err)
	}
	waitFor(t, "refetch", func() bool { v, valid := m.Version(1); return valid && v == 1 })
	if string(m.Bytes()[4096:4096+1024]) != string(big) {
		t.Fatal("refetched replica differs")
	}

	// read-your-writes on this host, from any connection: acknowledged
	// writes are in the replica (raw memory included) before the reply
	for i := range uint64(200) {
		w := c1
		if i%2 == 1 {
			w = c1b
		}
		off := int(i%8) * 8
		if _, err := w.Store64(ctx, g.WithOffset(uint16(off)), i*3+1); err != nil {
			t.Fatal(err)
		}
		if word(off) != i*3+1 {
			t.Fatalf("write %d not in the replica after its reply: %#x", i, word(off))
		}
		if v, err := m.Load64(ctx, off); err != nil || v != i*3+1 {
			t.Fatalf("load64 after write %d = %d %v", i, v, err)
		}
		if _, err := w.FetchAdd(ctx, g.WithOffset(uint16(off)), 1); err != nil {
			t.Fatal(err)
		}
		if word(off) != i*3+2 {
			t.Fatalf("fetch-add %d not in the replica after its reply", i)
		}
	}
}

// TestCASIsInTheReplicaBeforeItsReply: a compare-and-swap of this host
// that swapped is in the page's replica file (raw memory, still valid)
// before its reply, as a store's and a fetch-add's are; one that did not
// swap leaves the file as it was.
func TestCASIsInTheReplicaBeforeItsReply(t *testing.T) {
	fab := hostiftest.NewFabric()
	h1 := startNode(t, fab, 1, hostif.Options{})
	h2 := startNode(t, fab, 2, hostif.Options{})
	c1, c2 := dial(t, h1.path), dial(t, h2.path)
	ctx := ctxT(t)
	g, err := c2.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c1.Map(ctx, g, 4096)
	if err != nil {
		t.Fatal(err)
	}
	word := func(off int) uint64 { return binary.LittleEndian.Uint64(m.Bytes()[off:]) }
	for i := range uint64(50) {
		off := int(i%8) * 8
		cur := word(off)
		old, swapped, err := c1.CompareAndSwap(ctx, g.WithOffset(uint16(off)), cur, cur+7)
		if err != nil || !swapped || old != cur {
			t.Fatalf("CAS %d: %d %v %v", i, old, swapped, err)
		}
		if w := word(off); w != cur+7 {
			t.Fatalf("CAS %d (%d→%d) swapped, the replica word is %d after its reply", i, cur, cur+7, w)
		}
		if _, valid := m.Version(0); !valid {
			t.Fatalf("CAS %d swapped: the replica is no longer valid", i)
		}
		old, swapped, err = c1.CompareAndSwap(ctx, g.WithOffset(uint16(off)), cur, 1)
		if err != nil || swapped || old != cur+7 {
			t.Fatalf("CAS %d expecting the old value: %d %v %v", i, old, swapped, err)
		}
		if w := word(off); w != cur+7 {
			t.Fatalf("CAS %d did not swap, the replica word is %d, want %d", i, w, cur+7)
		}
	}
}

// pathCount is a node's backend that counts the requests it is handed
// through Do and through its Pipeline.
type pathCount struct {
	*hostiftest.Node
	do, submitted atomic.Int64
}

func (b *pathCount) Do(ctx context.Context, c *hostif.Call) error {
	b.do.Add(1)
	return b.Node.Do(ctx, c)
}

func (b *pathCount) Submit(s hostif.Session, rs []coherence.Request) {
	b.submitted.Add(int64(len(rs)))
	b.Node.Submit(s, rs)
}

// TestCoreRequestsGoThroughThePipeline: with a backend that has a
// Pipeline, the requests of the core (alloc, the data path, lock, unlock,
// free) are submitted to it, none through the blocking Do.
func TestCoreRequestsGoThroughThePipeline(t *testing.T) {
	fab := hostiftest.NewFabric()
	be := &pathCount{Node: fab.Node(1)}
	t.Cleanup(be.Close)
	c := dial(t, hostiftest.StartServer(t, be, hostif.Options{}))
	ctx := ctxT(t)
	do0, sub0 := be.do.Load(), be.submitted.Load()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store64(ctx, g, 5); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Load64(ctx, g); err != nil || v != 5 {
		t.Fatalf("load64 = %d %v", v, err)
	}
	if _, _, err := c.CompareAndSwap(ctx, g, 5, 6); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FetchAdd(ctx, g, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(ctx, g); err != nil {
		t.Fatal(err)
	}
	if n := be.do.Load() - do0; n != 0 {
		t.Fatalf("%d requests of the core went through Do", n)
	}
	if n := be.submitted.Load() - sub0; n < 6 {
		t.Fatalf("%d requests submitted to the Pipeline for 6 of the core", n)
	}
}

// reloadCount is a node's backend that counts its calls of Do and the
// loads submitted in the server's session (the replica files' reloads),
// and lets a test inject events.
type reloadCount struct {
	*hostiftest.Node
	ch          chan hostif.Event
	do, reloads atomic.Int64
}

func (b *reloadCount) Events() <-chan hostif.Event { return b.ch }

func (b *reloadCount) Do(ctx context.Context, c *hostif.Call) error {
	b.do.Add(1)
	return b.Node.Do(ctx, c)
}

func (b *reloadCount) Submit(s hostif.Session, rs []coherence.Request) {
	for _, r := range rs {
		if s == hostif.ServerSession && r.Op == coherence.HostLoad {
			b.reloads.Add(1)
		}
	}
	b.Node.Submit(s, rs)
}

// TestReloadsGoThroughThePipeline: a replica file that fell behind (a
// write the server never heard of, then an overflow) is reloaded by loads
// of the server's session submitted as values, none through Do; while its
// page's owner is cut off the reload gives up after a bounded number of
// attempts and the file stays stale, and it catches up once the owner is
// back.
func TestReloadsGoThroughThePipeline(t *testing.T) {
	fab := hostiftest.NewFabric()
	be := &reloadCount{Node: fab.Node(1), ch: make(chan hostif.Event, 1)}
	t.Cleanup(be.Node.Close)
	c := dial(t, hostiftest.StartServer(t, be, hostif.Options{OpTimeout: 200 * time.Millisecond}))
	ctx := ctxT(t)
	g := remotePage(t, fab, 2)
	m, err := c.Map(ctx, g, 4096)
	if err != nil {
		t.Fatal(err)
	}
	do0 := be.do.Load()
	if _, err := fab.Node(2).Store(ctx, g, []byte{9}); err != nil {
		t.Fatal(err)
	}
	be.ch <- hostif.Event{Kind: hostif.EventOverflow}
	waitFor(t, "reload after overflow", func() bool { v, valid := m.Version(0); return valid && v == 1 })
	if m.Bytes()[0] != 9 {
		t.Fatalf("reloaded file holds %d, want 9", m.Bytes()[0])
	}
	if n := be.do.Load() - do0; n != 0 {
		t.Fatalf("%d calls of Do for a reload", n)
	}
	if be.reloads.Load() == 0 {
		t.Fatal("no reload submitted")
	}

	// The owner cut off: a write there, then the overflow. The reload's
	// attempts fail and it gives up, the file stale.
	fab.Partition(2, true)
	if _, err := fab.Node(2).Store(ctx, g, []byte{10}); err != nil {
		t.Fatal(err)
	}
	r0 := be.reloads.Load()
	be.ch <- hostif.Event{Kind: hostif.EventOverflow}
	waitFor(t, "a reload of the stale file", func() bool { return be.reloads.Load() > r0 })
	time.Sleep(3 * view.Tries * 200 * time.Millisecond) // (every attempt within its 200 ms bound)
	if n := be.reloads.Load() - r0; n > view.Tries {
		t.Fatalf("%d attempts of one reload, want at most %d", n, view.Tries)
	}
	if _, valid := m.Version(0); valid {
		t.Fatal("the file is valid while its owner is cut off after a write")
	}
	fab.Partition(2, false)
	waitFor(t, "the file current once the owner is back", func() bool {
		_, _ = c.Load64(ctx, g) // a read through the node finds the file stale
		v, valid := m.Version(0)
		return valid && v == 2
	})
	if m.Bytes()[0] != 10 {
		t.Fatalf("reloaded file holds %d, want 10", m.Bytes()[0])
	}
}

// overflowBackend lets a test inject events.
type overflowBackend struct {
	*hostiftest.Node
	ch chan hostif.Event
}

func (b *overflowBackend) Events() <-chan hostif.Event { return b.ch }

func TestEventOverflow(t *testing.T) {
	fab := hostiftest.NewFabric()
	be := &overflowBackend{Node: fab.Node(1), ch: make(chan hostif.Event, 1)}
	t.Cleanup(be.Node.Close)
	path := hostiftest.StartServer(t, be, hostif.Options{})
	c := dial(t, path)
	ctx := ctxT(t)
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Map(ctx, g, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ctx, wire.EventLost.Mask()); err != nil {
		t.Fatal(err)
	}
	// A write the server never hears about, then the overflow report.
	if _, err := fab.Node(2).Store(ctx, g, []byte{9}); err != nil {
		t.Fatal(err)
	}
	be.ch <- hostif.Event{Kind: hostif.EventOverflow}
	nextEvent(t, c, wire.EventLost)
	waitFor(t, "refetch after overflow", func() bool { v, valid := m.Version(0); return valid && v == 1 })
	if m.Bytes()[0] != 9 {
		t.Fatal("replica not refetched after overflow")
	}
}

func TestLocks(t *testing.T) {
	// a pin outlives its bound in a second: the core revokes it
	fab := hostiftest.Start(t, hostiftest.Config{PinBound: time.Second})
	h1 := startNode(t, fab, 1, hostif.Options{})
	a, b := dial(t, h1.path), dial(t, h1.path)
	ctx := ctxT(t)
	g, err := a.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, b.TryLock(ctx, g), syscall.EBUSY)
	wantErrno(t, b.Lock(ctx, g, 50*time.Millisecond), syscall.ETIMEDOUT)
	wantErrno(t, b.Unlock(ctx, g), syscall.EPERM)
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx, g, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	if err := a.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting locker: %v", err)
	}

	// host fault: b keeps the lock past the pin bound, the core revokes
	// it, the holder is told, others may lock
	if err := b.Subscribe(ctx, wire.AllEvents); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, b, wire.EventHostFault)
	if ev.Page != g || ev.Reason != syscall.ETIMEDOUT {
		t.Fatalf("fault event %+v", ev)
	}
	wantErrno(t, b.Unlock(ctx, g), syscall.EPERM)
	if err := a.Lock(ctx, g, 0); err != nil {
		t.Fatalf("lock after fault: %v", err)
	}

	// another host takes the lock: it waits for ours, then we lose ownership
	h2 := startNode(t, fab, 2, hostif.Options{})
	c := dial(t, h2.path)
	wantErrno(t, c.Lock(ctx, g, 50*time.Millisecond), syscall.ETIMEDOUT)
	if err := a.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := b.Acquire(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Lock(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, b, wire.EventOwnershipLost); ev.Page != g {
		t.Fatalf("ownership event %+v", ev)
	}
	if loc, err := a.Where(ctx, g); err != nil || loc.Owner != 2 || loc.Tier != gva.TierNeighbour || loc.Hops != 1 {
		t.Fatalf("where after the move: %+v %v", loc, err)
	}
}

// TestDisconnectReleases: a client that goes away has its refs, locks and
// acquisitions released through the backend, and others proceed.
func TestDisconnectReleases(t *testing.T) {
	fab := hostiftest.NewFabric()
	h := startNode(t, fab, 1, hostif.Options{ReleaseTimeout: time.Second})
	ctx := ctxT(t)
	other := dial(t, h.path)
	g, err := other.Alloc(ctx, 3*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	p0, p1, p2 := g, wire.PageAt(g, 1), wire.PageAt(g, 2)

	gone, err := client.Dial(ctx, h.path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Map(ctx, p0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := gone.Lock(ctx, p1, 0); err != nil {
		t.Fatal(err)
	}
	if err := gone.Acquire(ctx, p2, 0); err != nil {
		t.Fatal(err)
	}
	if err := gone.Subscribe(ctx, wire.AllEvents); err != nil {
		t.Fatal(err)
	}
	// A lock request of another client waits on the dying one's lock.
	locked := make(chan error, 1)
	go func() { locked <- other.Lock(ctx, p1, 5*time.Second) }()
	gone.Close()

	if err := <-locked; err != nil {
		t.Fatalf("lock after the holder disconnected: %v", err)
	}
	waitFor(t, "release", func() bool { return fab.Refs(p0, 1) == 0 && !fab.Acquired(p2, 1) })
	if m, ok := fab.LockedBy(p1); !ok || m != 1 {
		t.Fatal("the waiting client's lock is not held")
	}
	if _, err := gone.Where(ctx, p0); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("call on a closed client: %v", err)
	}
}

// TestAbandonedCallsAreUndone: a LOCK granted after its caller gave up is
// unlocked by the client, so the lock does not leak.
func TestAbandonedCallsAreUndone(t *testing.T) {
	fab := hostiftest.NewFabric()
	h := startNode(t, fab, 1, hostif.Options{})
	a, b, c := dial(t, h.path), dial(t, h.path), dial(t, h.path)
	ctx := ctxT(t)
	g, err := a.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := b.Lock(short, g, 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned lock: %v", err)
	}
	if err := a.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	// b's request is granted after b gave up; b's client unlocks it.
	waitFor(t, "the abandoned lock to be undone", func() bool { return c.TryLock(ctx, g) == nil })
}

// TestConcurrentClient: many goroutines on one client; fetch-add is
// linearizable (every old value seen exactly once).
func TestConcurrentClient(t *testing.T) {
	h := startNode(t, hostiftest.NewFabric(), 1, hostif.Options{MaxOutstanding: 8})
	c := dial(t, h.path)
	ctx := ctxT(t)
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 32, 100
	olds := make(chan uint64, workers*each)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range each {
				old, err := c.FetchAdd(ctx, g, 1)
				if err != nil {
					errs <- err
					return
				}
				olds <- old
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(olds)
	seen := make([]bool, workers*each)
	for o := range olds {
		if o >= uint64(len(seen)) || seen[o] {
			t.Fatalf("old value %d repeated or out of range", o)
		}
		seen[o] = true
	}
	if v, err := c.Load64(ctx, g); err != nil || v != workers*each {
		t.Fatalf("counter %d %v", v, err)
	}
}

// TestSessionPerConnection: every connection is a session of the backend:
// its refs are its own (one connection's close leaves a page another maps
// mapped), a release of a page only another connection acquired is EPERM,
// and ownership-lost reaches only the connections that acquired the page.
func TestSessionPerConnection(t *testing.T) {
	fab := hostiftest.NewFabric()
	h := startNode(t, fab, 1, hostif.Options{ReleaseTimeout: time.Second})
	ctx := ctxT(t)
	a, b := dial(t, h.path), dial(t, h.path)
	g, err := a.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := client.Dial(ctx, h.path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ma, err := a.Map(ctx, g, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Map(ctx, g, 4096); err != nil {
		t.Fatal(err)
	}
	if n := fab.Refs(g, 1); n != 2 {
		t.Fatalf("two maps: %d refs at the backend", n)
	}
	gone.Close()
	waitFor(t, "the closed connection's ref to go", func() bool { return fab.Refs(g, 1) == 1 })
	if v, valid := ma.Version(0); !valid {
		t.Fatalf("the other connection's replica is no longer valid (version %d)", v)
	}
	if err := ma.Unmap(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fab.Refs(g, 1); n != 0 {
		t.Fatalf("after the last unmap: %d refs", n)
	}

	// acquisitions per connection
	for _, x := range []*client.Client{a, b} {
		if err := x.Subscribe(ctx, wire.AllEvents); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Acquire(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, b.Release(ctx, g), syscall.EPERM)
	h2 := startNode(t, fab, 2, hostif.Options{})
	if err := dial(t, h2.path).Acquire(ctx, g, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, a, wire.EventOwnershipLost); ev.Page != g {
		t.Fatalf("ownership event %+v", ev)
	}
	select {
	case ev := <-b.Events():
		if ev.Type == wire.EventOwnershipLost {
			t.Fatal("a connection that did not acquire the page heard ownership-lost")
		}
	case <-time.After(50 * time.Millisecond):
	}
}
