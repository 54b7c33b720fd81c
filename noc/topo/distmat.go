package topo

import "math/rand/v2"

// distMatrix keeps every pair's hop count of a graph under double-edge
// swaps, updated incrementally: a swap's evaluation touches only the
// distances it changes, not all N² of them.
//
// Row s of the matrix is the breadth-first distances from s. After a swap
// removes links a-b and c-d and adds a-c and b-d (every row handled on its
// own):
//
//   - a removed link u-v with d(s,v) = d(s,u)+1 changes row s only when v
//     loses its last parent (a neighbour one hop nearer s). The nodes that
//     lose every parent, found level by level from v (Ramalingam and
//     Reps' decremental shortest paths, for unit weights), are the only
//     ones whose distance grows; they are settled again from their
//     unaffected neighbours by a bucketed breadth-first search;
//   - an added link x-y with d(s,x)+1 < d(s,y) shortens the distances a
//     breadth-first search from y, pruned wherever it brings no
//     improvement, reaches.
//
// Rows where neither happens cost a few comparisons, so an evaluation
// costs O(N·k) plus the changed entries, instead of the O(N·(N+L)) of a
// search from every node. The histogram of distances over ordered pairs
// gives the diameter, hop sum and pairs beyond a target at once. Every
// change is logged so that a rejected swap is undone exactly.
type distMatrix struct {
	n    int
	dist []uint8 // dist[s·n+t]
	// hist[d] counts ordered pairs (s ≠ t) at distance d
	hist []int64
	sum  int64
	// undo log of the last update: matrix index and old value
	log []distChange
	// scratch for one row's repair
	mark    []uint32
	stamp   uint32
	buckets [][]int32
	queue   []int32
	// added are the links the swap being evaluated added: the repair of
	// the removed ones runs on the graph without them
	added [2][2]int32
	// work counts adjacency entries scanned, the search's budget unit
	work int64
}

type distChange struct {
	at  int32
	old uint8
}

const distInf = 255

// newDistMatrix computes every distance of adj; ok is false when adj is
// disconnected or has a distance of distInf or more.
func newDistMatrix(adj adjacency) (*distMatrix, bool) {
	n := len(adj)
	m := &distMatrix{n: n, dist: make([]uint8, n*n), hist: make([]int64, distInf+1), mark: make([]uint32, n)}
	q := make([]int32, 0, n)
	for s := 0; s < n; s++ {
		row := m.dist[s*n : s*n+n]
		for i := range row {
			row[i] = distInf
		}
		row[s] = 0
		q = append(q[:0], int32(s))
		for h := 0; h < len(q); h++ {
			x := q[h]
			for _, y := range adj[x] {
				if row[y] == distInf {
					if row[x]+1 >= distInf {
						return nil, false
					}
					row[y] = row[x] + 1
					q = append(q, y)
				}
			}
		}
		if len(q) != n {
			return nil, false
		}
		for t, d := range row {
			if t != s {
				m.hist[d]++
				m.sum += int64(d)
			}
		}
	}
	return m, true
}

// diameter is the largest distance.
func (m *distMatrix) diameter() int {
	for d := len(m.hist) - 1; d > 0; d-- {
		if m.hist[d] > 0 {
			return d
		}
	}
	return 0
}

// excess is the sum over ordered pairs of the hops beyond target.
func (m *distMatrix) excess(target int) int64 {
	var e int64
	for d := target + 1; d < len(m.hist); d++ {
		e += int64(d-target) * m.hist[d]
	}
	return e
}

// set changes entry (s, t) to d, logging the old value.
func (m *distMatrix) set(i int, d uint8) {
	old := m.dist[i]
	m.log = append(m.log, distChange{at: int32(i), old: old})
	m.hist[old]--
	m.hist[d]++
	m.sum += int64(d) - int64(old)
	m.dist[i] = d
}

// undo restores the matrix to before the last swap.
func (m *distMatrix) undo() {
	for i := len(m.log) - 1; i >= 0; i-- {
		c := m.log[i]
		d := m.dist[c.at]
		m.hist[d]--
		m.hist[c.old]++
		m.sum += int64(c.old) - int64(d)
		m.dist[c.at] = c.old
	}
	m.log = m.log[:0]
}

// swapped updates the matrix for s, a swap already made in adj: links
// a-b and c-d became a-c and b-d. It returns false when the swap
// disconnects the graph; undo then restores the matrix.
func (m *distMatrix) swapped(adj adjacency, s edgeSwap) bool {
	m.log = m.log[:0]
	removed := [2][2]int32{{s.a, s.b}, {s.c, s.d}}
	added := [2][2]int32{{s.a, s.c}, {s.b, s.d}}
	m.added = added
	n := m.n
	for src := 0; src < n; src++ {
		base := src * n
		row := m.dist[base : base+n]
		// seeds: the far end of each removed link that lay on a
		// shortest path from src
		var seeds [2]int32
		ns := 0
		for _, e := range removed {
			u, v := e[0], e[1]
			switch {
			case row[u]+1 == row[v]:
				seeds[ns] = v
				ns++
			case row[v]+1 == row[u]:
				seeds[ns] = u
				ns++
			}
		}
		if ns > 0 {
			m.repairRemoved(adj, row, base, seeds[:ns])
		}
		for _, e := range added {
			x, y := e[0], e[1]
			if row[x] > row[y] {
				x, y = y, x
			}
			if row[x] < distInf-1 && row[x]+1 < row[y] {
				m.relaxFrom(adj, row, base, y, row[x]+1)
			}
		}
	}
	return m.hist[distInf] == 0
}

// kept reports whether link w-x is not one the swap added.
func (m *distMatrix) kept(w, x int32) bool {
	for _, e := range m.added {
		if e[0] == w && e[1] == x || e[0] == x && e[1] == w {
			return false
		}
	}
	return true
}

// hasParent reports whether w has a neighbour one hop nearer the row's
// source that is not marked affected.
func (m *distMatrix) hasParent(adj adjacency, row []uint8, w int32) bool {
	want := row[w] - 1
	m.work += int64(len(adj[w]))
	for _, x := range adj[w] {
		if row[x] == want && m.mark[x] != m.stamp && m.kept(w, x) {
			return true
		}
	}
	return false
}

// repairRemoved handles the removed links for one row, on the graph
// without the added ones: it finds the nodes left with no parent (seeds
// first, then their children, in order of distance) and settles them
// again; a node cut off gets distInf.
func (m *distMatrix) repairRemoved(adj adjacency, row []uint8, base int, seeds []int32) {
	m.stamp++
	if m.stamp == 0 {
		clear(m.mark)
		m.stamp = 1
	}
	// quick exit: every seed keeps a parent
	lost := false
	for _, v := range seeds {
		if !m.hasParent(adj, row, v) {
			lost = true
		}
	}
	if !lost {
		return
	}
	// affected nodes level by level: buckets[d] holds candidates at
	// distance d
	for i := range m.buckets {
		m.buckets[i] = m.buckets[i][:0]
	}
	push := func(w int32) {
		d := int(row[w])
		for len(m.buckets) <= d {
			m.buckets = append(m.buckets, nil)
		}
		m.buckets[d] = append(m.buckets[d], w)
	}
	lo := distInf
	for _, v := range seeds {
		push(v)
		lo = min(lo, int(row[v]))
	}
	affected := m.queue[:0]
	for d := lo; d < len(m.buckets); d++ {
		for i := 0; i < len(m.buckets[d]); i++ {
			w := m.buckets[d][i]
			if m.mark[w] == m.stamp || m.hasParent(adj, row, w) {
				continue
			}
			m.mark[w] = m.stamp
			affected = append(affected, w)
			for _, y := range adj[w] {
				if int(row[y]) == d+1 && m.mark[y] != m.stamp && m.kept(w, y) {
					push(y)
				}
			}
		}
	}
	// settle the affected nodes again: each starts from its best
	// unaffected neighbour, then a bucketed search among them
	for i := range m.buckets {
		m.buckets[i] = m.buckets[i][:0]
	}
	for _, w := range affected {
		best := distInf
		m.work += int64(len(adj[w]))
		for _, x := range adj[w] {
			if m.mark[x] != m.stamp && int(row[x])+1 < best && m.kept(w, x) {
				best = int(row[x]) + 1
			}
		}
		m.set(base+int(w), uint8(min(best, distInf)))
		if best < distInf {
			push(w)
		}
	}
	for d := 0; d < len(m.buckets) && d+1 < distInf; d++ {
		for i := 0; i < len(m.buckets[d]); i++ {
			w := m.buckets[d][i]
			if int(row[w]) != d || m.mark[w] != m.stamp {
				continue // stale entry, or already settled
			}
			m.mark[w] = m.stamp - 1 // settled: a plain node again
			m.work += int64(len(adj[w]))
			for _, y := range adj[w] {
				if m.mark[y] == m.stamp && int(row[y]) > d+1 && m.kept(w, y) {
					m.set(base+int(y), uint8(d+1))
					push(y)
				}
			}
		}
	}
	m.queue = affected
}

// relaxFrom lowers y's distance to d and spreads the improvement by a
// pruned breadth-first search.
func (m *distMatrix) relaxFrom(adj adjacency, row []uint8, base int, y int32, d uint8) {
	m.set(base+int(y), d)
	q := append(m.queue[:0], y)
	for h := 0; h < len(q); h++ {
		x := q[h]
		nd := row[x] + 1
		m.work += int64(len(adj[x]))
		for _, z := range adj[x] {
			if row[z] > nd {
				m.set(base+int(z), nd)
				q = append(q, z)
			}
		}
	}
	m.queue = q
}

// farPair returns a pair at distance thr or more, found by scanning from a
// random entry; found is false when there is none.
func (m *distMatrix) farPair(thr int, rng *rand.Rand) (pair [2]int32, found bool) {
	if thr > distInf {
		return pair, false
	}
	var count int64
	for d := thr; d < len(m.hist); d++ {
		count += m.hist[d]
	}
	if count == 0 {
		return pair, false
	}
	nn := len(m.dist)
	at := rng.IntN(nn)
	for i := 0; i < nn; i++ {
		j := at + i
		if j >= nn {
			j -= nn
		}
		if int(m.dist[j]) >= thr {
			return [2]int32{int32(j / m.n), int32(j % m.n)}, true
		}
	}
	return pair, false
}
