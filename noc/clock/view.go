package clock

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Estimate is what this node knows of another node's clock at one time.
type Estimate struct {
	Node noc.NodeID
	// Offset is the other clock minus this one; the truth lies within
	// Bound of it.
	Offset, Bound time.Duration
	// Rate is how fast the offset grows (seconds per second).
	Rate float64
	// Hops is the length of the shortest measured path to the node; Port
	// the first hop's port.
	Hops int
	Port noc.PortID
}

// View is the composition of every measurement at one time.
type View struct {
	At        time.Duration // this clock's time
	Self      noc.NodeID
	Estimates []Estimate // by node id, self excluded
	Excluded  []Exclusion
	// Inconsistent: the measurements contradicted each other around a
	// loop; the estimates are the paths' alone (no loop correction).
	Inconsistent bool
	// Timeline is the timeline this node follows (HasTimeline), and ref
	// its estimate of the reference's clock now.
	Timeline    Timeline
	HasTimeline bool
	ref         Estimate
}

// Timestamp is a cluster time: the reference node's clock plus its
// timeline's K, with the error bound of this node's estimate of it.
// Timestamps of one timeline (Line.Origin) compare.
type Timestamp struct {
	Time, Error time.Duration
	Ref         noc.NodeID
	Line        Timeline
	// OnLine: the node follows a timeline; else it has none yet (it
	// started lately) and Line is its reference's own.
	OnLine bool
}

// Get returns the estimate of node n.
func (v View) Get(n noc.NodeID) (Estimate, bool) {
	i, ok := slices.BinarySearchFunc(v.Estimates, n, func(e Estimate, n noc.NodeID) int { return cmp.Compare(e.Node, n) })
	if !ok {
		return Estimate{}, false
	}
	return v.Estimates[i], true
}

// Cluster is the cluster timestamp of this view: on the timeline the
// node follows (timeline.go); before it follows one, the clock of the
// lowest-numbered node known, this one included, on a timeline of that
// node's own.
func (v View) Cluster() Timestamp {
	if v.HasTimeline {
		return Timestamp{Time: v.At + v.ref.Offset + v.Timeline.K, Error: v.ref.Bound, Ref: v.Timeline.Ref, Line: v.Timeline, OnLine: true}
	}
	if len(v.Estimates) > 0 && v.Estimates[0].Node < v.Self {
		e := v.Estimates[0]
		return Timestamp{Time: v.At + e.Offset, Error: e.Bound, Ref: e.Node, Line: Timeline{Origin: e.Node, Ref: e.Node}}
	}
	return Timestamp{Time: v.At, Ref: v.Self, Line: Timeline{Origin: v.Self, Ref: v.Self}}
}

// Now is the cluster timestamp at now.
func (c *Clock) Now(now time.Duration) Timestamp {
	v := c.View(now)
	return v.Cluster()
}

// constraint: lo <= x[b] - x[a] <= hi.
type constraint struct {
	a, b   int
	lo, hi time.Duration
}

// node of the composition.
type vnode struct {
	id     noc.NodeID
	known  bool // reached breadth first
	lo, hi time.Duration
	rate   float64
	hops   int
	port   noc.PortID
}

const inf = time.Duration(math.MaxInt64 / 4)

// View composes the neighbours' filters and the reports into an estimate
// of every node reachable through measured links (see the package
// documentation, "The fabric"), with the timeline the node follows.
func (c *Clock) View(now time.Duration) View {
	v := c.view(now)
	c.timestamp(&v)
	return v
}

// view is View without the timeline.
func (c *Clock) view(now time.Duration) View {
	v := View{At: now, Self: c.cfg.Self, Excluded: c.Excluded(now)}
	index := map[noc.NodeID]int{c.cfg.Self: 0}
	nodes := []vnode{{id: c.cfg.Self, known: true, port: noc.NoPort}}
	at := func(id noc.NodeID) int {
		if i, ok := index[id]; ok {
			return i
		}
		index[id] = len(nodes)
		nodes = append(nodes, vnode{id: id})
		return len(nodes) - 1
	}
	var cons []constraint
	var queue []int
	// The own links first: offsets at this clock's time, no conversion.
	for p, pr := range c.peers {
		if !pr.known || pr.out || !pr.f.valid || pr.node == c.cfg.Self {
			continue
		}
		lo, hi := pr.f.line.Eval(now)
		b := at(pr.node)
		cons = append(cons, constraint{a: 0, b: b, lo: lo, hi: hi})
		n := &nodes[b]
		if !n.known {
			*n = vnode{id: pr.node, known: true, lo: lo, hi: hi, rate: pr.f.line.Rate, hops: 1, port: noc.PortID(p)}
			queue = append(queue, b)
		} else {
			n.lo, n.hi = max(n.lo, lo), min(n.hi, hi)
		}
	}
	// Breadth first through the reports: a report is evaluated at its
	// origin's time, known once the origin is reached.
	confirms := func(r *report, n noc.NodeID) bool {
		for i := range r.Links {
			if r.Links[i].Node == n {
				return true
			}
		}
		return false
	}
	used := map[noc.NodeID]bool{}
	use := func(ai int) {
		a := nodes[ai]
		r := c.reports[a.id]
		if r == nil || used[a.id] || now-r.heard > c.cfg.ReportTTL {
			return
		}
		used[a.id] = true
		m, e := mid(a.lo, a.hi)
		ta := now + m
		for i := range r.Links {
			lr := &r.Links[i]
			var lo, hi time.Duration
			if lr.Node == c.cfg.Self {
				// a's measurement of this node: x_self - x_a.
				if !c.measures(a.id) {
					continue
				}
				l, h := lr.Line.Eval(ta)
				w := ceilDur(lr.Line.Slope()*float64(e)) + 1
				lo, hi = -(h + w), -(l - w)
				cons = append(cons, constraint{a: 0, b: ai, lo: lo, hi: hi})
				continue
			}
			other := c.reports[lr.Node]
			if lr.Node != c.cfg.Self && (other == nil || now-other.heard > c.cfg.ReportTTL || !confirms(other, a.id)) {
				continue // no second node vouches for the link
			}
			l, h := lr.Line.Eval(ta)
			w := ceilDur(lr.Line.Slope()*float64(e)) + 1
			lo, hi = l-w, h+w
			bi := at(lr.Node)
			cons = append(cons, constraint{a: ai, b: bi, lo: lo, hi: hi})
			if b := &nodes[bi]; !b.known {
				a := nodes[ai]
				*b = vnode{id: lr.Node, known: true, lo: a.lo + lo, hi: a.hi + hi, rate: a.rate + lr.Line.Rate, hops: a.hops + 1, port: a.port}
				queue = append(queue, bi)
			}
		}
	}
	for len(queue) > 0 {
		ai := queue[0]
		queue = queue[1:]
		use(ai)
	}
	lo, hi, ok := solve(len(nodes), cons)
	if !ok {
		v.Inconsistent = true
		c.stats.Inconsistent++
	}
	for i := 1; i < len(nodes); i++ {
		n := nodes[i]
		if !n.known {
			continue
		}
		l, h := n.lo, n.hi
		if ok {
			l, h = max(l, lo[i]), min(h, hi[i])
		}
		m, b := mid(l, h)
		v.Estimates = append(v.Estimates, Estimate{Node: n.id, Offset: m, Bound: b, Rate: n.rate, Hops: n.hops, Port: n.port})
	}
	slices.SortFunc(v.Estimates, func(a, b Estimate) int { return cmp.Compare(a.Node, b.Node) })
	return v
}

// measures reports whether this node has its own estimate of neighbour n.
func (c *Clock) measures(n noc.NodeID) bool {
	for _, pr := range c.peers {
		if pr.known && pr.node == n && !pr.out && pr.f.valid {
			return true
		}
	}
	return false
}

// solve finds, for each variable x_k with x_0 = 0, the smallest and
// largest value the difference constraints allow (Bellman-Ford both
// ways). ok is false on a negative cycle: the constraints contradict.
func solve(n int, cons []constraint) (lo, hi []time.Duration, ok bool) {
	hi = make([]time.Duration, n)
	lo = make([]time.Duration, n)
	for i := 1; i < n; i++ {
		hi[i], lo[i] = inf, -inf
	}
	for range n + 1 {
		changed := false
		for _, k := range cons {
			// hi: x_b <= x_a + k.hi and x_a <= x_b - k.lo.
			if hi[k.a] < inf && hi[k.a]+k.hi < hi[k.b] {
				hi[k.b], changed = hi[k.a]+k.hi, true
			}
			if hi[k.b] < inf && hi[k.b]-k.lo < hi[k.a] {
				hi[k.a], changed = hi[k.b]-k.lo, true
			}
			// lo: x_b >= x_a + k.lo and x_a >= x_b - k.hi.
			if lo[k.a] > -inf && lo[k.a]+k.lo > lo[k.b] {
				lo[k.b], changed = lo[k.a]+k.lo, true
			}
			if lo[k.b] > -inf && lo[k.b]-k.hi > lo[k.a] {
				lo[k.a], changed = lo[k.b]-k.hi, true
			}
		}
		if !changed {
			for i := range n {
				if lo[i] > hi[i] {
					return nil, nil, false
				}
			}
			return lo, hi, hi[0] == 0 && lo[0] == 0
		}
	}
	return nil, nil, false
}
