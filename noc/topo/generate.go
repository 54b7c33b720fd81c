package topo

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Options tune Generate. The zero value asks for each kind's natural
// degree.
type Options struct {
	// Ports is the most ports a node may use (the degree bound). Zero
	// means the kind's natural degree: 2 for line and ring, 3 for tree,
	// 4 for torus2d, smallworld and random-regular. For random-regular it
	// is the exact degree k.
	Ports int
	// Seed drives the seeded kinds (smallworld, random-regular); the same
	// seed gives the same graph.
	Seed int64
	// Width is the number of columns of a torus2d; zero picks the most
	// square factorisation of N with both sides at least 3.
	Width int
	// Lattice is the degree of the ring lattice a smallworld starts from
	// (even, 2 <= Lattice <= Ports); zero means 2.
	Lattice int
	// Rewire is the probability (0..1) that a smallworld lattice edge
	// longer than one ring step has its far end moved to a random node.
	Rewire float64
}

// generator makes a graph of n nodes; it returns edges in the order their
// ports should be numbered.
type generator func(n int, o Options, rng *rand.Rand) ([][2]int32, error)

var generators = []struct {
	kind string
	gen  generator
}{
	{"line", genLine},
	{"ring", genRing},
	{"tree", genTree},
	{"torus2d", genTorus},
	{"smallworld", genSmallWorld},
	{"random-regular", genRandomRegular},
}

// plannedKind is the kind Generate builds with Plan; it is not in
// generators, which Plan itself scores.
const plannedKind = "planned"

// Kinds lists the topology kinds Generate knows, in a fixed order.
func Kinds() []string {
	out := make([]string, len(generators), len(generators)+1)
	for i, g := range generators {
		out[i] = g.kind
	}
	return append(out, plannedKind)
}

// Generate builds a graph of the given kind with n nodes:
//
//   - line: nodes 0..n-1 in a path; diameter n-1.
//   - ring: a cycle (n >= 3); diameter floor(n/2).
//   - tree: a balanced tree filled breadth first: the root has Ports
//     children, every other node Ports-1, so no node uses more than Ports.
//   - torus2d: rows x columns with wrap-around (both >= 3); diameter
//     floor(rows/2) + floor(columns/2).
//   - smallworld: a ring lattice of degree Lattice whose longer lattice
//     edges are rewired with probability Rewire, then every spare port (up to
//     Ports) filled with seeded random shortcuts. The ring itself is kept,
//     so the graph is always connected.
//   - random-regular: a seeded, connected graph where every node uses
//     exactly Ports ports (needs Ports < n and n*Ports even).
//   - planned: the wiring Plan proposes for n nodes with Ports ports
//     (default 4) and the seed; slow for large n (see Plan).
//
// Impossible parameters return an error wrapping ErrImpossible; an unknown
// kind wraps ErrUnknownKind.
func Generate(kind string, n int, opts Options) (*Graph, error) {
	if kind == plannedKind {
		p, err := Plan(n, ports(opts, 4), opts.Seed)
		if err != nil {
			return nil, fmt.Errorf("%s of %d nodes: %w", kind, n, err)
		}
		return fromEdges(kind, n, p.Graph.edges())
	}
	for _, g := range generators {
		if g.kind != kind {
			continue
		}
		if n < 1 {
			return nil, fmt.Errorf("%s of %d nodes: %w", kind, n, ErrImpossible)
		}
		if opts.Ports < 0 {
			return nil, fmt.Errorf("%s with %d ports: %w", kind, opts.Ports, ErrImpossible)
		}
		edges, err := g.gen(n, opts, newRand(opts.Seed))
		if err != nil {
			return nil, fmt.Errorf("%s of %d nodes: %w", kind, n, err)
		}
		return fromEdges(kind, n, edges)
	}
	return nil, fmt.Errorf("%q (known: %v): %w", kind, Kinds(), ErrUnknownKind)
}

func newRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
}

// ports returns the degree bound: o.Ports, or def when unset.
func ports(o Options, def int) int {
	if o.Ports > 0 {
		return o.Ports
	}
	return def
}

func needPorts(k, need int) error {
	if k < need {
		return fmt.Errorf("needs %d ports per node, have %d: %w", need, k, ErrImpossible)
	}
	return nil
}

func genLine(n int, o Options, _ *rand.Rand) ([][2]int32, error) {
	if err := needPorts(ports(o, 2), min(n-1, 2)); err != nil {
		return nil, err
	}
	edges := make([][2]int32, 0, n-1)
	for i := 0; i+1 < n; i++ {
		edges = append(edges, [2]int32{int32(i), int32(i + 1)})
	}
	return edges, nil
}

func genRing(n int, o Options, _ *rand.Rand) ([][2]int32, error) {
	if n < 3 {
		return nil, fmt.Errorf("a ring needs at least 3 nodes: %w", ErrImpossible)
	}
	if err := needPorts(ports(o, 2), 2); err != nil {
		return nil, err
	}
	edges := make([][2]int32, 0, n)
	for i := 0; i < n; i++ {
		a, b := int32(i), int32((i+1)%n)
		edges = append(edges, [2]int32{min(a, b), max(a, b)})
	}
	return edges, nil
}

func genTree(n int, o Options, _ *rand.Rand) ([][2]int32, error) {
	k := ports(o, 3)
	if n > 2 {
		if err := needPorts(k, 2); err != nil {
			return nil, err
		}
	}
	edges := make([][2]int32, 0, n)
	next := 1
	for parent := 0; next < n; parent++ {
		children := k - 1
		if parent == 0 {
			children = k
		}
		for c := 0; c < children && next < n; c++ {
			edges = append(edges, [2]int32{int32(parent), int32(next)})
			next++
		}
	}
	return edges, nil
}

func genTorus(n int, o Options, _ *rand.Rand) ([][2]int32, error) {
	if err := needPorts(ports(o, 4), 4); err != nil {
		return nil, err
	}
	cols := o.Width
	if cols == 0 {
		for r := 3; r*r <= n; r++ {
			if n%r == 0 && n/r >= 3 {
				cols = n / r // the last r found is closest to the square root
			}
		}
	}
	if cols < 3 || n%cols != 0 || n/cols < 3 {
		return nil, fmt.Errorf("a torus needs rows x columns = %d with both >= 3 (width %d): %w", n, o.Width, ErrImpossible)
	}
	rows := n / cols
	edges := make([][2]int32, 0, 2*n)
	id := func(r, c int) int32 { return int32(r*cols + c) }
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			edges = append(edges, [2]int32{id(r, c), id(r, (c+1)%cols)}, [2]int32{id(r, c), id((r+1)%rows, c)})
		}
	}
	return edges, nil
}

// adjacency is a small-degree adjacency set used while generating.
type adjacency [][]int32

func (a adjacency) has(u, v int32) bool { return slices.Contains(a[u], v) }

func (a adjacency) add(u, v int32) {
	a[u] = append(a[u], v)
	a[v] = append(a[v], u)
}

func (a adjacency) remove(u, v int32) {
	a[u] = slices.DeleteFunc(a[u], func(x int32) bool { return x == v })
	a[v] = slices.DeleteFunc(a[v], func(x int32) bool { return x == u })
}

func genSmallWorld(n int, o Options, rng *rand.Rand) ([][2]int32, error) {
	k := ports(o, 4)
	lat := o.Lattice
	if lat == 0 {
		lat = 2
	}
	switch {
	case n < 3:
		return nil, fmt.Errorf("a small world needs at least 3 nodes: %w", ErrImpossible)
	case lat < 2 || lat%2 != 0:
		return nil, fmt.Errorf("lattice degree %d is not even and >= 2: %w", lat, ErrImpossible)
	case lat > k:
		return nil, fmt.Errorf("lattice degree %d exceeds %d ports: %w", lat, k, ErrImpossible)
	case lat/2 > (n-1)/2:
		return nil, fmt.Errorf("lattice degree %d too large for %d nodes: %w", lat, n, ErrImpossible)
	case o.Rewire < 0 || o.Rewire > 1:
		return nil, fmt.Errorf("rewire probability %v outside 0..1: %w", o.Rewire, ErrImpossible)
	}
	adj := make(adjacency, n)
	var edges [][2]int32
	for d := 1; d <= lat/2; d++ {
		for i := 0; i < n; i++ {
			u, v := int32(i), int32((i+d)%n)
			edges = append(edges, [2]int32{u, v})
			adj.add(u, v)
		}
	}
	// Rewire lattice edges beyond the ring (the first n edges), keeping
	// the near end and every degree within k.
	for e := n; e < len(edges); e++ {
		if rng.Float64() >= o.Rewire {
			continue
		}
		u, v := edges[e][0], edges[e][1]
		for try := 0; try < 16; try++ {
			w := int32(rng.IntN(n))
			if w == u || w == v || adj.has(u, w) || len(adj[w]) >= k {
				continue
			}
			adj.remove(u, v)
			adj.add(u, w)
			edges[e][1] = w
			break
		}
	}
	// Fill the spare ports with random shortcuts.
	var stubs []int32
	for i := 0; i < n; i++ {
		for s := len(adj[i]); s < k; s++ {
			stubs = append(stubs, int32(i))
		}
	}
	rng.Shuffle(len(stubs), func(i, j int) { stubs[i], stubs[j] = stubs[j], stubs[i] })
	used := make([]bool, len(stubs))
	for i, u := range stubs {
		if used[i] {
			continue
		}
		for j := i + 1; j < len(stubs); j++ {
			v := stubs[j]
			if used[j] || v == u || adj.has(u, v) {
				continue
			}
			used[i], used[j] = true, true
			adj.add(u, v)
			edges = append(edges, [2]int32{u, v})
			break
		}
	}
	for i := range edges {
		if edges[i][0] > edges[i][1] {
			edges[i][0], edges[i][1] = edges[i][1], edges[i][0]
		}
	}
	return edges, nil
}

func genRandomRegular(n int, o Options, rng *rand.Rand) ([][2]int32, error) {
	k := ports(o, 4)
	switch {
	case k >= n:
		return nil, fmt.Errorf("degree %d needs more than %d nodes: %w", k, n, ErrImpossible)
	case n*k%2 != 0:
		return nil, fmt.Errorf("degree %d on %d nodes: the degree sum is odd: %w", k, n, ErrImpossible)
	case k == 1 && n > 2, k == 0 && n > 1:
		return nil, fmt.Errorf("degree %d cannot connect %d nodes: %w", k, n, ErrImpossible)
	}
	edges, ok := randomRegular(n, k, rng)
	if !ok {
		return nil, fmt.Errorf("no connected sample found for degree %d: %w", k, ErrImpossible)
	}
	return edges, nil
}

// randomRegular samples a connected k-regular graph on n nodes: a
// circulant on a random permutation of the nodes, then 10 random
// degree-preserving double-edge swaps per edge. Preconditions: k < n,
// n*k even. Edges come back sorted.
func randomRegular(n, k int, rng *rand.Rand) ([][2]int32, bool) {
	perm := rng.Perm(n)
	adj := make(adjacency, n)
	var edges [][2]int32
	link := func(u, v int32) {
		adj.add(u, v)
		edges = append(edges, [2]int32{u, v})
	}
	for d := 1; d <= k/2; d++ {
		for i := 0; i < n; i++ {
			link(int32(perm[i]), int32(perm[(i+d)%n]))
		}
	}
	if k%2 == 1 {
		for i := 0; i < n/2; i++ {
			link(int32(perm[i]), int32(perm[i+n/2]))
		}
	}
	// k <= 2: the permuted ring is already a uniform connected sample; a
	// complete graph has nothing to swap.
	if k > 2 && k < n-1 {
		for attempt := 0; ; attempt++ {
			for s := 0; s < 10*len(edges); s++ {
				swapEdges(adj, edges, rng)
			}
			if connected(adj) {
				break
			}
			if attempt == 20 {
				return nil, false
			}
		}
	}
	sortEdges(edges)
	return edges, true
}

// edgeSwap records a double-edge swap so that it can be undone: edges i
// and j were a-b and c-d and became a-c and b-d.
type edgeSwap struct {
	i, j       int
	a, b, c, d int32
}

// swapEdges tries one random double-edge swap (a-b, c-d → a-c, b-d),
// which keeps every degree; ok is false when the drawn pair cannot be
// swapped (shared node, or a new edge that already exists).
func swapEdges(adj adjacency, edges [][2]int32, rng *rand.Rand) (s edgeSwap, ok bool) {
	i, j := rng.IntN(len(edges)), rng.IntN(len(edges))
	return swapEdgesAt(adj, edges, i, j, rng.IntN(2) == 1)
}

// swapEdgesAt swaps edges i and j (a-b, c-d → a-c, b-d, or a-d, b-c when
// flip is set) when that keeps the graph simple.
func swapEdgesAt(adj adjacency, edges [][2]int32, i, j int, flip bool) (s edgeSwap, ok bool) {
	a, b := edges[i][0], edges[i][1]
	c, d := edges[j][0], edges[j][1]
	if flip {
		c, d = d, c
	}
	if i == j || a == c || a == d || b == c || b == d || adj.has(a, c) || adj.has(b, d) {
		return edgeSwap{}, false
	}
	replace(adj[a], b, c)
	replace(adj[b], a, d)
	replace(adj[c], d, a)
	replace(adj[d], c, b)
	edges[i] = [2]int32{min(a, c), max(a, c)}
	edges[j] = [2]int32{min(b, d), max(b, d)}
	return edgeSwap{i: i, j: j, a: a, b: b, c: c, d: d}, true
}

// undo reverts s.
func (s edgeSwap) undo(adj adjacency, edges [][2]int32) {
	replace(adj[s.a], s.c, s.b)
	replace(adj[s.b], s.d, s.a)
	replace(adj[s.c], s.a, s.d)
	replace(adj[s.d], s.b, s.c)
	edges[s.i] = [2]int32{min(s.a, s.b), max(s.a, s.b)}
	edges[s.j] = [2]int32{min(s.c, s.d), max(s.c, s.d)}
}

func replace(s []int32, old, new int32) {
	for i, x := range s {
		if x == old {
			s[i] = new
			return
		}
	}
}

func sortEdges(edges [][2]int32) {
	slices.SortFunc(edges, func(x, y [2]int32) int {
		if x[0] != y[0] {
			return int(x[0] - y[0])
		}
		return int(x[1] - y[1])
	})
}

// connected reports whether adj is one component (true for 0 or 1 nodes).
func connected(adj adjacency) bool {
	n := len(adj)
	if n <= 1 {
		return true
	}
	seen := make([]bool, n)
	queue := make([]int32, 1, n)
	seen[0] = true
	for h := 0; h < len(queue); h++ {
		for _, v := range adj[queue[h]] {
			if !seen[v] {
				seen[v] = true
				queue = append(queue, v)
			}
		}
	}
	return len(queue) == n
}
