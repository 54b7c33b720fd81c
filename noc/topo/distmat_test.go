package topo

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDistMatrixSwaps checks the incremental all-pairs distances against
// a full recomputation after every swap, kept or undone, including swaps
// that disconnect the graph.
func TestDistMatrixSwaps(t *testing.T) {
	for _, c := range [][2]int{{40, 3}, {64, 4}, {90, 5}, {30, 3}, {30, 2}} {
		n, k := c[0], c[1]
		rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
		var edges [][2]int32
		ok := true
		if k == 2 { // a ring: its swaps often cut it in two
			for v := range n {
				edges = append(edges, [2]int32{int32(min(v, (v+1)%n)), int32(max(v, (v+1)%n))})
			}
		} else {
			edges, ok = randomRegular(n, k, rng)
		}
		if !ok {
			t.Fatalf("%v: no random regular graph", c)
		}
		adj := adjacencyOfEdges(n, edges)
		m, ok := newDistMatrix(adj)
		if !ok {
			t.Fatalf("%v: disconnected start", c)
		}
		cuts := 0
		for i := 0; i < 400; i++ {
			s, ok := swapEdges(adj, edges, rng)
			if !ok {
				continue
			}
			conn := m.swapped(adj, s)
			want, wantOK := newDistMatrix(adj)
			if conn != wantOK {
				t.Fatalf("%v swap %d: connected %v, want %v", c, i, conn, wantOK)
			}
			if conn {
				checkDistMatrix(t, m, want)
			} else {
				cuts++
			}
			if !conn || rng.IntN(2) == 0 {
				m.undo()
				s.undo(adj, edges)
				want, _ = newDistMatrix(adj)
				checkDistMatrix(t, m, want)
			}
		}
		if k == 2 && cuts == 0 {
			t.Errorf("%v: no swap disconnected the ring", c)
		}
	}
}

func checkDistMatrix(t *testing.T, got, want *distMatrix) {
	t.Helper()
	if !slices.Equal(got.dist, want.dist) {
		for i := range got.dist {
			if got.dist[i] != want.dist[i] {
				t.Fatalf("d(%d,%d) = %d, want %d", i/got.n, i%got.n, got.dist[i], want.dist[i])
			}
		}
	}
	if got.sum != want.sum || !slices.Equal(got.hist, want.hist) {
		t.Fatalf("sum %d hist %v, want %d %v", got.sum, got.hist[:8], want.sum, want.hist[:8])
	}
}
