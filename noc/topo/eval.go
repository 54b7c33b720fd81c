package topo

import "math/bits"

// hopEvaluator computes the diameter and total hop count of a graph with a
// bit-parallel breadth-first search from all nodes at once: row v of the
// reach matrix holds the set of nodes within d hops of v, and one step ORs
// every neighbour's row into it. A step costs (N + 2L)·⌈N/64⌉ word
// operations, so a whole evaluation costs that times the diameter. It
// allocates only when created.
type hopEvaluator struct {
	n, words  int
	cur, next []uint64
	full      int64 // n·n: every ordered pair (including v to itself)
}

func newHopEvaluator(n int) *hopEvaluator {
	w := (n + 63) / 64
	return &hopEvaluator{n: n, words: w, cur: make([]uint64, n*w), next: make([]uint64, n*w), full: int64(n) * int64(n)}
}

// cost estimates the word operations of one evaluation of a graph with m
// edges and diameter d.
func (e *hopEvaluator) cost(m, d int) int64 {
	return int64(e.n+2*m) * int64(e.words) * int64(d+1)
}

// eval returns the diameter and the sum of hop counts over ordered pairs of
// adj. ok is false when the graph is disconnected or its diameter exceeds
// limit (the search stops there).
func (e *hopEvaluator) eval(adj adjacency, limit int) (diam int, sum int64, ok bool) {
	diam, sum, _, ok = e.evalFar(adj, limit)
	return diam, sum, ok
}

// evalFar is eval that also returns far, the number of ordered pairs at
// the diameter's distance.
func (e *hopEvaluator) evalFar(adj adjacency, limit int) (diam int, sum, far int64, ok bool) {
	w := e.words
	clear(e.cur)
	for v := 0; v < e.n; v++ {
		e.cur[v*w+v/64] = 1 << (v % 64)
	}
	reached := int64(e.n)
	if reached == e.full {
		return 0, 0, 0, true
	}
	for d := 1; d <= limit; d++ {
		var count int64
		for v := 0; v < e.n; v++ {
			row := e.next[v*w : v*w+w]
			copy(row, e.cur[v*w:v*w+w])
			for _, u := range adj[v] {
				src := e.cur[int(u)*w : int(u)*w+w]
				for i := range row {
					row[i] |= src[i]
				}
			}
			for _, x := range row {
				count += int64(bits.OnesCount64(x))
			}
		}
		if count == reached {
			return 0, 0, 0, false // no progress: disconnected
		}
		sum += int64(d) * (count - reached)
		far := count - reached
		reached = count
		e.cur, e.next = e.next, e.cur
		if reached == e.full {
			return d, sum, far, true
		}
	}
	return 0, 0, 0, false
}
