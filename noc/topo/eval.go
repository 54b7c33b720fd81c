package topo

import "math/bits"

// hopEvaluator computes the diameter and total hop count of a graph with a
// bit-parallel breadth-first search from all nodes at once: row v of the
// reach matrix holds the set of nodes within d hops of v, and one step ORs
// every neighbour's row into it. A step costs at most (N + 2L)·⌈N/64⌉
// word operations (rows already full are not stepped again), so a whole
// evaluation costs at most that times the diameter; work counts them. It
// allocates only while its scratch lists grow.
type hopEvaluator struct {
	n, words  int
	cur, next []uint64
	full      int64 // n·n: every ordered pair (including v to itself)
	// pending, still and done are evalFar's lists of rows
	pending, still, done []int32
	// work counts the word operations of every evaluation so far.
	work int64
}

func newHopEvaluator(n int) *hopEvaluator {
	w := (n + 63) / 64
	return &hopEvaluator{n: n, words: w, cur: make([]uint64, n*w), next: make([]uint64, n*w), full: int64(n) * int64(n)}
}

// eval returns the diameter and the sum of hop counts over ordered pairs of
// adj. ok is false when the graph is disconnected or its diameter exceeds
// limit (the search stops there).
func (e *hopEvaluator) eval(adj adjacency, limit int) (diam int, sum int64, ok bool) {
	diam, sum, _, ok = e.evalFar(adj, limit)
	return diam, sum, ok
}

// evalFar is eval that also returns far, the number of ordered pairs at
// the diameter's distance. A row that is full (its node reaches every
// node) is not stepped again.
func (e *hopEvaluator) evalFar(adj adjacency, limit int) (diam int, sum, far int64, ok bool) {
	w := e.words
	clear(e.cur)
	pending := e.pending[:0]
	for v := 0; v < e.n; v++ {
		e.cur[v*w+v/64] = 1 << (v % 64)
		pending = append(pending, int32(v))
	}
	reached := int64(e.n)
	if reached == e.full {
		e.pending = pending
		return 0, 0, 0, true
	}
	var fullRows int64
	for d := 1; d <= limit; d++ {
		count := fullRows * int64(e.n)
		still := e.still[:0]
		done := e.done[:0]
		for _, v := range pending {
			row := e.next[int(v)*w : int(v)*w+w]
			copy(row, e.cur[int(v)*w:int(v)*w+w])
			e.work += int64(1+len(adj[v])) * int64(w)
			for _, u := range adj[v] {
				src := e.cur[int(u)*w : int(u)*w+w]
				for i := range row {
					row[i] |= src[i]
				}
			}
			c := 0
			for _, x := range row {
				c += bits.OnesCount64(x)
			}
			count += int64(c)
			if c < e.n {
				still = append(still, v)
			} else {
				done = append(done, v)
			}
		}
		if count == reached {
			e.pending, e.still, e.done = pending, still, done
			return 0, 0, 0, false // no progress: disconnected
		}
		sum += int64(d) * (count - reached)
		far := count - reached
		reached = count
		if reached == e.full {
			e.cur, e.next = e.next, e.cur
			e.pending, e.still, e.done = pending, still, done
			return d, sum, far, true
		}
		// rows that filled up this step are full in both buffers from now
		for _, v := range done {
			copy(e.cur[int(v)*w:int(v)*w+w], e.next[int(v)*w:int(v)*w+w])
		}
		fullRows += int64(len(done))
		e.cur, e.next = e.next, e.cur
		pending, e.still = still, pending
		e.done = done
	}
	e.pending = pending
	return 0, 0, 0, false
}
