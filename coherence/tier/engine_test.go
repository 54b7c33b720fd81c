package tier_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

type sink struct {
	done map[uint64]coherence.Completion
}

func (s *sink) Complete(c coherence.Completion) {
	c.Data = append([]byte(nil), c.Data...)
	s.done[c.ID] = c
}
func (s *sink) Event(coherence.Event) {}

// pair is two engines on a line: node 0 over a tiered store of 64 memory
// pages and a fast tier, node 1 over a memory store.
type pair struct {
	t     *testing.T
	f     *nodetest.Fabric
	eng   [2]*coherence.Engine
	sinks [2]*sink
	store *tier.Store
	fast  *tier.MemFile
	next  uint64
}

func newPair(t *testing.T, fastSlots int) *pair {
	g, err := topo.Generate("line", 2, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := &pair{t: t}
	x.fast = tier.NewMemFile("fast.tier", int64(fastSlots+1)*tier.SlotSize, 1)
	s, err := tier.New(tier.Config{Memory: 64, Fast: x.fast, Poison: true})
	if err != nil {
		t.Fatal(err)
	}
	x.store = s
	mk := func(id noc.NodeID) node.Handler {
		sk := &sink{done: map[uint64]coherence.Completion{}}
		cfg := coherence.Config{Self: id, Incarnation: uint64(id) + 100, Sink: sk, Pages: 64, Seed: 7}
		if id == 0 {
			cfg.Store = s
		}
		e, err := coherence.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		x.eng[id], x.sinks[id] = e, sk
		return e
	}
	if x.f, err = nodetest.New(g, nodetest.Config{Seed: 1, Handler: mk}); err != nil {
		t.Fatal(err)
	}
	if !x.f.RunUntil(10*time.Second, x.f.Converged) {
		t.Fatal("routing did not converge")
	}
	return x
}

func (x *pair) ok(n int, r coherence.Request) coherence.Completion {
	x.t.Helper()
	x.next++
	r.ID = x.next
	x.eng[n].Submit(x.f.Now(), r, x.f.Cores[n])
	s := x.sinks[n]
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := s.done[r.ID]; return ok })
	c, ok := s.done[r.ID]
	if !ok || c.Err != nil {
		x.t.Fatalf("node %d %v %v: %v (completed %v)", n, r.Op, r.GVA, c.Err, ok)
	}
	return c
}

// A node with 64 memory pages and a fast tier takes 10,000 written pages
// and reads every one back exact; spilled pages keep their owner and
// serve a remote reader, a CAS and a lock, and where names their tier.
func TestEngineOnTieredStore(t *testing.T) {
	const n = 10_000
	x := newPair(t, n)
	pages := make([]gva.GVA, n)
	content := make([]byte, gva.PageSize)
	for i := range n {
		pages[i] = x.ok(0, coherence.Request{Op: coherence.HostAlloc}).GVA
		fill(content, i, 1)
		x.ok(0, coherence.Request{Op: coherence.HostStore, GVA: pages[i], Data: content})
	}
	used, _ := x.store.Use()
	if used[0] > 64 || x.store.Len() < n {
		t.Fatalf("memory holds %d pages (of 64), the store %d (want %d)", used[0], x.store.Len(), n)
	}
	spilled := -1
	for i := range n {
		if x.store.Speed(pages[i]) == gva.SpeedFastDisk {
			spilled = i
			break
		}
	}
	if spilled < 0 {
		t.Fatal("no page on the fast tier")
	}
	if loc := x.ok(0, coherence.Request{Op: coherence.HostWhere, GVA: pages[spilled]}).Where; loc.Speed != gva.SpeedFastDisk || loc.Owner != 0 || loc.Tier != gva.TierMachine {
		t.Fatalf("where of a spilled page: %+v, want this machine, fast disk, owner 0", loc)
	}
	for i := range n {
		got := x.ok(0, coherence.Request{Op: coherence.HostLoad, GVA: pages[i], Len: gva.PageSize}).Data
		fill(content, i, 1)
		if !bytes.Equal(got, content) {
			t.Fatalf("page %d reads back other content (gen %d)", i, got[8])
		}
	}
	// Remote access to pages that are on disk now.
	var far []int
	for i := range n {
		if x.store.Speed(pages[i]) == gva.SpeedFastDisk {
			far = append(far, i)
		}
		if len(far) == 3 {
			break
		}
	}
	if len(far) < 3 {
		t.Fatal("fewer than 3 pages on disk after reading back")
	}
	a, b, c := pages[far[0]], pages[far[1]], pages[far[2]]
	x.ok(1, coherence.Request{Op: coherence.HostRef, GVA: a})
	got := x.ok(1, coherence.Request{Op: coherence.HostLoad, GVA: a, Len: gva.PageSize}).Data
	fill(content, far[0], 1)
	if !bytes.Equal(got, content) {
		t.Fatal("a remote read of a spilled page returns other content")
	}
	x.ok(1, coherence.Request{Op: coherence.HostRef, GVA: b})
	old := x.ok(1, coherence.Request{Op: coherence.HostFetchAdd, GVA: b.WithOffset(16), Operand: 5}).Value
	fill(content, far[1], 1)
	if want := uint64(content[16]) | uint64(content[17])<<8 | uint64(content[18])<<16 | uint64(content[19])<<24 |
		uint64(content[20])<<32 | uint64(content[21])<<40 | uint64(content[22])<<48 | uint64(content[23])<<56; old != want {
		t.Fatalf("fetch-add on a spilled page saw %#x, want %#x", old, want)
	}
	x.ok(1, coherence.Request{Op: coherence.HostRef, GVA: c})
	x.ok(1, coherence.Request{Op: coherence.HostLock, GVA: c, Holder: 1})
	x.ok(1, coherence.Request{Op: coherence.HostUnlock, GVA: c, Holder: 1})
	if loc := x.ok(1, coherence.Request{Op: coherence.HostWhere, GVA: c}).Where; loc.Owner != 1 {
		t.Fatalf("after node 1 locked it, where says %+v", loc)
	}
}

// TestEngineOwnershipMovesThroughSpilledPages: three nodes on a line, each
// over a tiered store of 16 memory pages (frames poisoned when a page
// leaves them), replicas = 2 (backup copies spill too); 60 pages, every node maps them all, and 3,000 random
// fetch-adds and lock/unlock pairs from random nodes move ownership and
// content among the nodes while pages spill and come back. Every
// fetch-add returns the count the model holds: no transfer, reply or
// replica update read or wrote a frame its page had left.
func TestEngineOwnershipMovesThroughSpilledPages(t *testing.T) {
	const nodes, npages, ops = 3, 60, 3000
	g, err := topo.Generate("line", nodes, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var stores [nodes]*tier.Store
	var engs [nodes]*coherence.Engine
	var sinks [nodes]*sink
	mk := func(id noc.NodeID) node.Handler {
		s, err := tier.New(tier.Config{Memory: 16, Fast: tier.NewMemFile("fast.tier", 401*tier.SlotSize, uint64(id)), Poison: true})
		if err != nil {
			t.Fatal(err)
		}
		sk := &sink{done: map[uint64]coherence.Completion{}}
		e, err := coherence.New(coherence.Config{Self: id, Incarnation: uint64(id) + 100, Sink: sk, Seed: 7, Store: s, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		stores[id], engs[id], sinks[id] = s, e, sk
		return e
	}
	f, err := nodetest.New(g, nodetest.Config{Seed: 1, Handler: mk})
	if err != nil {
		t.Fatal(err)
	}
	if !f.RunUntil(10*time.Second, f.Converged) {
		t.Fatal("routing did not converge")
	}
	var next uint64
	ok := func(n int, r coherence.Request) coherence.Completion {
		t.Helper()
		next++
		r.ID = next
		engs[n].Submit(f.Now(), r, f.Cores[n])
		f.RunUntil(f.Now()+2*time.Second, func() bool { _, ok := sinks[n].done[r.ID]; return ok })
		c, ok := sinks[n].done[r.ID]
		if !ok || c.Err != nil {
			t.Fatalf("node %d %v %v: %v (completed %v)", n, r.Op, r.GVA, c.Err, ok)
		}
		return c
	}
	pages := make([]gva.GVA, npages)
	model := make([]uint64, npages)
	for i := range pages {
		pages[i] = ok(0, coherence.Request{Op: coherence.HostAlloc}).GVA
		for n := range nodes {
			ok(n, coherence.Request{Op: coherence.HostRef, GVA: pages[i]})
		}
	}
	rng := uint64(12345)
	rand := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	locks := 0
	for range ops {
		i, n := rand(npages), rand(nodes)
		w := pages[i].WithOffset(uint16(8 * (i % 8)))
		if rand(5) == 0 {
			ok(n, coherence.Request{Op: coherence.HostLock, GVA: pages[i], Holder: 1})
			ok(n, coherence.Request{Op: coherence.HostUnlock, GVA: pages[i], Holder: 1})
			locks++
			continue
		}
		if old := ok(n, coherence.Request{Op: coherence.HostFetchAdd, GVA: w, Operand: 1}).Value; old != model[i] {
			t.Fatalf("page %d: fetch-add at node %d saw %d, want %d", i, n, old, model[i])
		}
		model[i]++
	}
	var spills, returns uint64
	for _, s := range stores {
		st := s.Stats()
		spills, returns = spills+st.Spills, returns+st.Returns
	}
	if spills < 100 || returns < 100 {
		t.Fatalf("%d spills, %d returns: the pages did not move between tiers", spills, returns)
	}
	t.Logf("%d ops (%d lock/unlock pairs), %d spills, %d returns", ops, locks, spills, returns)
}

// TestEngineStopsWhenADiskCannotGiveAPageBack: a page on the fast tier
// that the disk cannot read back stops the engine with an error naming
// the page and the file (the agent stops on it, and a backup takes its
// pages over), without a panic, and nothing of the step leaves the node:
// the remote reader's ref gets no content, never a blank page.
func TestEngineStopsWhenADiskCannotGiveAPageBack(t *testing.T) {
	const n = 200
	x := newPair(t, n)
	pages := make([]gva.GVA, n)
	content := make([]byte, gva.PageSize)
	for i := range n {
		pages[i] = x.ok(0, coherence.Request{Op: coherence.HostAlloc}).GVA
		fill(content, i, 1)
		x.ok(0, coherence.Request{Op: coherence.HostStore, GVA: pages[i], Data: content})
	}
	spilled := -1
	for i := range n {
		if x.store.Speed(pages[i]) == gva.SpeedFastDisk {
			spilled = i
			break
		}
	}
	if spilled < 0 {
		t.Fatal("no page on the fast tier")
	}
	x.fast.FailReads = tier.ErrInjected
	x.next++
	id := x.next
	x.eng[1].Submit(x.f.Now(), coherence.Request{ID: id, Op: coherence.HostRef, GVA: pages[spilled]}, x.f.Cores[1])
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return x.eng[0].StopErr() != nil })
	err := x.eng[0].StopErr()
	if err == nil || !errors.Is(err, tier.ErrInjected) || !strings.Contains(err.Error(), "fast.tier") || !strings.Contains(err.Error(), pages[spilled].Key().String()) {
		t.Fatalf("engine's stop error %v, want one naming the page, the file and the disk's error", err)
	}
	x.f.Run(50 * time.Millisecond)
	if c, ok := x.sinks[1].done[id]; ok && c.Err == nil {
		t.Fatal("the remote ref was answered by a node whose disk failed")
	}
}
