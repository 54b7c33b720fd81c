package topo

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"text/tabwriter"
)

// MaxPlanNodes is the largest fabric Plan designs.
const MaxPlanNodes = 4096

// The search's budgets. They are counts, not times, so a plan is the same
// on every machine: the lift search's in adjacency entries scanned
// (liftWorkPerNode per node of the plan), the swap search's in adjacency
// entries its incremental distance updates scan plus two per node per
// evaluation (planWorkPerNode per node, at least minPlanWork). 1,024 nodes
// take 2.6·10⁹ and 1.5·10⁹: some 200,000 lift and 30,000 swap
// evaluations.
const (
	liftWorkPerNode = 2_500_000
	planWorkPerNode = 1_500_000
	minPlanWork     = 24_000_000
	maxLiftWork     = 2_600_000_000 // beyond 1,024 nodes the budgets stay
	maxPlanWork     = 1_600_000_000
	planRestarts    = 4
	planStreams     = 2  // independent searches, run in parallel (more: streamsFor)
	attemptCost     = 64 // charged for a drawn swap that cannot be made
	annealTemp      = 2.0
	farSwapPct      = 50  // swaps that aim at a far pair
	farTemp         = 1.0 // in pairs, while the diameter is above the target
)

// Candidate is one topology the planner tried.
type Candidate struct {
	Kind     string  `json:"kind"`
	Diameter int     `json:"diameter"`
	AvgHops  float64 `json:"avg_hops"`
	// Error says why the kind does not apply to these parameters.
	Error string `json:"error,omitempty"`
}

// Proposal is the planner's proposed wiring for N nodes with at most K ports
// each, with how far it is from the Moore bound and from the largest known
// graph.
type Proposal struct {
	Nodes int   `json:"nodes"`
	Ports int   `json:"ports"`
	Seed  int64 `json:"seed"`
	// Source is where the wiring came from: a generator kind, a voltage
	// graph's lift ("lift of a 4-node base over Z32⋊Z8(r=5)", "trimmed
	// from" when it had more nodes), or "random-regular", each with
	// "+swaps" when the local search improved it.
	Source   string  `json:"source"`
	Graph    *Graph  `json:"-"`
	Links    []Link  `json:"links"`
	Diameter int     `json:"diameter"`
	AvgHops  float64 `json:"avg_hops"`
	// MooreDiameter and MooreAvgHops are the lower bounds no wiring of
	// Nodes nodes with Ports ports can beat.
	MooreDiameter int     `json:"moore_diameter"`
	MooreAvgHops  float64 `json:"moore_avg_hops"`
	// DiameterGap is Diameter - MooreDiameter; AvgHopsGap is
	// (AvgHops - MooreAvgHops) / MooreAvgHops (0.05 = 5% above the bound)
	// and AvgHopsOver is AvgHops - MooreAvgHops, in hops.
	DiameterGap int     `json:"diameter_gap"`
	AvgHopsGap  float64 `json:"avg_hops_gap"`
	AvgHopsOver float64 `json:"avg_hops_over"`
	// Record is the largest known graph of Ports ports with at least
	// Nodes nodes (the least such diameter); RecordGap is Diameter -
	// Record.Diameter. Absent outside the table (see RecordFor).
	Record    *Record `json:"record,omitempty"`
	RecordGap int     `json:"record_gap"`
	// Streams is the number of independent searches the plan ran;
	// LiftEvaluations counts their voltage-graph searches' evaluations,
	// Evaluations their link-swap searches'; Swaps the link swaps that
	// gave a stream a new best wiring.
	Streams         int         `json:"streams"`
	LiftEvaluations int         `json:"lift_evaluations"`
	Evaluations     int         `json:"evaluations"`
	Swaps           int         `json:"swaps"`
	Candidates      []Candidate `json:"candidates"`
	work            int64       // the swap search's adjacency entries scanned
}

// Plan proposes a wiring for n nodes with at most k ports each that
// minimises the diameter, then the average hop count. It aims at the
// diameter of the largest known graph (RecordFor; the Moore bound's
// outside the table) and
//
//   - evaluates every generator kind;
//   - searches voltage graphs: random small base multigraphs over cyclic
//     and metacyclic groups of order n/b (or a little above n, the lift
//     then trimmed to n nodes with the freed ports rewired), annealing
//     one voltage at a time; symmetry makes an evaluation b
//     breadth-first searches instead of n;
//   - improves the best wiring found (or random near-regular samples when
//     there is no lift) by degree-preserving link swaps: a swap that
//     raises the diameter is refused; otherwise its cost is the change in
//     the total hop count plus a quarter of the change in the number of
//     pairs at the diameter's distance (while the diameter is above the
//     target, only the latter), and a costlier swap is still taken with
//     probability exp(-cost/T) while T cools to zero (simulated
//     annealing). Half the
//     swaps aim at a pair of nodes at the diameter's distance: they wire
//     one of them straight to a node near the other.
//
// The lift and swap searches run as independent streams in parallel (two;
// up to eight below 256 nodes), each with its own seeded source; the best
// wiring seen wins, a tie going to the lower stream. Every budget is a
// count of work, so the result depends only on (n, k, seed).
func Plan(n, k int, seed int64) (*Proposal, error) {
	return planWith(n, k, seed, defaultBudget(n))
}

// planBudget is what one plan may spend: each stream's lift and swap
// search work, and the number of streams.
type planBudget struct {
	lift, swap int64
	streams    int
}

// defaultBudget is Plan's budget for n nodes.
func defaultBudget(n int) planBudget {
	return planBudget{
		lift:    min(int64(liftWorkPerNode)*int64(n), maxLiftWork),
		swap:    min(max(int64(planWorkPerNode)*int64(n), minPlanWork), maxPlanWork),
		streams: streamsFor(n),
	}
}

// streamsFor is the number of search streams for n nodes: planStreams,
// and more between 64 and 255 nodes (8 at 64, 4 at 128), whose searches
// are short. Stream i draws the same at any count, so more streams never
// give a worse plan.
func streamsFor(n int) int {
	if n < 64 {
		return planStreams
	}
	return min(max(512/n, planStreams), 8)
}

// scaled is b with every stream's work multiplied by f.
func (b planBudget) scaled(f float64) planBudget {
	b.lift = int64(float64(b.lift) * f)
	b.swap = int64(float64(b.swap) * f)
	return b
}

// planWith is Plan under the given budget (TestPlanTable scales it).
func planWith(n, k int, seed int64, budget planBudget) (*Proposal, error) {
	switch {
	case n < 1 || n > MaxPlanNodes:
		return nil, fmt.Errorf("plan %d nodes (1..%d): %w", n, MaxPlanNodes, ErrImpossible)
	case k < 1 && n > 1, k == 1 && n > 2:
		return nil, fmt.Errorf("plan %d nodes with %d ports: cannot connect them: %w", n, k, ErrImpossible)
	}
	p := &Proposal{Nodes: n, Ports: k, Seed: seed}
	p.MooreDiameter, _ = MooreDiameter(n, k)
	p.MooreAvgHops, _ = MooreAvgHops(n, k)
	target := p.MooreDiameter
	if r, ok := RecordFor(n, k); ok {
		p.Record = &r
		target = r.Diameter
	}

	var best *Graph
	bestD, bestAvg := -1, 0.0
	better := func(d int, avg float64) bool {
		return best == nil || d < bestD || (d == bestD && avg < bestAvg)
	}
	for _, gen := range generators {
		kind := gen.kind
		g, err := Generate(kind, n, Options{Ports: k, Seed: seed})
		if err != nil {
			p.Candidates = append(p.Candidates, Candidate{Kind: kind, Diameter: -1, Error: err.Error()})
			continue
		}
		m := g.Metrics()
		p.Candidates = append(p.Candidates, Candidate{Kind: kind, Diameter: m.Diameter, AvgHops: m.AvgHops})
		if m.Connected && better(m.Diameter, m.AvgHops) {
			best, bestD, bestAvg, p.Source = g, m.Diameter, m.AvgHops, kind
		}
	}
	if best == nil { // n <= 2 with too few ports for every kind's defaults
		edges := [][2]int32{}
		if n == 2 {
			edges = append(edges, [2]int32{0, 1})
		}
		best, _ = fromEdges("planned", n, edges)
		m := best.Metrics()
		bestD, bestAvg, p.Source = m.Diameter, m.AvgHops, "line"
	}

	kk := min(k, n-1)
	if kk >= 3 && kk < n-1 {
		p.Streams = budget.streams
		streams := make([]*stream, budget.streams)
		var wg sync.WaitGroup
		for i := range streams {
			streams[i] = &stream{}
			wg.Go(func() { streams[i].run(n, kk, target, seed, i, budget) })
		}
		wg.Wait()
		// merged in stream order, ties to the lower stream: the same
		// plan however the streams were scheduled
		for _, st := range streams {
			p.LiftEvaluations += st.liftEvals
			p.Evaluations += st.evals
			p.Swaps += st.swaps
			p.work += st.work
			p.Candidates = append(p.Candidates, st.candidates...)
			if st.edges != nil && better(st.d, st.avg) {
				best, _ = fromEdges("planned", n, st.edges)
				bestD, bestAvg, p.Source = st.d, st.avg, st.source
			}
		}
	}
	p.Graph = best
	p.Links = best.Links()
	p.Diameter, p.AvgHops = bestD, bestAvg
	p.DiameterGap = p.Diameter - p.MooreDiameter
	p.AvgHopsOver = p.AvgHops - p.MooreAvgHops
	if p.MooreAvgHops > 0 {
		p.AvgHopsGap = p.AvgHopsOver / p.MooreAvgHops
	}
	if p.Record != nil {
		p.RecordGap = p.Diameter - p.Record.Diameter
	}
	return p, nil
}

// stream is one of the plan's independent searches: a lift search, then
// the swap search from its best lift (or a random sample), drawing from
// its own seeded source.
type stream struct {
	liftEvals, evals, swaps int
	work                    int64 // the swap search's adjacency entries scanned
	candidates              []Candidate
	edges                   [][2]int32
	d                       int
	avg                     float64
	source                  string
}

// streamRand is stream i's source for seed: stream 0 draws what the
// single-stream planner drew.
func streamRand(seed int64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x5851f42d4c957f2d+uint64(i)*0x9e3779b97f4a7c15))
}

// run is stream i's search for n nodes of degree k (3 <= k < n-1).
func (st *stream) run(n, k, target int, seed int64, i int, budget planBudget) {
	rng := streamRand(seed, i)
	ev := newHopEvaluator(n)
	var start [][2]int32
	source := "random-regular"
	if k <= liftMaxDegree {
		if lr := searchLifts(n, k, target, budget.lift, rng); lr != nil {
			st.liftEvals = lr.evaluations
			start, source = trim(lr.order, n, lr.edges, rng), lr.name
			if lr.order != n {
				source += fmt.Sprintf(", trimmed from %d nodes", lr.order)
			}
			c := Candidate{Kind: source, Diameter: -1}
			adj := adjacencyOfEdges(n, start)
			if d, sum, ok := ev.eval(adj, n); ok {
				c.Diameter, c.AvgHops = d, float64(sum)/float64(int64(n)*int64(n-1))
			}
			st.candidates = append(st.candidates, c)
		}
	}
	// a random sample starts the swaps when it beats the lift
	if rr := nearRegular(n, k, rng); rr != nil {
		if start == nil || betterStart(ev, n, rr, start) {
			start, source = rr, "random-regular"
		}
	}
	st.edges, st.d, st.avg = st.search(n, k, target, start, budget.swap, rng)
	st.source = source
	if st.swaps > 0 {
		st.source += "+swaps"
	}
}

// betterStart reports whether edges a make a better wiring of n nodes than
// edges b: connected, then a smaller diameter, then fewer hops.
func betterStart(ev *hopEvaluator, n int, a, b [][2]int32) bool {
	da, sa, oka := ev.eval(adjacencyOfEdges(n, a), n)
	db, sb, okb := ev.eval(adjacencyOfEdges(n, b), n)
	return oka && (!okb || da < db || da == db && sa < sb)
}

// adjacencyOfEdges is the adjacency of n nodes with the given edges.
func adjacencyOfEdges(n int, edges [][2]int32) adjacency {
	adj := make(adjacency, n)
	for _, e := range edges {
		adj.add(e[0], e[1])
	}
	return adj
}

// search improves start (or, when it is nil, planRestarts random
// near-regular samples of degree k, the budget split between them) by
// link swaps under work units (adjacency entries the incremental distance
// updates scan, plus a row check per node per evaluation), and returns the
// best graph's edges, diameter and average hops.
//
// Every pair's distance is kept in a distMatrix, updated incrementally
// after each swap (and undone when the swap is refused), so an evaluation
// costs a small fraction of a search from every node. While pairs lie
// beyond the target diameter the cost is their excess (the hops beyond
// the target, summed over pairs), the hop sum breaking ties; once none
// does, a swap that puts one back is refused and the cost is the hop
// sum. A costlier swap is still taken with probability exp(-Δ/T), T
// cooling linearly to zero over the budget (simulated annealing); half
// the swaps aim at a pair of nodes beyond the target (at the diameter,
// once there), wiring one of them straight to a node near the other.
func (p *stream) search(n, k, target int, start [][2]int32, work int64, rng *rand.Rand) (best [][2]int32, bestD int, bestAvg float64) {
	lbSum, _ := mooreHopSum(n, k)
	lbSum *= int64(n)
	var bestSum, bestExc int64
	ball := newBall(n)
	restarts := planRestarts
	if start != nil {
		restarts = 1
	}
	for r := 0; r < restarts; r++ {
		edges := start
		if edges == nil {
			edges = nearRegular(n, k, rng)
		} else {
			edges = slices.Clone(edges)
		}
		if edges == nil {
			continue
		}
		adj := adjacencyOfEdges(n, edges)
		m, ok := newDistMatrix(adj)
		if !ok {
			if start != nil { // a trimmed lift that fell apart
				start, restarts, r = nil, planRestarts, -1
			}
			continue
		}
		budget := work / int64(restarts)
		spent := int64(0)
		perEval := int64(2 * n) // the row checks of an evaluation
		sum, exc := m.sum, m.excess(target)
		// fewer hops beyond the target, then fewer hops
		improves := func(exc, sum int64) bool {
			return best == nil || exc < bestExc || exc == bestExc && sum < bestSum
		}
		if improves(exc, sum) {
			best, bestD, bestSum, bestExc = append(best[:0], edges...), m.diameter(), sum, exc
		}
		work0 := m.work
		for spent < budget && !(bestExc == 0 && bestSum == lbSum) {
			var s edgeSwap
			if rng.IntN(100) < farSwapPct {
				thr := target + 1
				if exc == 0 {
					thr = m.diameter()
				}
				fp, found := m.farPair(thr, rng)
				spent += int64(n) / 8
				if found && thr > 1 {
					s, ok = ball.shortcut(adj, edges, fp, max(thr-3, 0), rng)
				} else {
					s, ok = swapEdges(adj, edges, rng)
				}
			} else {
				s, ok = swapEdges(adj, edges, rng)
			}
			if !ok {
				spent += attemptCost
				continue
			}
			conn := m.swapped(adj, s)
			p.evals++
			spent = m.work - work0 + int64(p.evals)*perEval
			nexc, nsum := m.excess(target), m.sum
			cool := float64(budget-spent) / float64(budget)
			var delta, temp float64
			if exc > 0 {
				delta = float64(nexc-exc) + float64(nsum-sum)/float64(int64(n)*int64(n))
				temp = farTemp * cool
			} else {
				delta = float64(nsum - sum)
				temp = annealTemp * cool
			}
			if conn && (exc > 0 || nexc == 0) && (delta <= 0 || rng.Float64() < math.Exp(-delta/temp)) {
				exc, sum = nexc, nsum
				if improves(exc, sum) {
					p.swaps++
					best, bestD, bestSum, bestExc = append(best[:0], edges...), m.diameter(), sum, exc
				}
			} else {
				m.undo()
				s.undo(adj, edges)
			}
		}
		p.work += m.work
	}
	if best == nil {
		return nil, 0, 0
	}
	sortEdges(best)
	return best, bestD, float64(bestSum) / float64(int64(n)*int64(n-1))
}

// nearRegular samples a connected graph where every node has k links,
// except one node with k-1 when n·k is odd. Preconditions: 3 <= k < n-1.
func nearRegular(n, k int, rng *rand.Rand) [][2]int32 {
	if n*k%2 == 0 {
		edges, ok := randomRegular(n, k, rng)
		if !ok {
			return nil
		}
		return edges
	}
	// n and k odd: a k-regular graph on n-1 nodes, then node n-1 takes
	// (k-1)/2 node-disjoint links a-b and splits each into a-x-b.
	edges, ok := randomRegular(n-1, k, rng)
	if !ok {
		return nil
	}
	x := int32(n - 1)
	used := make([]bool, n)
	for split := 0; split < (k-1)/2; {
		i := rng.IntN(len(edges))
		a, b := edges[i][0], edges[i][1]
		if a == x || b == x || used[a] || used[b] {
			continue
		}
		used[a], used[b] = true, true
		edges[i] = [2]int32{a, x}
		edges = append(edges, [2]int32{b, x})
		split++
	}
	sortEdges(edges)
	return edges
}

// WriteText writes the plan as the report of `dpuctl topo plan`: the
// summary, every candidate kind, and the wiring (one line per link).
func (p *Proposal) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "plan\t%d nodes, %d ports per node, seed %d\n", p.Nodes, p.Ports, p.Seed)
	fmt.Fprintf(tw, "wiring\t%s, %d links\n", p.Source, len(p.Links))
	fmt.Fprintf(tw, "diameter\t%d\t(Moore bound %d, gap %d)\n", p.Diameter, p.MooreDiameter, p.DiameterGap)
	fmt.Fprintf(tw, "average hops\t%.3f\t(Moore bound %.3f, gap %+.3f, %+.1f%%)\n", p.AvgHops, p.MooreAvgHops, p.AvgHopsOver, 100*p.AvgHopsGap)
	if p.Record != nil {
		fmt.Fprintf(tw, "record\t%d\t(largest known graph of %d ports and diameter %d: %d nodes; gap %d)\n",
			p.Record.Diameter, p.Record.Ports, p.Record.Diameter, p.Record.Nodes, p.RecordGap)
	}
	fmt.Fprintf(tw, "search\t%d lift evaluations, %d swap evaluations, %d swaps to a new best, in %d streams\n",
		p.LiftEvaluations, p.Evaluations, p.Swaps, p.Streams)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("plan text: %w", err)
	}
	fmt.Fprintf(tw, "\ncandidate\tdiameter\tavg hops\n")
	for _, c := range p.Candidates {
		if c.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t%s\n", c.Kind, c.Error)
		} else if c.Diameter < 0 {
			fmt.Fprintf(tw, "%s\tdisconnected\t-\n", c.Kind)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%.3f\n", c.Kind, c.Diameter, c.AvgHops)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("plan text: %w", err)
	}
	fmt.Fprintf(tw, "\nnode\tport\tnode\tport\n")
	for _, l := range p.Links {
		fmt.Fprintf(tw, "%v\t%d\t%v\t%d\n", l.A, l.PortA, l.B, l.PortB)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("plan text: %w", err)
	}
	return nil
}

// ball is scratch for a breadth-first search to a bounded depth.
type ball struct {
	seen  []uint32
	stamp uint32
	queue []int32
}

func newBall(n int) *ball { return &ball{seen: make([]uint32, n), queue: make([]int32, 0, n)} }

// within returns the nodes at most depth hops from v (v first); the slice
// is reused by the next call.
func (b *ball) within(adj adjacency, v int32, depth int) []int32 {
	b.stamp++
	if b.stamp == 0 {
		clear(b.seen)
		b.stamp = 1
	}
	q := append(b.queue[:0], v)
	b.seen[v] = b.stamp
	for h, d := 0, 0; h < len(q) && d < depth; d++ {
		for end := len(q); h < end; h++ {
			for _, w := range adj[q[h]] {
				if b.seen[w] != b.stamp {
					b.seen[w] = b.stamp
					q = append(q, w)
				}
			}
		}
	}
	b.queue = q
	return q
}

// shortcut tries the swap that brings a far pair (u, v) close: a link
// u-u' and a link y-y', y at most depth hops from v, become u-y and u'-y'
// (ends taken in random order and at random).
func (b *ball) shortcut(adj adjacency, edges [][2]int32, far [2]int32, depth int, rng *rand.Rand) (edgeSwap, bool) {
	u, v := far[0], far[1]
	if rng.IntN(2) == 1 {
		u, v = v, u
	}
	near := b.within(adj, v, rng.IntN(depth+1))
	y := near[rng.IntN(len(near))]
	if y == u || adj.has(u, y) || len(adj[u]) == 0 || len(adj[y]) == 0 {
		return edgeSwap{}, false
	}
	u2 := adj[u][rng.IntN(len(adj[u]))]
	y2 := adj[y][rng.IntN(len(adj[y]))]
	i := slices.Index(edges, [2]int32{min(u, u2), max(u, u2)})
	j := slices.Index(edges, [2]int32{min(y, y2), max(y, y2)})
	if i < 0 || j < 0 {
		return edgeSwap{}, false
	}
	// swapEdgesAt joins edges[i][0] to edges[j][0] (edges[j][1] with flip)
	flip := (edges[i][0] == u) != (edges[j][0] == y)
	return swapEdgesAt(adj, edges, i, j, flip)
}
