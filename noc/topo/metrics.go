package topo

import (
	"math"

	"github.com/aitherion/dpu/noc"
)

// Metrics summarises a graph's shape.
type Metrics struct {
	Nodes      int  `json:"nodes"`
	Links      int  `json:"links"`
	MaxDegree  int  `json:"max_degree"`
	Connected  bool `json:"connected"`
	Components int  `json:"components"`
	// Diameter is the largest hop count between two nodes; -1 when the
	// graph is not connected.
	Diameter int `json:"diameter"`
	// AvgHops is the mean hop count over ordered pairs of distinct nodes
	// that can reach each other (0 with fewer than two nodes).
	AvgHops float64 `json:"avg_hops"`
}

// Distances returns the hop count from src to every node by breadth-first
// search; unreachable nodes get -1.
func (g *Graph) Distances(src noc.NodeID) []int {
	dist := make([]int, g.N())
	for i := range dist {
		dist[i] = -1
	}
	if int(src) >= g.N() {
		return dist
	}
	dist[src] = 0
	queue := make([]noc.NodeID, 1, g.N())
	queue[0] = src
	for h := 0; h < len(queue); h++ {
		u := queue[h]
		for _, pe := range g.ports[u] {
			if pe != unwired && dist[pe.Node] < 0 {
				dist[pe.Node] = dist[u] + 1
				queue = append(queue, pe.Node)
			}
		}
	}
	return dist
}

// AllPairs returns the hop count between every pair of nodes: row i is
// Distances(i).
func (g *Graph) AllPairs() [][]int {
	out := make([][]int, g.N())
	for i := range out {
		out[i] = g.Distances(noc.NodeID(i))
	}
	return out
}

// Metrics computes g's metrics with a breadth-first search from every node
// (O(N·(N+L)) time).
func (g *Graph) Metrics() Metrics {
	n := g.N()
	m := Metrics{Nodes: n, Links: g.links, MaxDegree: g.MaxDegree(), Connected: true}
	comp := make([]int, n)
	for i := range comp {
		comp[i] = -1
	}
	var sum, pairs int64
	for s := 0; s < n; s++ {
		dist := g.Distances(noc.NodeID(s))
		if comp[s] < 0 {
			for v, d := range dist {
				if d >= 0 {
					comp[v] = m.Components
				}
			}
			m.Components++
		}
		for v, d := range dist {
			if d > 0 {
				sum += int64(d)
				pairs++
				m.Diameter = max(m.Diameter, d)
			} else if d < 0 && v != s {
				m.Connected = false
			}
		}
	}
	if pairs > 0 {
		m.AvgHops = float64(sum) / float64(pairs)
	}
	if !m.Connected {
		m.Diameter = -1
	}
	return m
}

// MooreBound is the largest number of nodes a graph whose nodes have at
// most k ports and whose diameter is d can hold:
// 1 + k·Σ_{i<d} (k-1)^i. It saturates at math.MaxInt.
func MooreBound(k, d int) int {
	if k <= 0 || d <= 0 {
		return 1
	}
	total, level := 1, k
	for i := 1; i <= d; i++ {
		if total > math.MaxInt-level {
			return math.MaxInt
		}
		total += level
		if k == 1 {
			break // a single link: nothing beyond the neighbour
		}
		if level > math.MaxInt/(k-1) {
			level = math.MaxInt
		} else {
			level *= k - 1
		}
	}
	return total
}

// MooreDiameter is the smallest diameter any graph of n nodes with at most k
// ports per node can have: the least d with MooreBound(k, d) >= n. ok is
// false when no connected graph exists (k = 0 with n > 1, k = 1 with n > 2).
func MooreDiameter(n, k int) (d int, ok bool) {
	if n <= 1 {
		return 0, true
	}
	if k <= 0 || (k == 1 && n > 2) {
		return 0, false
	}
	for MooreBound(k, d) < n {
		d++
	}
	return d, true
}

// MooreAvgHops is a lower bound on the average hop count between distinct
// nodes of any graph of n nodes with at most k ports per node: every node
// sees at best k nodes at one hop, k(k-1) at two, ..., with the last level
// partly filled. A Moore graph (the Petersen graph for n=10, k=3) meets it.
// ok is false as for MooreDiameter.
func MooreAvgHops(n, k int) (avg float64, ok bool) {
	sum, ok := mooreHopSum(n, k)
	if !ok || n <= 1 {
		return 0, ok
	}
	return float64(sum) / float64(n-1), true
}

// mooreHopSum is the least possible sum of hop counts from one node to
// all the others.
func mooreHopSum(n, k int) (int64, bool) {
	if n <= 1 {
		return 0, true
	}
	if k <= 0 || (k == 1 && n > 2) {
		return 0, false
	}
	left := int64(n - 1)
	level := int64(k)
	var sum int64
	for d := int64(1); left > 0; d++ {
		c := min(level, left)
		sum += d * c
		left -= c
		if level < int64(n) {
			level *= int64(k - 1)
		}
	}
	return sum, true
}
