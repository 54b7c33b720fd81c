package topo

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/aitherion/dpu/noc"
)

// checkGroup checks the group axioms on every element (identity, inverse)
// and on random triples (associativity), and the involution list.
func checkGroup(t *testing.T, g group, order int) {
	t.Helper()
	if g.order() != order {
		t.Fatalf("%v: order %d, want %d", g, g.order(), order)
	}
	n := int32(order)
	var invols []int32
	for x := int32(0); x < n; x++ {
		if g.mul(0, x) != x || g.mul(x, 0) != x || g.mul(x, g.inv(x)) != 0 || g.mul(g.inv(x), x) != 0 {
			t.Fatalf("%v: identity or inverse fails at %d", g, x)
		}
		if x != 0 && g.mul(x, x) == 0 {
			invols = append(invols, x)
		}
	}
	if !slices.Equal(invols, g.involutions()) {
		t.Fatalf("%v: involutions %v, want %v", g, g.involutions(), invols)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 2000 {
		x, y, z := int32(rng.IntN(order)), int32(rng.IntN(order)), int32(rng.IntN(order))
		if g.mul(g.mul(x, y), z) != g.mul(x, g.mul(y, z)) {
			t.Fatalf("%v: (%d·%d)·%d != %d·(%d·%d)", g, x, y, z, x, y, z)
		}
	}
}

func TestGroups(t *testing.T) {
	checkGroup(t, newMetacyclic(7, 1, 1), 7)
	checkGroup(t, newMetacyclic(8, 4, 3), 32)
	checkGroup(t, newMetacyclic(16, 4, 5), 64)
	for _, qr := range metacyclicGroups(24) {
		checkGroup(t, newMetacyclic(24/qr[0], qr[0], qr[1]), 24)
	}
	for _, lg := range linearGroups[:4] {
		checkGroup(t, linearGroup(lg.p, lg.projective), lg.order)
	}
	// Z_8 ⋊_3 Z_2 is not abelian
	g := newMetacyclic(8, 2, 3)
	if g.mul(1, 2) == g.mul(2, 1) && g.mul(1, 3) == g.mul(3, 1) {
		t.Fatal("Z8⋊Z2(r=3) commutes")
	}
}

// TestLiftEval checks the lift's symmetric evaluation (b searches) against
// a breadth-first search from every node, and the lift's simplicity.
func TestLiftEval(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tried := 0
	for _, g := range []group{linearGroup(5, true), newMetacyclic(8, 4, 5), newMetacyclic(9, 1, 1), linearGroup(5, false)} {
		for _, b := range []int{1, 2, 3} {
			for _, k := range []int{3, 4, 5} {
				l := randomLift(g, b, k, rng)
				if l == nil {
					continue
				}
				tried++
				d, sum, exc, ok := l.eval(2)
				gr, err := fromEdges("lift", l.n, l.edgeList())
				if err != nil {
					t.Fatalf("%v b=%d k=%d: %v", g, b, k, err)
				}
				m := gr.Metrics()
				checkWiring(t, gr, k)
				for v := 0; v < l.n; v++ {
					if gr.Degree(noc.NodeID(v)) != k {
						t.Fatalf("%v b=%d k=%d: node %d has degree %d", g, b, k, v, gr.Degree(noc.NodeID(v)))
					}
				}
				if ok != m.Connected {
					t.Fatalf("%v b=%d k=%d: connected %v, graph %+v", g, b, k, ok, m)
				}
				if !ok {
					continue
				}
				avg := float64(sum) / float64(b*(l.n-1))
				if d != m.Diameter || math.Abs(avg-m.AvgHops) > 1e-9 {
					t.Fatalf("%v b=%d k=%d: D=%d avg=%v, graph %+v", g, b, k, d, avg, m)
				}
				var wantExc int64
				for s := 0; s < l.n; s += l.m {
					for _, x := range gr.Distances(noc.NodeID(s)) {
						wantExc += int64(max(x-2, 0))
					}
				}
				if exc != wantExc {
					t.Fatalf("%v b=%d k=%d: excess %d, want %d", g, b, k, exc, wantExc)
				}
			}
		}
	}
	if tried < 20 {
		t.Fatalf("only %d lifts drawn", tried)
	}
}

func TestTrim(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	l := randomLift(newMetacyclic(9, 8, 8), 1, 5, rng) // 72 nodes, degree 5
	if l == nil {
		t.Fatal("no lift")
	}
	edges := trim(72, 64, l.edgeList(), rng)
	g, err := fromEdges("trimmed", 64, edges)
	if err != nil {
		t.Fatal(err)
	}
	checkWiring(t, g, 5)
	if m := g.Metrics(); !m.Connected || m.Nodes != 64 || m.MaxDegree != 5 {
		t.Fatalf("trimmed: %+v", m)
	}
	// ports freed by the cut are rewired: at most one free port per
	// removed node's neighbourhood is left (degree 5 is odd)
	free := 0
	for v := 0; v < 64; v++ {
		free += 5 - g.Degree(noc.NodeID(v))
	}
	if free > 8 {
		t.Fatalf("%d free ports after cutting 8 nodes", free)
	}
	if got := trim(64, 64, edges, rng); !slices.Equal(got, edges) {
		t.Fatal("trim to the same order changed the graph")
	}
}
