package tier_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
)

func key(i int) gva.GVA { return gva.New(1, gva.PageNumber(i+1), 0, 0) }

// fill writes a page's content: its key and generation, then a pattern
// derived from both.
func fill(p []byte, i int, gen uint64) {
	binary.LittleEndian.PutUint64(p, uint64(i))
	binary.LittleEndian.PutUint64(p[8:], gen)
	x := uint64(i)*0x9e3779b97f4a7c15 ^ gen
	for o := 16; o+8 <= len(p); o += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[o:], x)
	}
}

// gen checks that p is a page fill wrote for i and returns its generation.
func gen(p []byte, i int) (uint64, error) {
	g := binary.LittleEndian.Uint64(p[8:])
	want := make([]byte, len(p))
	fill(want, i, g)
	if string(want) != string(p) {
		return 0, fmt.Errorf("page %d: content is not page %d at gen %d (first bytes % x)", i, i, g, p[:16])
	}
	return g, nil
}

// holder is the engine's side of the slice rule: it keeps the slices it
// was handed and forgets the ones Balance lists.
type holder struct {
	s     *tier.Store
	held  map[gva.GVA][]byte
	drops []gva.GVA
}

func newHolder(s *tier.Store) *holder { return &holder{s: s, held: map[gva.GVA][]byte{}} }

func (h *holder) page(t testing.TB, k gva.GVA) []byte {
	if p := h.held[k]; p != nil {
		return p
	}
	p, ok := h.s.Lookup(k)
	if !ok {
		t.Fatalf("lookup %v: not found", k)
	}
	h.held[k] = p
	return p
}

func (h *holder) alloc(t testing.TB, k gva.GVA) []byte {
	p, err := h.s.Alloc(k, false)
	if err != nil {
		t.Fatalf("alloc %v: %v", k, err)
	}
	h.held[k] = p
	return p
}

// endStep is the engine's end of step.
func (h *holder) endStep() {
	h.drops = h.s.Balance(h.drops[:0])
	for _, k := range h.drops {
		delete(h.held, k)
	}
}

func newStore(t testing.TB, mem int, fastSlots, slowSlots int) (*tier.Store, *tier.MemFile, *tier.MemFile) {
	t.Helper()
	cfg := tier.Config{Memory: mem, Poison: true}
	var fast, slow *tier.MemFile
	if fastSlots > 0 {
		fast = tier.NewMemFile("fast.tier", int64(fastSlots+1)*tier.SlotSize, 1)
		cfg.Fast = fast
	}
	if slowSlots > 0 {
		slow = tier.NewMemFile("slow.tier", int64(slowSlots+1)*tier.SlotSize, 2)
		cfg.Slow = slow
	}
	s, err := tier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, fast, slow
}

// A memory tier of 64 pages and a fast tier hold 10,000 written pages,
// every one read back exact; memory never holds more than its 64 pages
// (plus the page a step brings in) after a step.
func TestStoreHoldsTenThousandPages(t *testing.T) {
	const n = 10_000
	s, _, _ := newStore(t, 64, n, 0)
	if s.Cap() != 64+n {
		t.Fatalf("Cap %d, want %d (memory + fast)", s.Cap(), 64+n)
	}
	h := newHolder(s)
	for i := range n {
		fill(h.alloc(t, key(i)), i, 1)
		h.endStep()
		if used, _ := s.Use(); used[0] > 64 {
			t.Fatalf("after page %d memory holds %d pages, over its 64", i, used[0])
		}
	}
	for i := n; i < n+64; i++ {
		fill(h.alloc(t, key(i)), i, 1)
		h.endStep()
	}
	if _, err := s.Alloc(key(n+64), false); !errors.Is(err, coherence.ErrNoSpace) {
		t.Fatalf("alloc past Cap: %v, want ErrNoSpace", err)
	}
	for i := range n {
		g, err := gen(h.page(t, key(i)), i)
		if err != nil || g != 1 {
			t.Fatalf("read back: gen %d, %v", g, err)
		}
		h.endStep()
	}
	st := s.Stats()
	// At Cap the fast tier is full: spills are refused for want of a
	// slot (and only for that).
	if st.Spills < n-64 || st.Returns < n-64 || st.SpillRefused > 0 && !errors.Is(st.LastErr, tier.ErrFull) {
		t.Fatalf("stats %+v: want about %d spills and returns, refusals only for a full tier", st, n)
	}
}

// A page spilled keeps its content through writes before and after, and
// a return costs one read of the tier file.
func TestSpilledPageComesBackInOneRead(t *testing.T) {
	s, fast, _ := newStore(t, 20, 100, 0)
	h := newHolder(s)
	for i := range 40 {
		fill(h.alloc(t, key(i)), i, 1)
		h.endStep()
	}
	spilled := -1
	for i := range 40 {
		if s.Speed(key(i)) == gva.SpeedFastDisk {
			spilled = i
			break
		}
	}
	if spilled < 0 {
		t.Fatal("no page spilled with 40 pages in a memory tier of 20")
	}
	before := fast.Reads
	p := h.page(t, key(spilled))
	if got := fast.Reads - before; got != 1 {
		t.Fatalf("return of a spilled page: %d reads, want 1", got)
	}
	if s.Speed(key(spilled)) != gva.SpeedMemory {
		t.Fatalf("after its return the page is on %v", s.Speed(key(spilled)))
	}
	if _, err := gen(p, spilled); err != nil {
		t.Fatal(err)
	}
	fill(p, spilled, 2)
	h.endStep()
	for i := range 40 {
		want := uint64(1)
		if i == spilled {
			want = 2
		}
		if g, err := gen(h.page(t, key(i)), i); err != nil || g != want {
			t.Fatalf("page %d: gen %d, %v; want %d", i, g, err, want)
		}
		h.endStep()
	}
}

// Spills start above 85% of memory and stop at 70%; a looked-up page is
// kept over one that was not (the clock).
func TestSpillThresholdsAndColdness(t *testing.T) {
	s, _, _ := newStore(t, 100, 200, 0)
	h := newHolder(s)
	for i := range 85 {
		fill(h.alloc(t, key(i)), i, 1)
		h.endStep()
	}
	if st := s.Stats(); st.Spills != 0 {
		t.Fatalf("%d spills at 85%% of memory, want none", st.Spills)
	}
	// Everything was looked up once (alloc); the first pass only clears.
	fill(h.alloc(t, key(85)), 85, 1)
	h.endStep()
	used, _ := s.Use()
	if used[0] != 70 {
		t.Fatalf("memory holds %d pages after passing 85%%, want 70", used[0])
	}
	// Pages 0-9 are hot: looked up after each step; the rest are not.
	for round := range 60 {
		for i := range 10 {
			h.page(t, key(i))
		}
		fill(h.alloc(t, key(86+round)), 86+round, 1)
		h.endStep()
	}
	for i := range 10 {
		if sp := s.Speed(key(i)); sp != gva.SpeedMemory {
			t.Fatalf("hot page %d on %v", i, sp)
		}
	}
}

// The slice rule, asserted: a slice held past the Balance that listed its
// key reads poison, never another page's content.
func TestSliceRulePoisonsLeftFrames(t *testing.T) {
	s, _, _ := newStore(t, 10, 20, 0)
	var held [][]byte
	var drops []gva.GVA
	for i := range 10 {
		p, err := s.Alloc(key(i), false)
		if err != nil {
			t.Fatal(err)
		}
		fill(p, i, 1)
		held = append(held, p)
	}
	drops = s.Balance(drops[:0]) // clears the clock bits
	drops = s.Balance(drops[:0]) // spills
	n := 0
	for i, p := range held {
		if s.Speed(key(i)) == gva.SpeedMemory {
			continue
		}
		n++
		for _, b := range p {
			if b != 0xDB {
				t.Fatalf("page %d spilled, its old slice reads %#x, want poison", i, b)
			}
		}
	}
	if n == 0 {
		t.Fatalf("nothing spilled (drops %v)", drops)
	}
}

// Fast spills to slow by the same thresholds; pages on the slow tier come
// back exact. The slow tier adds no capacity (the capacity rule counts
// memory and fast disk): it keeps the fast tier's slots free.
func TestFastDemotesToSlow(t *testing.T) {
	s, _, _ := newStore(t, 20, 40, 200)
	if s.Cap() != 60 {
		t.Fatalf("Cap %d, want 60", s.Cap())
	}
	h := newHolder(s)
	for i := range 60 {
		fill(h.alloc(t, key(i)), i, 1)
		h.endStep()
	}
	used, capacity := s.Use()
	if used[1] > capacity[1]*85/100 || used[2] == 0 {
		t.Fatalf("use %v of %v: fast over 85%% or nothing on slow", used, capacity)
	}
	slow := 0
	for i := range 60 {
		if s.Speed(key(i)) == gva.SpeedSlowDisk {
			slow++
		}
		if g, err := gen(h.page(t, key(i)), i); err != nil || g != 1 {
			t.Fatalf("page %d: gen %d, %v", i, g, err)
		}
		h.endStep()
	}
	if slow == 0 || s.Stats().Demotions == 0 {
		t.Fatal("no page was on the slow tier")
	}
}

// A full or failing disk refuses spills: no page is lost, memory stays
// over the threshold, the refusal is counted; allocation stops at memory's
// capacity; once the disk works again spills resume.
func TestFailingDiskRefusesSpills(t *testing.T) {
	for _, fail := range []string{"write", "sync"} {
		t.Run(fail, func(t *testing.T) {
			s, fast, _ := newStore(t, 20, 100, 0)
			h := newHolder(s)
			for i := range 15 {
				fill(h.alloc(t, key(i)), i, 1)
				h.endStep()
			}
			if fail == "write" {
				fast.FailWrites = fmt.Errorf("tier test: %w", syscall.ENOSPC)
			} else {
				fast.FailSyncs = fmt.Errorf("tier test: %w", syscall.EIO)
			}
			i := 15
			for ; i < 40; i++ {
				p, err := s.Alloc(key(i), false)
				if err != nil {
					if !errors.Is(err, coherence.ErrNoSpace) {
						t.Fatalf("alloc %d: %v", i, err)
					}
					break
				}
				fill(p, i, 1)
				h.held[key(i)] = p
				h.endStep()
			}
			st := s.Stats()
			if i != 20 || st.SpillRefused == 0 || st.LastErr == nil || st.Spills != 0 {
				t.Fatalf("allocs stopped at %d (want 20, memory's capacity), stats %+v", i, st)
			}
			for j := range i {
				if g, err := gen(h.page(t, key(j)), j); err != nil || g != 1 {
					t.Fatalf("page %d: gen %d, %v", j, g, err)
				}
			}
			fast.FailWrites, fast.FailSyncs = nil, nil
			h.endStep()
			h.endStep()
			if s.Stats().Spills == 0 {
				t.Fatal("no spill once the disk works again")
			}
			if _, err := s.Alloc(key(100), false); err != nil {
				t.Fatalf("alloc once the disk works again: %v", err)
			}
			for j := range i {
				if g, err := gen(h.page(t, key(j)), j); err != nil || g != 1 {
					t.Fatalf("page %d: gen %d, %v", j, g, err)
				}
				h.endStep()
			}
		})
	}
}

// Spilled pages survive a reopen of the files (a restart), and a power cut
// at any sync of a spill loses none whose spill finished: every page on
// disk when the crash came is found, exact; a page found that was in
// memory at the crash holds a state it had (a spill the crash cut, or one
// whose return's freeing of the slot had not reached the disk).
func TestCrashMidSpillLosesNothingSpilled(t *testing.T) {
	for seed := range uint64(200) {
		fast := tier.NewMemFile("fast.tier", 81*tier.SlotSize, seed)
		slow := tier.NewMemFile("slow.tier", 121*tier.SlotSize, seed+1000)
		s, err := tier.New(tier.Config{Memory: 16, Fast: fast, Slow: slow, Poison: true})
		if err != nil {
			t.Fatal(err)
		}
		h := newHolder(s)
		gens := map[int]uint64{}
		fast.CrashAtSync = 1 + int(seed%40)
		slow.CrashAtSync = 1 + int(seed/7%30)
		crashed := false
		for step := 0; step < 400 && !crashed; step++ {
			i := int((seed*7919 + uint64(step)*104729) % 90)
			if _, ok := gens[i]; !ok {
				h.alloc(t, key(i))
			}
			gens[i]++
			fill(h.page(t, key(i)), i, gens[i])
			h.endStep()
			crashed = fast.CrashAtSync == 0 || slow.CrashAtSync == 0
		}
		onDisk := map[int]bool{}
		for j := range gens {
			if s.Speed(key(j)) != gva.SpeedMemory {
				onDisk[j] = true
			}
		}
		fast.Crash()
		slow.Crash()
		fast.CrashAtSync, slow.CrashAtSync = 0, 0
		r, err := tier.New(tier.Config{Memory: 16, Fast: fast, Slow: slow})
		if err != nil {
			t.Fatalf("seed %d: reopen: %v", seed, err)
		}
		found := map[int]bool{}
		for _, k := range r.Recovered() {
			j := int(k.Page()) - 1
			found[j] = true
			p, ok := r.Lookup(k)
			if !ok {
				t.Fatalf("seed %d: recovered %v does not read", seed, k)
			}
			g, err := gen(p, j)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if onDisk[j] && g != gens[j] {
				t.Fatalf("seed %d: page %d was on disk at gen %d, reads gen %d", seed, j, gens[j], g)
			}
			if g < 1 || g > gens[j] {
				t.Fatalf("seed %d: page %d reads gen %d, a state it never had (newest %d)", seed, j, g, gens[j])
			}
		}
		for j := range onDisk {
			if !found[j] {
				t.Fatalf("seed %d: page %d was on disk at the crash and is lost", seed, j)
			}
		}
	}
}
