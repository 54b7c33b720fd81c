package client_test

import (
	"context"
	"encoding/binary"
	"runtime/debug"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

// twoHosts starts two nodes of one fabric of node cores and a client on each.
func twoHosts(t *testing.T) (*hostiftest.Fabric, *client.Client, *client.Client) {
	t.Helper()
	fab := hostiftest.NewFabric()
	var cs [2]*client.Client
	for i := range cs {
		be := fab.Node(gva.MachineIndex(i + 1))
		t.Cleanup(be.Close)
		path := hostiftest.StartServer(t, be, hostif.Options{})
		c, err := client.Dial(context.Background(), path, client.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return fab, cs[0], cs[1]
}

func mmap(t *testing.T, c *client.Client, g gva.GVA, bytes int, writable bool) *client.Area {
	t.Helper()
	a, err := c.Mmap(context.Background(), g, bytes, writable)
	if err != nil {
		t.Skipf("mmap: %v", err) // no userfaultfd here
	}
	return a
}

func at(g gva.GVA, off uint64) gva.GVA {
	g.Lo += off
	return g
}

func u64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func load64(t *testing.T, c *client.Client, g gva.GVA) uint64 {
	t.Helper()
	v, err := c.Load64(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMmapOwnership: reads fault pages in; a write takes the page's
// ownership to this node; writes reach the owner at a release point without
// overwriting an atomic made meanwhile; when the peer takes the page, what
// was written reaches it and the page is fetched again here.
func TestMmapOwnership(t *testing.T) {
	fab, c1, c2 := twoHosts(t)
	ctx := context.Background()
	g, err := c2.Alloc(ctx, 2*4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	a := mmap(t, c1, g, 2*4096, true)
	m := a.Bytes()
	if u64(m, 0) != 0 || a.Stats().ReadFaults != 1 {
		t.Fatalf("first read: %d, stats %+v", u64(m, 0), a.Stats())
	}
	if _, err := c2.Store64(ctx, at(g, 8), 7); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(client.SyncAcquire); err != nil {
		t.Fatal(err)
	}
	if u64(m, 8) != 7 {
		t.Fatalf("after an acquire point: %d, want the peer's 7", u64(m, 8))
	}

	binary.LittleEndian.PutUint64(m[16:], 42) // a write fault
	if owner, _ := fab.Owner(g); owner != 1 || a.Stats().Acquisitions != 1 {
		t.Fatalf("after a write: owner %d, stats %+v", owner, a.Stats())
	}
	if _, err := c2.FetchAdd(ctx, g, 5); err != nil { // at the owner, meanwhile
		t.Fatal(err)
	}
	if v := load64(t, c2, at(g, 16)); v != 0 {
		t.Fatalf("before the release point the peer reads %d", v)
	}
	if err := a.Sync(client.SyncRelease); err != nil {
		t.Fatal(err)
	}
	if v, w := load64(t, c2, at(g, 16)), load64(t, c2, g); v != 42 || w != 5 {
		t.Fatalf("after the release point the peer reads %d and %d, want 42 and 5", v, w)
	}

	binary.LittleEndian.PutUint64(m[24:], 9) // owned: a write-protect fault, no request
	if err := c2.Acquire(ctx, g, time.Second); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); a.Stats().Losses == 0 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if st := a.Stats(); st.Losses != 1 || st.Acquisitions != 1 {
		t.Fatalf("after the peer took the page: stats %+v", st)
	}
	if v := load64(t, c2, at(g, 24)); v != 9 {
		t.Fatalf("the peer reads %d of what was written before it took the page, want 9", v)
	}
	if _, err := c2.Store64(ctx, at(g, 32), 11); err != nil {
		t.Fatal(err)
	}
	if u64(m, 32) != 11 || u64(m, 24) != 9 {
		t.Fatalf("page fetched again after the loss: %d %d", u64(m, 32), u64(m, 24))
	}
	if err := c2.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := a.Munmap(ctx); err != nil {
		t.Fatal(err)
	}
	// the core gives the refs back as their unrefs complete
	for end := time.Now().Add(10 * time.Second); fab.Refs(g, 1) != 0 || fab.Acquired(g, 1); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after Munmap node 1 holds %d refs (acquired %v)", fab.Refs(g, 1), fab.Acquired(g, 1))
		}
	}
	if err := a.Munmap(ctx); err == nil {
		t.Fatal("a second Munmap succeeded")
	}
}

// TestMmapLock: unmodified code under a lock on one host, read under the
// lock on the other, through Areas: every increment is seen.
func TestMmapLock(t *testing.T) {
	_, c1, c2 := twoHosts(t)
	ctx := context.Background()
	g, err := c1.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := mmap(t, c1, g, 4096, true), mmap(t, c2, g, 4096, true)
	defer a1.Munmap(ctx)
	defer a2.Munmap(ctx)
	for i := range 20 {
		c, m := c1, a1.Bytes()
		if i%2 == 1 {
			c, m = c2, a2.Bytes()
		}
		if err := c.Lock(ctx, g, time.Second); err != nil {
			t.Fatal(err)
		}
		if v := u64(m, 8); v != uint64(i) {
			t.Fatalf("step %d: read %d under the lock", i, v)
		}
		binary.LittleEndian.PutUint64(m[8:], uint64(i+1))
		if err := c.Unlock(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if v := load64(t, c1, at(g, 8)); v != 20 {
		t.Fatalf("after 20 steps: %d", v)
	}
}

// TestMmapNodeStalls: a fault the node does not answer is bounded by the
// client's timeout: the touch takes a memory fault (recovered here) and is
// logged, instead of hanging.
func TestMmapNodeStalls(t *testing.T) {
	be, path := start(t, hostif.Options{})
	ctx := context.Background()
	c, err := client.Dial(ctx, path, client.Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := be.remote(2 * 4096) // node 2's pages: stall cuts it off
	if err != nil {
		t.Fatal(err)
	}
	a := mmap(t, c, g, 2*4096, true)
	defer a.Munmap(ctx)
	if a.Bytes()[0] != 0 {
		t.Fatal("fresh page not zero")
	}
	be.stall(true)
	start := time.Now()
	done := make(chan any, 1)
	go func() {
		debug.SetPanicOnFault(true)
		defer func() { done <- recover() }()
		a.Bytes()[4096] = 1
	}()
	select {
	case r := <-done:
		if r == nil {
			t.Fatal("a write the node never served went through")
		}
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), r)
	case <-time.After(10 * time.Second):
		t.Fatal("a fault the node never served hung")
	}
	be.stall(false)
	if a.Bytes()[0] != 0 { // the other page still works
		t.Fatal("page 0 changed")
	}
}

// TestMmapConcurrentFaults: more goroutines than Ps fault pages of one
// Area at once; every fault is served and every read sees the peer's
// content.
func TestMmapConcurrentFaults(t *testing.T) {
	_, c1, c2 := twoHosts(t)
	ctx := context.Background()
	const pages = 32
	g, err := c2.Alloc(ctx, pages*4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pages {
		if _, err := c2.Store64(ctx, at(g, uint64(i)*4096), uint64(i)+100); err != nil {
			t.Fatal(err)
		}
	}
	a := mmap(t, c1, g, pages*4096, true)
	defer a.Munmap(ctx)
	m := a.Bytes()
	errs := make(chan string, pages)
	for w := range 8 {
		go func() {
			for i := w; i < pages; i += 8 {
				if v := u64(m, i*4096); v != uint64(i)+100 {
					errs <- "wrong content"
					return
				}
				binary.LittleEndian.PutUint64(m[i*4096+8:], uint64(i))
			}
			errs <- ""
		}()
	}
	timeout := time.After(20 * time.Second)
	for range 8 {
		select {
		case e := <-errs:
			if e != "" {
				t.Fatal(e)
			}
		case <-timeout:
			t.Fatal("concurrent faults did not finish in 20 s")
		}
	}
	if err := a.Sync(client.SyncRelease); err != nil {
		t.Fatal(err)
	}
	for i := range pages {
		if v := load64(t, c2, at(g, uint64(i)*4096+8)); v != uint64(i) {
			t.Fatalf("page %d: the peer reads %d", i, v)
		}
	}
	t.Logf("stats %+v", a.Stats())
}

// TestMmapReported: an Area and its counters reach the agent (what dpuctl
// mem maps lists).
func TestMmapReported(t *testing.T) {
	_, c1, _ := twoHosts(t)
	ctx := context.Background()
	g, err := c1.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := mmap(t, c1, g, 4096, true)
	defer a.Munmap(ctx)
	a.Bytes()[0] = 1
	for end := time.Now().Add(5 * time.Second); ; {
		_, entries, err := c1.Maps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 1 && entries[0].GVA == g && entries[0].WriteFaults == 1 && entries[0].Prot == 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("maps listed %+v", entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
