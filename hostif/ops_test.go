package hostif_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// node is one in-memory host: a server in front of one Node of a fabric.
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
