package topo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// group is a finite group whose elements are numbered 0..order-1, 0 the
// identity.
type group interface {
	order() int
	mul(x, y int32) int32
	inv(x int32) int32
	// involutions lists the elements of order two.
	involutions() []int32
	String() string
}

// metacyclic is the metacyclic group Z_p ⋊_r Z_q: elements (a, c) with a in
// Z_p and c in Z_q, numbered a·q + c, multiplied as
// (a, c)·(a', c') = (a + r^c·a' mod p, c + c' mod q). It needs
// gcd(r, p) = 1 and r^q ≡ 1 (mod p). q = 1 is the cyclic group Z_p and
// r = 1 the direct product Z_p × Z_q; the identity is element 0.
type metacyclic struct {
	p, q, r int
	rpow    []int // r^c mod p for c in 0..q-1
	invols  []int32
}

// newMetacyclic builds Z_p ⋊_r Z_q; (q, r) must come from
// metacyclicGroups(p·q).
func newMetacyclic(p, q, r int) *metacyclic {
	g := &metacyclic{p: p, q: q, r: r, rpow: make([]int, q)}
	x := 1 % p
	for c := range g.rpow {
		g.rpow[c] = x
		x = x * r % p
	}
	for e := int32(1); e < int32(g.order()); e++ {
		if g.mul(e, e) == 0 {
			g.invols = append(g.invols, e)
		}
	}
	return g
}

func (g *metacyclic) order() int { return g.p * g.q }

func (g *metacyclic) involutions() []int32 { return g.invols }

func (g *metacyclic) mul(x, y int32) int32 {
	a, c := int(x)/g.q, int(x)%g.q
	a2, c2 := int(y)/g.q, int(y)%g.q
	return int32((a+g.rpow[c]*a2)%g.p*g.q + (c+c2)%g.q)
}

func (g *metacyclic) inv(x int32) int32 {
	a, c := int(x)/g.q, int(x)%g.q
	ci := (g.q - c) % g.q
	return int32((g.p-g.rpow[ci]*a%g.p)%g.p*g.q + ci)
}

func (g *metacyclic) String() string {
	switch {
	case g.q == 1:
		return fmt.Sprintf("Z%d", g.p)
	case g.r == 1:
		return fmt.Sprintf("Z%d×Z%d", g.p, g.q)
	}
	return fmt.Sprintf("Z%d⋊Z%d(r=%d)", g.p, g.q, g.r)
}

// metacyclicGroups lists every (q, r) that makes Z_{m/q} ⋊_r Z_q a group
// of order m, as [2]int{q, r}, in a fixed order.
func metacyclicGroups(m int) [][2]int {
	var out [][2]int
	for q := 1; q <= m; q++ {
		if m%q != 0 {
			continue
		}
		p := m / q
		if p == 1 && q > 1 {
			continue // Z_1 ⋊ Z_q is Z_q, listed as q = 1
		}
		for r := 1; r < max(p, 2); r++ {
			if gcd(r, p) != 1 {
				continue
			}
			x := 1 % p
			for range q {
				x = x * r % p
			}
			if x == 1%p {
				out = append(out, [2]int{q, r})
			}
		}
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// A voltage graph: a small base multigraph whose edges carry elements of a
// group G (their voltages). Its lift has a node (i, x) for every base node
// i and element x; a base edge i→j with voltage g joins (i, x) to (j, x·g)
// for every x. A loop at i (j = i) gives each (i, x) two links, to x·g and
// x·g⁻¹; a semi-edge at i with an involution g gives one, to x·g. Left
// multiplication by any h maps the lift onto itself, so the hop counts
// from (i, e) for the b base nodes give every pair's: an evaluation is b
// breadth-first searches, not N. Cayley graphs are the lifts of a single
// base node; most large graphs of the degree–diameter table are lifts of
// small bases over cyclic or metacyclic groups.

// baseEdge is a base edge u→v with its voltage; su and sv are the ports of
// its darts at u and at v (a loop has both at u; a semi-edge only su).
type baseEdge struct {
	u, v   int32
	semi   bool
	volt   int32
	su, sv int
}

// lift is a voltage graph over a group with b base nodes of degree k, and
// its lift's adjacency (node i·m + x, ports 0..k-1, -1 for no link).
type lift struct {
	g       group
	b, m, k int
	n       int
	edges   []baseEdge
	live    int // edges[:live] have voltages (all, once drawn)
	adj     []int32
	// breadth-first search scratch
	seen  []uint32
	stamp uint32
	queue []int32
}

// randomLift draws a connected base multigraph on b nodes where every node
// has k darts, with random valid voltages; nil when the draw fails (a
// degree sum that needs a semi-edge the group cannot give, or no simple
// lift found).
func randomLift(g group, b, k int, rng *rand.Rand) *lift {
	m := g.order()
	l := &lift{g: g, b: b, m: m, k: k, n: b * m}
	free := make([]int, b)
	for i := range free {
		free[i] = k
	}
	add := func(u, v int32, semi bool) {
		e := baseEdge{u: u, v: v, semi: semi, su: k - free[u]}
		free[u]--
		if !semi {
			e.sv = k - free[v]
			free[v]--
		}
		l.edges = append(l.edges, e)
	}
	for i := 1; i < b; i++ { // a random spanning tree keeps the base connected
		for {
			p := rng.IntN(i)
			if free[p] > 0 {
				add(int32(p), int32(i), false)
				break
			}
		}
	}
	if len(g.involutions()) > 0 {
		for i := range free {
			if free[i] > 0 && (k%2 == 1 || b > 1) && rng.IntN(2) == 0 {
				add(int32(i), int32(i), true)
			}
		}
	}
	var stubs []int32
	for i, f := range free {
		for range f {
			stubs = append(stubs, int32(i))
		}
	}
	rng.Shuffle(len(stubs), func(i, j int) { stubs[i], stubs[j] = stubs[j], stubs[i] })
	for len(stubs) >= 2 {
		u, v := stubs[0], stubs[1]
		if u == v && m < 3 {
			return nil
		}
		add(min(u, v), max(u, v), false)
		stubs = stubs[2:]
	}
	if len(stubs) == 1 {
		if len(g.involutions()) == 0 {
			return nil
		}
		add(stubs[0], stubs[0], true)
	}
	l.adj = make([]int32, l.n*k)
	for i := range l.adj {
		l.adj[i] = -1
	}
	for i := range l.edges {
		l.live = i + 1
		ok := false
		for try := 0; try < 64 && !ok; try++ {
			l.edges[i].volt = l.drawVolt(i, rng)
			ok = l.valid(i)
		}
		if !ok {
			return nil
		}
		l.place(i)
	}
	l.seen = make([]uint32, l.n)
	l.queue = make([]int32, 0, l.n)
	return l
}

// drawVolt draws a voltage edge i may carry: an involution for a
// semi-edge, anything but the identity for a loop.
func (l *lift) drawVolt(i int, rng *rand.Rand) int32 {
	e := &l.edges[i]
	switch {
	case e.semi:
		return l.g.involutions()[rng.IntN(len(l.g.involutions()))]
	case e.u == e.v:
		return int32(1 + rng.IntN(l.m-1))
	}
	return int32(rng.IntN(l.m))
}

// valid reports whether edge i's voltage keeps the lift simple at both
// its ends: no two darts of a base node reach the same node with the same
// voltage, and no dart of a loop carries the identity.
func (l *lift) valid(i int) bool {
	e := l.edges[i]
	return l.simpleAt(e.u) && (e.u == e.v || l.simpleAt(e.v))
}

func (l *lift) simpleAt(u int32) bool {
	var darts [16][2]int32
	d := darts[:0]
	for _, e := range l.edges[:l.live] {
		if e.u == u {
			d = append(d, [2]int32{e.v, e.volt})
			if e.v == u && !e.semi {
				d = append(d, [2]int32{u, l.g.inv(e.volt)})
			}
		} else if e.v == u {
			d = append(d, [2]int32{e.u, l.g.inv(e.volt)})
		}
	}
	for i, x := range d {
		if x[0] == u && x[1] == 0 {
			return false
		}
		for _, y := range d[:i] {
			if x == y {
				return false
			}
		}
	}
	return true
}

// place writes edge i's links into the lift's adjacency.
func (l *lift) place(i int) {
	e := l.edges[i]
	m, k, g := l.m, l.k, l.g
	inv := g.inv(e.volt)
	u, v := int(e.u)*m, int(e.v)*m
	for x := int32(0); x < int32(m); x++ {
		l.adj[(u+int(x))*k+e.su] = int32(v) + g.mul(x, e.volt)
		if !e.semi {
			l.adj[(v+int(x))*k+e.sv] = int32(u) + g.mul(x, inv)
		}
	}
}

// eval returns the lift's diameter, the hop sum from the b base sources
// (i, e) to every node (a pair-average is sum/(b·(n-1))), and the excess:
// the sum over the same pairs of how far each lies beyond target hops.
// ok is false when the lift is disconnected.
func (l *lift) eval(target int) (diam int, sum, excess int64, ok bool) {
	for i := 0; i < l.b; i++ {
		l.stamp++
		if l.stamp == 0 {
			clear(l.seen)
			l.stamp = 1
		}
		src := int32(i * l.m)
		q := append(l.queue[:0], src)
		l.seen[src] = l.stamp
		d := 0
		for h := 0; h < len(q); d++ {
			end := len(q)
			if d > target {
				excess += int64(d-target) * int64(end-h)
			}
			sum += int64(d) * int64(end-h)
			for ; h < end; h++ {
				row := l.adj[int(q[h])*l.k : int(q[h])*l.k+l.k]
				for _, w := range row {
					if w >= 0 && l.seen[w] != l.stamp {
						l.seen[w] = l.stamp
						q = append(q, w)
					}
				}
			}
		}
		l.queue = q
		if len(q) != l.n {
			return 0, 0, 0, false
		}
		diam = max(diam, d-1)
	}
	return diam, sum, excess, true
}

// edgeList returns the lift's links as node pairs (a < b), sorted.
func (l *lift) edgeList() [][2]int32 {
	var out [][2]int32
	for v := 0; v < l.n; v++ {
		for _, w := range l.adj[v*l.k : v*l.k+l.k] {
			if w > int32(v) {
				out = append(out, [2]int32{int32(v), w})
			}
		}
	}
	sortEdges(out)
	return out
}

func (l *lift) String() string {
	return fmt.Sprintf("lift of a %d-node base over %v", l.b, l.g)
}

// The lift search's settings: the weight of the excess in its cost (hop
// sum + liftExcessWeight·excess); its starting temperature per base
// source, and the share of it the elites' long runs start from; the
// largest base and the smallest group (fibre) it tries; the exploration
// runs' length (the budget over liftItersDiv evaluations' worth); how
// many of their best runs it continues; and the largest degree it
// handles.
const (
	liftExcessWeight = 30.0
	liftTemp         = 1.5
	liftPolishTemp   = 0.3
	liftMaxBase      = 16
	liftMinFibre     = 5
	liftItersDiv     = 200
	liftElites       = 4
	liftMaxDegree    = 32
)

// liftConfig is an order, a base size and a group the lift search can try.
type liftConfig struct {
	order, b int
	q, r     int         // a metacyclic group Z_(m/q) ⋊_r Z_q
	linear   *linearSpec // or a linear group
}

// liftConfigs lists the (order, base, group) choices for a plan of n
// nodes: metacyclic groups of exact orders b·m = n, and of orders up to
// n/16 above n (their lifts are trimmed to n), with 1 <= b <= liftMaxBase
// and m >= 5; and linear groups of orders b·m up to n/8 above n.
func liftConfigs(n, k int) (exact, over, linear []liftConfig) {
	for _, lg := range linearGroups {
		for b := 1; b <= liftMaxBase; b++ {
			if order := b * lg.order; order >= n && order <= n+n/8 && (lg.order%2 == 0 || b*k%2 == 0) {
				linear = append(linear, liftConfig{order: order, b: b, linear: lg})
			}
		}
	}
	for order := n; order <= n+max(n/16, 2); order++ {
		for b := 1; b <= liftMaxBase && b <= order; b++ {
			if order%b != 0 || order/b < liftMinFibre {
				continue
			}
			m := order / b
			for _, qr := range metacyclicGroups(m) {
				if m%2 == 1 && b*k%2 == 1 {
					continue // odd degree sum and no involution
				}
				c := liftConfig{order: order, b: b, q: qr[0], r: qr[1]}
				if order == n {
					exact = append(exact, c)
				} else {
					over = append(over, c)
				}
			}
		}
	}
	return exact, over, linear
}

// linearGroups are the linear groups the lift search tries besides the
// metacyclic ones, with their orders.
var linearGroups = []*linearSpec{
	{p: 5, projective: true, order: 60}, {p: 5, order: 120},
	{p: 7, projective: true, order: 168}, {p: 7, order: 336},
	{p: 11, projective: true, order: 660}, {p: 11, order: 1320},
	{p: 13, projective: true, order: 1092},
}

type linearSpec struct {
	p          int
	projective bool
	order      int
}

// liftResult is the best lift the search found.
type liftResult struct {
	edges       [][2]int32 // on result.order nodes
	order       int
	diam        int
	sum         int64 // from the base sources
	excess      int64 // hops beyond the target, over all ordered pairs
	b           int
	name        string
	evaluations int
}

// searchLifts anneals the voltages of random voltage graphs with n nodes
// (or a few more, to be trimmed) and degree k, aiming at diameter target,
// under a budget of work in adjacency entries scanned. Half the budget
// explores: each short run draws an order, a base size, a group
// (metacyclic or linear) and a base multigraph, then changes one voltage
// at a time: cost = hop sum + liftExcessWeight·excess, a worse cost taken
// with probability exp(-Δ/T) as T cools to zero. The other half continues
// the liftElites best runs in long, cooler ones. A lift that meets the
// Moore bound's hop count ends the search.
func searchLifts(n, k, target int, work int64, rng *rand.Rand) *liftResult {
	exact, over, linear := liftConfigs(n, k)
	if len(exact)+len(over)+len(linear) == 0 {
		return nil
	}
	// a run is one voltage graph and the best voltages its annealing found
	type run struct {
		l        *lift
		order, d int
		sum, exc int64 // from the base sources
		cost     float64
	}
	// less orders runs: smaller diameter, then an exact order (no
	// trimming), then fewer hops beyond the target, then fewer hops
	less := func(a, b *run) bool {
		switch {
		case a.d != b.d:
			return a.d < b.d
		case (a.order == n) != (b.order == n):
			return a.order == n
		case a.exc*int64(a.l.m) != b.exc*int64(b.l.m):
			return a.exc*int64(a.l.m) < b.exc*int64(b.l.m)
		}
		return float64(a.sum)/float64(a.l.b) < float64(b.sum)/float64(b.l.b)
	}
	var spent int64
	evals := 0
	// anneal changes one voltage at a time for iters steps from
	// temperature t0 down to zero and leaves r at the best voltages seen.
	anneal := func(r *run, iters int, t0 float64) {
		l := r.l
		evalCost := int64(l.b) * int64(l.n) * int64(l.k)
		cost := r.cost
		volts := make([]int32, len(l.edges))
		for i, e := range l.edges {
			volts[i] = e.volt
		}
		for it := 0; it < iters && spent < work; it++ {
			i := rng.IntN(len(l.edges))
			old := l.edges[i].volt
			l.edges[i].volt = l.drawVolt(i, rng)
			spent += int64(l.m)
			if l.edges[i].volt == old || !l.valid(i) {
				l.edges[i].volt = old
				continue
			}
			l.place(i)
			nd, nsum, nexc, ok := l.eval(target)
			spent += evalCost
			evals++
			ncost := float64(nsum) + liftExcessWeight*float64(nexc)
			temp := t0 * float64(iters-it) / float64(iters)
			if ok && (ncost <= cost || rng.Float64() < math.Exp(-(ncost-cost)/temp)) {
				cost = ncost
				if nd < r.d || (nd == r.d && ncost < r.cost) {
					r.d, r.sum, r.exc, r.cost = nd, nsum, nexc, ncost
					for j, e := range l.edges {
						volts[j] = e.volt
					}
				}
			} else {
				l.edges[i].volt = old
				l.place(i)
			}
		}
		for i := range l.edges {
			if l.edges[i].volt != volts[i] {
				l.edges[i].volt = volts[i]
				l.place(i)
			}
		}
	}
	var elites []*run
	groups := map[[2]int]group{}
	moore, _ := mooreHopSum(n, k)
	// Exploration: short runs from many random voltage graphs, the best
	// liftElites kept.
	for spent < work/2 {
		// one restart in eight on a larger metacyclic order, two on a
		// linear group, the others on an exact order (or what there is)
		var c liftConfig
		switch pick := rng.IntN(8); {
		case len(over) > 0 && (pick == 7 || len(exact)+len(linear) == 0):
			c = over[rng.IntN(len(over))]
		case len(linear) > 0 && (pick >= 5 || len(exact) == 0):
			c = linear[rng.IntN(len(linear))]
		case len(exact) > 0:
			c = exact[rng.IntN(len(exact))]
		default:
			c = over[rng.IntN(len(over))]
		}
		m := c.order / c.b
		key := [2]int{m*1024 + c.q, c.r}
		if c.linear != nil {
			key = [2]int{-c.linear.p, c.order / c.b}
		}
		g := groups[key]
		if g == nil {
			if c.linear != nil {
				g = linearGroup(c.linear.p, c.linear.projective)
			} else {
				g = newMetacyclic(m/c.q, c.q, c.r)
			}
			groups[key] = g
		}
		l := randomLift(g, c.b, k, rng)
		spent += int64(c.order * k)
		if l == nil {
			continue
		}
		evalCost := int64(c.b) * int64(c.order) * int64(k)
		d, sum, exc, ok := l.eval(target)
		spent += evalCost
		evals++
		if !ok {
			continue
		}
		r := &run{l: l, order: c.order, d: d, sum: sum, exc: exc, cost: float64(sum) + liftExcessWeight*float64(exc)}
		anneal(r, int(min(max(work/evalCost/liftItersDiv, 300), 400000)), liftTemp*float64(c.b))
		if r.order == n && r.d <= target && r.sum == int64(r.l.b)*moore {
			elites = []*run{r} // meets the Moore bound's hop count: nothing beats it
			spent = work
			break
		}
		at := len(elites)
		for at > 0 && less(r, elites[at-1]) {
			at--
		}
		if at < liftElites {
			elites = slices.Insert(elites, at, r)
			if len(elites) > liftElites {
				elites = elites[:liftElites]
			}
		}
	}
	// Intensification: the rest of the budget in long, cooler runs from
	// the elites' best voltages.
	for i, r := range elites {
		share := (work - spent) / int64(len(elites)-i)
		evalCost := int64(r.l.b) * int64(r.l.n) * int64(k)
		anneal(r, int(share/(evalCost+int64(r.l.m))), liftTemp*liftPolishTemp*float64(r.l.b))
	}
	slices.SortStableFunc(elites, func(a, b *run) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	})
	if len(elites) == 0 {
		return nil
	}
	r := elites[0]
	return &liftResult{edges: r.l.edgeList(), order: r.order, diam: r.d, sum: r.sum, excess: r.exc * int64(r.l.m),
		b: r.l.b, name: r.l.String(), evaluations: evals}
}

// trim cuts a graph of order nodes down to n: it removes order-n nodes
// that are pairwise at least three hops apart (so no node loses two
// links), numbers the rest 0..n-1 in order, and rewires the ports freed
// around each removed node to each other (those nodes were two hops
// apart through it), then across removed nodes; a port no pair fits is
// left free.
func trim(order, n int, edges [][2]int32, rng *rand.Rand) [][2]int32 {
	if order == n {
		return edges
	}
	adj := make(adjacency, order)
	for _, e := range edges {
		adj.add(e[0], e[1])
	}
	removed := make([]bool, order)
	blocked := make([]bool, order)
	perm := rng.Perm(order)
	cut := 0
	var groups [][]int32
	for _, v := range perm {
		if cut == order-n {
			break
		}
		if blocked[v] {
			continue
		}
		removed[v] = true
		cut++
		groups = append(groups, slices.Clone(adj[v]))
		for _, u := range adj[v] {
			blocked[u] = true
			for _, w := range adj[u] {
				blocked[w] = true
			}
		}
	}
	for i := 0; cut < order-n; i++ { // too dense for spread-out cuts
		v := perm[i]
		if !removed[v] {
			removed[v] = true
			cut++
			groups = append(groups, slices.Clone(adj[v]))
		}
	}
	for v := range removed {
		if removed[v] {
			for _, u := range slices.Clone(adj[v]) {
				adj.remove(int32(v), u)
			}
		}
	}
	var left []int32
	pair := func(stubs []int32) []int32 {
		var rest []int32
		for len(stubs) > 0 {
			u := stubs[0]
			stubs = stubs[1:]
			if removed[u] {
				continue
			}
			j := slices.IndexFunc(stubs, func(w int32) bool { return w != u && !removed[w] && !adj.has(u, w) })
			if j < 0 {
				rest = append(rest, u)
				continue
			}
			adj.add(u, stubs[j])
			stubs = slices.Delete(stubs, j, j+1)
		}
		return rest
	}
	for _, g := range groups {
		left = append(left, pair(g)...)
	}
	pair(left)
	renum := make([]int32, order)
	next := int32(0)
	for v := range renum {
		renum[v] = next
		if !removed[v] {
			next++
		}
	}
	var out [][2]int32
	for v := range adj {
		for _, u := range adj[v] {
			if int32(v) < u && !removed[v] && !removed[u] {
				out = append(out, [2]int32{renum[v], renum[u]})
			}
		}
	}
	sortEdges(out)
	return out
}
