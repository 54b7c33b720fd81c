package topo

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"
)

// MaxPlanNodes is the largest fabric Plan designs.
const MaxPlanNodes = 4096

// The local search's budget, in word operations of the hop evaluator
// (see hopEvaluator.cost). It is a count, not a time, so a plan is the
// same on every machine; 64 nodes with 4 ports take well under 100 ms.
const (
	planWork     = 24_000_000
	planRestarts = 4
	attemptCost  = 64 // charged for a drawn swap that cannot be made
	annealTemp   = 2.0
	farWeight    = 0.25
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
// each, with how far it is from the Moore bound.
type Proposal struct {
	Nodes int   `json:"nodes"`
	Ports int   `json:"ports"`
	Seed  int64 `json:"seed"`
	// Source is where the wiring came from: a generator kind, or
	// "random-regular+swaps" for a sample improved by local search.
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
	// (AvgHops - MooreAvgHops) / MooreAvgHops (0.05 = 5% above the bound).
	DiameterGap int     `json:"diameter_gap"`
	AvgHopsGap  float64 `json:"avg_hops_gap"`
	// Evaluations counts the local search's graph evaluations; Swaps the
	// link swaps that gave a new best wiring.
	Evaluations int         `json:"evaluations"`
	Swaps       int         `json:"swaps"`
	Candidates  []Candidate `json:"candidates"`
}

// Plan proposes a wiring for n nodes with at most k ports each that
// minimises the diameter, then the average hop count. It evaluates every
// generator kind, then improves random near-regular samples of degree k
// by degree-preserving link swaps under a fixed work budget: a swap that
// raises the diameter is refused; otherwise its cost is the change in the
// total hop count plus a quarter of the change in the number of pairs at
// the diameter's distance, and a costlier swap is still taken with
// probability exp(-cost/T) while the temperature T cools to zero
// (simulated annealing). The best wiring seen wins. The result depends
// only on (n, k, seed).
func Plan(n, k int, seed int64) (*Proposal, error) {
	switch {
	case n < 1 || n > MaxPlanNodes:
		return nil, fmt.Errorf("plan %d nodes (1..%d): %w", n, MaxPlanNodes, ErrImpossible)
	case k < 1 && n > 1, k == 1 && n > 2:
		return nil, fmt.Errorf("plan %d nodes with %d ports: cannot connect them: %w", n, k, ErrImpossible)
	}
	p := &Proposal{Nodes: n, Ports: k, Seed: seed}
	p.MooreDiameter, _ = MooreDiameter(n, k)
	p.MooreAvgHops, _ = MooreAvgHops(n, k)

	var best *Graph
	bestD, bestAvg := -1, 0.0
	better := func(d int, avg float64) bool {
		return best == nil || d < bestD || (d == bestD && avg < bestAvg)
	}
	for _, kind := range Kinds() {
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
		edges, d, avg := p.search(n, kk, seed)
		if edges != nil && better(d, avg) {
			best, _ = fromEdges("planned", n, edges)
			bestD, bestAvg, p.Source = d, avg, "random-regular+swaps"
		}
	}
	p.Graph = best
	p.Links = best.Links()
	p.Diameter, p.AvgHops = bestD, bestAvg
	p.DiameterGap = p.Diameter - p.MooreDiameter
	if p.MooreAvgHops > 0 {
		p.AvgHopsGap = (p.AvgHops - p.MooreAvgHops) / p.MooreAvgHops
	}
	return p, nil
}

// search runs planRestarts local searches from random near-regular
// samples of degree k and returns the best graph's edges, diameter and
// average hops.
func (p *Proposal) search(n, k int, seed int64) (best [][2]int32, bestD int, bestAvg float64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5851f42d4c957f2d))
	ev := newHopEvaluator(n)
	lbSum, _ := mooreHopSum(n, k)
	lbSum *= int64(n)
	var bestSum int64
	for r := 0; r < planRestarts; r++ {
		edges := nearRegular(n, k, rng)
		adj := make(adjacency, n)
		for _, e := range edges {
			adj.add(e[0], e[1])
		}
		d, sum, far, ok := ev.evalFar(adj, n)
		if !ok {
			continue
		}
		budget := int64(planWork / planRestarts)
		spent := ev.cost(len(edges), d)
		if best == nil || d < bestD || (d == bestD && sum < bestSum) {
			best, bestD, bestSum = append(best[:0], edges...), d, sum
		}
		for spent < budget && !(bestD == p.MooreDiameter && bestSum == lbSum) {
			s, ok := swapEdges(adj, edges, rng)
			if !ok {
				spent += attemptCost
				continue
			}
			nd, nsum, nfar, ok := ev.evalFar(adj, d)
			spent += ev.cost(len(edges), d)
			p.Evaluations++
			// Annealing on the hop sum: a worse sum (same or better
			// diameter) is taken with probability exp(-Δ/T), T cooling
			// linearly to zero over the budget.
			temp := annealTemp * float64(budget-spent) / float64(budget)
			delta := float64(nsum-sum) + farWeight*float64(nfar-far)
			if ok && (nd < d || delta <= 0 || rng.Float64() < math.Exp(-delta/temp)) {
				d, sum, far = nd, nsum, nfar
				if d < bestD || (d == bestD && sum < bestSum) {
					p.Swaps++
					best, bestD, bestSum = append(best[:0], edges...), d, sum
				}
			} else {
				s.undo(adj, edges)
			}
		}
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
	fmt.Fprintf(tw, "average hops\t%.3f\t(Moore bound %.3f, gap %+.1f%%)\n", p.AvgHops, p.MooreAvgHops, 100*p.AvgHopsGap)
	fmt.Fprintf(tw, "search\t%d evaluations, %d swaps to a new best\n", p.Evaluations, p.Swaps)
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
