package coherence

import (
	"math"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %.12g, want %.12g", what, got, want)
	}
}

// TestTraitsHandComputed checks the figures of docs/placement.md against
// values computed by hand, half-life 1 s.
func TestTraitsHandComputed(t *testing.T) {
	const h, win = time.Second, 10 * time.Second
	var tr traits
	tr.access(0, h, 2, true)           // writes 1, fresh 1
	tr.access(time.Second, h, 2, true) // ×½ + 1: writes 1.5, fresh 0.5
	tr.access(time.Second, h, 3, false)
	// At 2 s: writes 0.75, reads 0.5, fresh (0.5 + 1) × ½ = 0.75.
	p := tr.figures(2*time.Second, h, win)
	near(t, "writes", p.Writes, 0.75)
	near(t, "reads", p.Reads, 0.5)
	near(t, "heat", p.Heat, 1.25)
	near(t, "temperature", p.Temperature, 1.25*math.Ln2)
	near(t, "write share", p.WriteShare, 0.6)
	near(t, "churn", p.Churn, 0.6)
	// (1 − 2^−2) × (1 − 0.6) / (1 + 0)
	near(t, "stability", p.Stability, 0.75*0.4)
	if p.Age != 2*time.Second {
		t.Errorf("age %v", p.Age)
	}
	if len(p.Accessors) != 2 || p.Accessors[0].Node != 2 || p.Accessors[1].Node != 3 {
		t.Fatalf("accessors %+v", p.Accessors)
	}
	near(t, "node 2 writes", p.Accessors[0].Writes, 0.75)
	near(t, "node 3 reads", p.Accessors[1].Reads, 0.5)

	tr.move(2*time.Second, h, MoveOwner)
	p = tr.figures(3*time.Second, h, win)
	near(t, "mobility", p.Mobility, 0.5)
	// heat 0.625, fresh 0.375: churn 0.6; age 3 s: (1 − ⅛) × 0.4 / 1.5
	near(t, "stability after a move", p.Stability, 0.875*0.4/1.5)
	if p.Moves != 1 || p.MovesInWindow != 1 || len(p.LastMoves) != 1 || p.LastMoves[0] != (Move{At: 2 * time.Second, Kind: MoveOwner}) {
		t.Errorf("moves %d, in window %d, last %+v", p.Moves, p.MovesInWindow, p.LastMoves)
	}
	// Figures do not change the record.
	if q := tr.figures(3*time.Second, h, win); q.Heat != p.Heat || tr.lastAt != 2*time.Second {
		t.Errorf("figures changed the record: heat %v then %v, last at %v", p.Heat, q.Heat, tr.lastAt)
	}
	// The window counts only recent moves; the ring keeps the last four.
	for i := range 5 {
		tr.move(time.Duration(10+i)*time.Second, h, MoveTier)
	}
	p = tr.figures(22*time.Second, h, win) // 13 s and 14 s are within 10 s
	if p.Moves != 6 || len(p.LastMoves) != traitMoves || p.LastMoves[0].At != 11*time.Second || p.MovesInWindow != 2 {
		t.Errorf("after 6 moves: %d, last %+v, in window %d", p.Moves, p.LastMoves, p.MovesInWindow)
	}
}

// TestTraitsSlotReplacement: a fifth accessor takes the slot of the least
// used one, and counts as fresh.
func TestTraitsSlotReplacement(t *testing.T) {
	var tr traits
	for node, n := range map[noc.NodeID]int{1: 3, 2: 2, 3: 1, 4: 2} {
		for range n {
			tr.access(0, time.Second, node, false)
		}
	}
	tr.access(0, time.Second, 5, true)
	p := tr.figures(0, time.Second, time.Second)
	seen := map[noc.NodeID]bool{}
	for _, a := range p.Accessors {
		seen[a.Node] = true
	}
	if len(p.Accessors) != traitSlots || seen[3] || !seen[5] {
		t.Fatalf("accessors %+v: want 1, 2, 4, 5", p.Accessors)
	}
	near(t, "heat", p.Heat, 9)
	near(t, "churn", p.Churn, 5.0/9)
}

// TestTraitsRescale: a record far past its base is rescaled, and its
// figures stay exact.
func TestTraitsRescale(t *testing.T) {
	const h = time.Millisecond
	var tr traits
	tr.access(0, h, 1, true)
	tr.access(100*h, h, 1, true) // past rescaleAfter half-lives: rebased at 100 ms
	if tr.base != 100*h {
		t.Fatalf("base %v", tr.base)
	}
	p := tr.figures(101*h, h, h)
	near(t, "writes", p.Writes, (math.Exp2(-100)+1)/2)
}

func TestTraitsNoAllocation(t *testing.T) {
	var tr traits
	now := time.Duration(0)
	if n := testing.AllocsPerRun(100, func() {
		now += time.Microsecond
		tr.access(now, time.Millisecond, noc.NodeID(now%7), now%3 == 0)
	}); n != 0 {
		t.Fatalf("%v allocations per access", n)
	}
}

func placementTune(mode Placement) func(*Config) {
	return func(c *Config) {
		c.Placement = PlacementConfig{Mode: mode, HalfLife: time.Millisecond, Window: 20 * time.Millisecond, MaxMoves: 2}
	}
}

// TestPlacementMovesToTheWriter: node 2 of a line writes a page node 0
// owns; with placement auto the page's ownership moves to node 2 by an
// ordinary swap, and its writes become local. With placement off it stays.
func TestPlacementMovesToTheWriter(t *testing.T) {
	for _, mode := range []Placement{PlacementOff, PlacementAuto} {
		t.Run(mode.String(), func(t *testing.T) {
			x := newFab(t, lineGraph(t, 3), placementTune(mode))
			p := x.alloc(0)
			x.ok(2, Request{Op: HostRef, GVA: p})
			for i := range 40 {
				x.ok(2, Request{Op: HostFetchAdd, GVA: p.WithOffset(8), Operand: 1})
				if i%4 == 0 {
					x.f.Run(100 * time.Microsecond)
				}
			}
			x.settle()
			info, ok := x.eng[2].PageInfo(x.f.Now(), p)
			if !ok {
				t.Fatal("node 2 holds no record of the page")
			}
			s0, s2 := x.eng[0].Stats(), x.eng[2].Stats()
			if mode == PlacementOff {
				if info.Owned || s2.PlaceMoves != 0 || s0.PlaceOffers != 0 {
					t.Fatalf("placement off: owned at node 2 %v, moves %d, offers %d", info.Owned, s2.PlaceMoves, s0.PlaceOffers)
				}
				return
			}
			if !info.Owned || s2.PlaceMoves != 1 || s2.SwapsCompleted != 1 {
				t.Fatalf("placement auto: owned at node 2 %v, placement moves %d, swaps %d (offers %d, refused %d)",
					info.Owned, s2.PlaceMoves, s2.SwapsCompleted, s0.PlaceOffers, s0.PlaceRefused)
			}
			if s2.WritesLocal == 0 {
				t.Fatal("no local write at the new owner")
			}
			if info.Traits.Moves == 0 {
				t.Fatal("the move is not in the new owner's traits")
			}
			// The count is exact: 40 adds.
			x.ok(0, Request{Op: HostRef, GVA: p})
			got := x.ok(0, Request{Op: HostLoad, GVA: p.WithOffset(8), Len: 8})
			if v := le64(got.Data); v != 40 {
				t.Fatalf("word %d after 40 adds", v)
			}
		})
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestPlacementReadMostlyStays: a page mostly read at its owner and
// written now and then by another node does not move.
func TestPlacementReadMostlyStays(t *testing.T) {
	x := newFab(t, lineGraph(t, 2), placementTune(PlacementAuto))
	p := x.alloc(0)
	x.ok(0, Request{Op: HostRef, GVA: p})
	x.ok(1, Request{Op: HostRef, GVA: p})
	for i := range 200 {
		x.ok(0, Request{Op: HostLoad, GVA: p, Len: 8})
		if i%10 == 0 {
			x.ok(1, Request{Op: HostStore, GVA: p.WithOffset(100), Data: []byte{byte(i)}})
		}
	}
	x.settle()
	if s := x.eng[0].Stats(); s.PlaceOffers != 0 || x.eng[1].Stats().PlaceMoves != 0 {
		t.Fatalf("a read-mostly page was offered %d times", s.PlaceOffers)
	}
	if info, _ := x.eng[0].PageInfo(x.f.Now(), p); !info.Owned || info.Traits.WriteShare > 0.1 {
		t.Fatalf("owned at 0: %v, write share %v", info.Owned, info.Traits.WriteShare)
	}
}

// TestPlacementRefusesAStaleOffer: a placement acquire the rule no longer
// names is refused at the grant (the page stays), and the acquirer does
// not retry it.
func TestPlacementRefusesAStaleOffer(t *testing.T) {
	x := newFab(t, lineGraph(t, 2), placementTune(PlacementAuto))
	p := x.alloc(0)
	x.ok(1, Request{Op: HostRef, GVA: p})
	// Node 1 never wrote: an offer it acts on is not the rule's.
	f := newFrame(noc.ClassControl, OpPlace, 0, 0, 1, 0, p.Key(), 0, nil)
	if err := x.f.Cores[0].SendNode(&f); err != nil {
		t.Fatal(err)
	}
	x.settle()
	s0, s1 := x.eng[0].Stats(), x.eng[1].Stats()
	if s1.PlaceAcquires != 1 || s0.PlaceRefused != 1 || s1.PlaceMoves != 0 {
		t.Fatalf("acquires %d, refused %d, moves %d", s1.PlaceAcquires, s0.PlaceRefused, s1.PlaceMoves)
	}
	if s1.Acquires != 1 {
		t.Fatalf("the refused placement acquire was sent %d times", s1.Acquires)
	}
	if info, _ := x.eng[0].PageInfo(x.f.Now(), p); !info.Owned {
		t.Fatal("the page left its owner")
	}
	if x.eng[1].InFlight() != 0 {
		t.Fatal("the placement acquire is still in flight")
	}
}

// BenchmarkTraitAccess is the accounting of one access alone: the decay
// to a new time, the accessor's slot, the counts.
func BenchmarkTraitAccess(b *testing.B) {
	var tr traits
	now := time.Duration(0)
	for i := range b.N {
		now += time.Microsecond
		tr.access(now, time.Second, noc.NodeID(i&3), i&1 == 0)
	}
}

// TestPlacementDefaults: a zero PlacementConfig is the documented policy
// (placement off, HalfLife DefaultTraitHalfLife, Window 10 × HalfLife,
// MaxMoves 2, Dominance 0.6, Hysteresis 2, MinWrites 8, ReadMostly 0.9),
// what a page's PageInfo reports; a value set is kept; a share past 1 is
// refused.
func TestPlacementDefaults(t *testing.T) {
	got, err := PlacementConfig{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := PlacementConfig{Mode: PlacementOff, HalfLife: DefaultTraitHalfLife, Window: 10 * DefaultTraitHalfLife, MaxMoves: 2,
		Dominance: 0.6, Hysteresis: 2, MinWrites: 8, ReadMostly: 0.9}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	set := PlacementConfig{Mode: PlacementAuto, HalfLife: 3 * time.Millisecond, Window: 7 * time.Millisecond, MaxMoves: 5,
		Dominance: 0.7, Hysteresis: 3, MinWrites: 4, ReadMostly: 0.8}
	if got, err := set.withDefaults(); err != nil || got != set {
		t.Fatalf("set values became %+v (%v)", got, err)
	}
	if got, err := (PlacementConfig{HalfLife: 3 * time.Millisecond}).withDefaults(); err != nil || got.Window != 30*time.Millisecond {
		t.Fatalf("Window of HalfLife 3ms: %v (%v), want 30ms", got.Window, err)
	}
	for _, p := range []PlacementConfig{{Dominance: 1.1}, {ReadMostly: 1.1}} {
		if _, err := p.withDefaults(); err == nil {
			t.Fatalf("%+v accepted", p)
		}
	}
	x := newFab(t, lineGraph(t, 2), nil)
	p := x.alloc(0)
	for range 4 {
		x.ok(1, Request{Op: HostFetchAdd, GVA: p.WithOffset(8), Operand: 1})
	}
	info, ok := x.eng[0].PageInfo(x.f.Now(), p)
	if !ok {
		t.Fatal("the owner holds no record of its page")
	}
	if info.Placement != PlacementOff || info.HalfLife != DefaultTraitHalfLife || info.Window != 10*DefaultTraitHalfLife || info.MaxMoves != 2 {
		t.Fatalf("PageInfo's policy %v, half-life %v, window %v, %d moves", info.Placement, info.HalfLife, info.Window, info.MaxMoves)
	}
	if h := info.Traits.Heat; !(h > 0 && h <= 4) {
		t.Fatalf("heat %v after 4 writes within a half-life", h)
	}
}
