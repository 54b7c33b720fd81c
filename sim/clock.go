package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/aitherion/dpu/internal/timeq"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/route"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
)

// ClockConfig shapes a run of the fabric clock scenario (RunClock): node
// cores over the real link layer with clock timestamps, every node with a
// clock of its own (an offset and a rate), every direction of every link
// with a delay of its own plus jitter.
type ClockConfig struct {
	Seed  uint64
	Nodes int    // default 64
	Topo  string // default smallworld
	// Skew and Drift bound each node's clock: C(t) = 2 s + off + (1+rate)·t
	// with off uniform in ±Skew (default 1 s) and rate in ±Drift
	// (default 100 ppm).
	Skew  time.Duration
	Drift float64
	// Every direction of every link takes a base delay uniform in
	// [0, Base] (default 50 µs, drawn once per direction: the links are
	// asymmetric) plus a uniform share of Jitter (default 50 µs) per
	// datagram.
	Base, Jitter time.Duration
	// Duration is the virtual time run (default 30 s); from Warmup
	// (default 20 s: the estimator's window filled) on, every node must
	// know every other within the bound target.
	Duration, Warmup time.Duration
	// CheckEvery is how often every node's view is checked (default 100 ms).
	CheckEvery time.Duration
	// Faulty nodes (default 0) have dishonest clocks: one in two steps its
	// clock by 20 ms at Warmup/2, the other runs 2000 ppm fast. Their
	// neighbours must exclude them; the checks on everyone else hold.
	Faulty int
	// Restart stops the cluster time's reference (the lowest-numbered
	// honest node) at Warmup/2: nothing reaches it or leaves it; 4 s later
	// it starts again with a fresh core. The cluster time must go on
	// without a jump across both hand-overs of its timeline, and the
	// restarted node is then held to the correctness of its estimates
	// only (not to the bound target or to knowing every node).
	Restart bool
	// Bug plants an estimator bug (tests of the checker, -tags dpubug).
	Bug clock.PlantedBug
}

func (c ClockConfig) withDefaults() ClockConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 64
	}
	if c.Topo == "" {
		c.Topo = "smallworld"
	}
	if c.Drift == 0 {
		c.Drift = 100e-6
	}
	def(&c.Skew, time.Second)
	def(&c.Base, 50*time.Microsecond)
	def(&c.Jitter, 50*time.Microsecond)
	def(&c.Duration, 30*time.Second)
	def(&c.Warmup, 20*time.Second)
	def(&c.CheckEvery, 100*time.Millisecond)
	return c
}

// ClockResult is what a clock run found.
type ClockResult struct {
	Seed uint64
	// Checked counts (node, other node) estimates checked against the
	// truth; Within those whose error was within their bound.
	Checked, Within int
	// WorstError is the largest error as a share of its bound; WorstBound
	// the largest bound after the warm-up as a share of twice the path's
	// one-way jitter (the target is ≤ 1). MeanBound is the mean bound
	// after the warm-up, MeanError the mean absolute error.
	WorstError, WorstBound float64
	MeanBound, MeanError   time.Duration
	// ClusterChecked counts nodes' cluster timestamps checked against the
	// truth (their reference's clock plus their timeline's K),
	// ClusterWithin those within their error; Handovers the changes of a
	// node's timeline reference seen, WorstJump the largest move of the
	// cluster time's truth at one of them.
	ClusterChecked, ClusterWithin, Handovers int
	WorstJump                                time.Duration
	// Excluded counts exclusions of neighbours (faulty nodes' included).
	Excluded   uint64
	Exclusions []string // who excluded whom, and why
	Datagrams  uint64
	Virtual    time.Duration
	TraceHash  uint64
	Violations []string
}

// OK reports whether the run found no violation.
func (r *ClockResult) OK() bool { return len(r.Violations) == 0 }

// Summary is the result on one line.
func (r *ClockResult) Summary() string {
	return fmt.Sprintf("seed=%d checked=%d within=%d worst_err/bound=%.3f worst_bound/2jitter=%.3f mean_bound=%v mean_err=%v cluster_checked=%d cluster_within=%d handovers=%d worst_jump=%v excluded=%d datagrams=%d virtual=%v trace=%016x violations=%d",
		r.Seed, r.Checked, r.Within, r.WorstError, r.WorstBound, r.MeanBound, r.MeanError, r.ClusterChecked, r.ClusterWithin, r.Handovers, r.WorstJump, r.Excluded, r.Datagrams, r.Virtual, r.TraceHash, len(r.Violations))
}

type clockNode struct {
	core   *node.Core
	off    time.Duration // local clock at t = 0
	rate   float64
	faulty int // 0 honest, 1 steps, 2 too fast
	step   time.Duration
	tick   time.Duration // the tick event queued (global time)
	ticked bool
	down   bool // stopped (Restart)
	fresh  bool // restarted: held to correctness only
	// the last cluster timestamp checked: its timeline, when (global
	// time), what it said, the node's clock then, its error
	line                                 clock.Timeline
	hasLine                              bool
	lineAt, lineTime, lineLocal, lineErr time.Duration
}

// local is node n's clock at global time t.
func (n *clockNode) local(t time.Duration) time.Duration {
	l := n.off + t + time.Duration(math.Round(n.rate*float64(t)))
	if n.faulty == 1 && t >= n.step {
		l += 20 * time.Millisecond
	}
	return l
}

// coreTime is what node n's core is handed at global time t: its clock
// less the epoch.
func (n *clockNode) coreTime(t time.Duration) time.Duration { return n.local(t) - n.off }

// global is the first global time at which n's clock reads at least l.
func (n *clockNode) global(l time.Duration) time.Duration {
	at := func(l time.Duration) time.Duration {
		return time.Duration(math.Floor(float64(l-n.off) / (1 + n.rate)))
	}
	g := at(l)
	if n.faulty == 1 && g >= n.step {
		g = max(at(l-20*time.Millisecond), n.step)
	}
	g = max(g-2, 0)
	for n.local(g) < l {
		g++
	}
	return g
}

type clockEvent struct {
	kind int // 0 deliver, 1 tick, 2 check, 3 stop, 4 restart
	node int
	port noc.PortID
	data []byte
}

type clockWorld struct {
	cfg   ClockConfig
	g     *topo.Graph
	nodes []*clockNode
	base  [][]time.Duration // node, port -> base delay of what it sends
	rng   *rand.Rand
	q     timeq.Queue[clockEvent]
	seq   uint64
	now   time.Duration
	buf   []byte
	res   ClockResult
	hops  [][]int
	// excludedBy[i] holds the nodes that excluded node i (and why).
	excludedBy map[int]map[int]string
	sumB       float64
	sumE       float64
	nB         int
}

// RunClock runs the fabric clock scenario and checks, every CheckEvery,
// that every node's estimate of every other node is within its bound, and
// from Warmup on that every node knows every other with a bound of at
// most twice the path's one-way jitter (hops × Jitter).
func RunClock(cfg ClockConfig) (ClockResult, error) {
	cfg = cfg.withDefaults()
	g, err := topo.Generate(cfg.Topo, cfg.Nodes, topo.Options{Seed: int64(cfg.Seed)})
	if err != nil {
		return ClockResult{}, fmt.Errorf("sim: %w", err)
	}
	w := &clockWorld{cfg: cfg, g: g, rng: derive(cfg.Seed, 11), buf: make([]byte, mtu), excludedBy: map[int]map[int]string{}}
	w.res.Seed = cfg.Seed
	crng := derive(cfg.Seed, 12)
	faulty := map[int]int{}
	for k, i := range crng.Perm(cfg.Nodes)[:min(cfg.Faulty, cfg.Nodes)] {
		faulty[i] = 1 + k%2
	}
	for i := range g.N() {
		n := &clockNode{
			off:  2*time.Second + time.Duration(crng.Int64N(int64(2*cfg.Skew+1))) - cfg.Skew,
			rate: (crng.Float64()*2 - 1) * cfg.Drift,
		}
		n.faulty, n.step = faulty[i], cfg.Warmup/2
		if n.faulty == 2 {
			n.rate = 2000e-6
		}
		core, err := w.newCore(i, n, crng.Uint64(), 0)
		if err != nil {
			return ClockResult{}, err
		}
		n.core = core
		w.base = append(w.base, make([]time.Duration, g.Ports(noc.NodeID(i))))
		for p := range w.base[i] {
			w.base[i][p] = time.Duration(crng.Int64N(int64(cfg.Base) + 1))
		}
		w.nodes = append(w.nodes, n)
	}
	for i := range g.N() {
		w.hops = append(w.hops, g.Distances(noc.NodeID(i)))
	}
	h := fnv.New64a()
	for i := range w.nodes {
		w.flush(i)
	}
	w.push(cfg.CheckEvery, clockEvent{kind: 2})
	if cfg.Restart {
		for i, n := range w.nodes {
			if n.faulty == 0 {
				w.push(cfg.Warmup/2, clockEvent{kind: 3, node: i})
				w.push(cfg.Warmup/2+4*time.Second, clockEvent{kind: 4, node: i})
				break
			}
		}
	}
	for w.q.Len() > 0 {
		k, ev := w.q.Pop()
		if k.At > cfg.Duration {
			break
		}
		w.now = k.At
		switch ev.kind {
		case 0:
			n := w.nodes[ev.node]
			if n.down {
				continue
			}
			_ = n.core.Input(n.coreTime(w.now), ev.port, ev.data) // refusals are counted by the link
			w.flush(ev.node)
		case 1:
			n := w.nodes[ev.node]
			if n.tick != w.now || n.down {
				continue // superseded
			}
			n.ticked = false
			n.core.Tick(n.coreTime(w.now))
			w.flush(ev.node)
		case 2:
			w.checkClocks(h)
			w.push(w.now+cfg.CheckEvery, clockEvent{kind: 2})
		case 3:
			w.nodes[ev.node].down = true
		case 4:
			n := w.nodes[ev.node]
			core, err := w.newCore(ev.node, n, crng.Uint64(), w.now)
			if err != nil {
				return ClockResult{}, err
			}
			n.core, n.down, n.fresh, n.ticked, n.hasLine = core, false, true, false, false
			w.flush(ev.node)
		}
	}
	for _, n := range w.nodes {
		w.res.Excluded += n.core.Clock().Stats().Exclusions
	}
	w.res.Virtual = w.now
	w.res.TraceHash = h.Sum64()
	if w.nB > 0 {
		w.res.MeanBound = time.Duration(w.sumB / float64(w.nB))
		w.res.MeanError = time.Duration(w.sumE / float64(w.nB))
	}
	w.checkExclusions()
	w.res.Exclusions = w.exclusions()
	return w.res, nil
}

// newCore makes node i's core (n's clock, seed), started at global time
// at, with its ports.
func (w *clockWorld) newCore(i int, n *clockNode, seed uint64, at time.Duration) (*node.Core, error) {
	// The core counts from 0 as the agent does (its time since start);
	// the clock epoch makes its timestamps the node's clock.
	lc := link.DefaultConfig()
	lc.HeartbeatInterval, lc.DeadInterval = 10*time.Millisecond, clockDead
	lc.RTO, lc.MaxRTO = 2*time.Millisecond, 50*time.Millisecond
	lc.ClockStamps = true
	lc.ClockEpoch = n.off
	core, err := node.New(node.Config{
		Self: noc.NodeID(i), Link: lc, Seed: seed,
		Route: route.Config{HelloInterval: 10 * time.Millisecond, SPFDelay: time.Millisecond},
		Clock: clock.Config{ReportInterval: clockReport, Bug: w.cfg.Bug},
	}, n.coreTime(at))
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	for p := range w.g.Ports(noc.NodeID(i)) {
		if err := core.AddPort(n.coreTime(at), noc.PortID(p), fmt.Sprintf("p%d", p), mtu); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	return core, nil
}

// The scenario's clock report interval (ReportTTL four of them) and its
// links' dead interval.
const (
	clockReport = 500 * time.Millisecond
	clockDead   = 500 * time.Millisecond
)

// timelineSettles is when every node follows the fabric's timeline: the
// lowest node's wait for one (ReportTTL), and as long again for the news
// to reach every node.
const timelineSettles = 2 * 4 * clockReport

func (w *clockWorld) push(at time.Duration, ev clockEvent) {
	w.seq++
	w.q.Push(timeq.Key{At: at, Seq: w.seq}, ev)
}

// flush writes what node i's ports have to send onto the wires and
// queues its next tick.
func (w *clockWorld) flush(i int) {
	n := w.nodes[i]
	l := n.coreTime(w.now)
	for p := range n.core.NumPorts() {
		peer, ok := w.g.Peer(noc.NodeID(i), noc.PortID(p))
		for {
			k, more := n.core.Output(l, noc.PortID(p), w.buf)
			if !more {
				break
			}
			if !ok {
				continue
			}
			w.res.Datagrams++
			d := w.base[i][p] + time.Duration(w.rng.Int64N(int64(w.cfg.Jitter)+1))
			w.push(w.now+d, clockEvent{kind: 0, node: int(peer.Node), port: peer.Port, data: append([]byte(nil), w.buf[:k]...)})
		}
	}
	for _, e := range n.core.Clock().TakeExclusions() {
		by := w.excludedBy[int(e.Node)]
		if by == nil {
			by = map[int]string{}
			w.excludedBy[int(e.Node)] = by
		}
		by[i] = e.Reason
	}
	at := max(n.global(n.core.NextDeadline()+n.off), w.now+1)
	if !n.ticked || at < n.tick {
		n.tick, n.ticked = at, true
		w.push(at, clockEvent{kind: 1, node: i})
	}
}

// checkClocks checks every node's view against the truth at w.now.
func (w *clockWorld) checkClocks(h interface{ Write([]byte) (int, error) }) {
	warm := w.now >= w.cfg.Warmup
	// held: a node the bound target and knowing every node apply to
	held := func(n *clockNode) bool { return n.faulty == 0 && !n.down && !n.fresh }
	honest := w.heldCount(held) - 1      // the others each held node must know
	line, lineOf := clock.Timeline{}, -1 // the timeline of the first node checked after the warm-up
	for i, n := range w.nodes {
		if n.faulty != 0 || n.down {
			continue
		}
		li := n.local(w.now)
		v := n.core.ClockView(n.coreTime(w.now))
		fmt.Fprintf(h, "%d %v", i, v.Estimates)
		seen := 0
		for _, e := range v.Estimates {
			j := int(e.Node)
			if j >= len(w.nodes) || w.nodes[j].faulty != 0 {
				continue
			}
			truth := w.nodes[j].local(w.now) - li
			err := e.Offset - truth
			w.res.Checked++
			if abs(err) <= e.Bound {
				w.res.Within++
			} else {
				w.violate("at %v node %d's estimate of node %d is %v ± %v; the truth is %v (off by %v)", w.now, i, j, e.Offset, e.Bound, truth, err)
			}
			if e.Bound > 0 {
				w.res.WorstError = max(w.res.WorstError, float64(abs(err))/float64(e.Bound))
			}
			if !held(n) || !held(w.nodes[j]) {
				continue
			}
			seen++
			if warm {
				target := 2 * time.Duration(w.hops[i][j]) * w.cfg.Jitter
				r := float64(e.Bound) / float64(target)
				w.res.WorstBound = max(w.res.WorstBound, r)
				w.sumB += float64(e.Bound)
				w.sumE += float64(abs(err))
				w.nB++
				if r > 1 {
					w.violate("at %v node %d's bound on node %d (%d hops) is %v, more than twice the path's jitter (%v)", w.now, i, j, w.hops[i][j], e.Bound, target)
				}
			}
		}
		if warm && held(n) && seen < honest {
			w.violate("at %v node %d knows %d of the %d other honest nodes' clocks", w.now, i, seen, honest)
		}
		ts := v.Cluster()
		w.checkCluster(i, n, v.HasTimeline, ts)
		if warm && v.HasTimeline && w.now >= timelineSettles {
			switch {
			case lineOf < 0:
				line, lineOf = ts.Line, i
			case ts.Line.Origin != line.Origin:
				w.violate("at %v node %d is on the timeline of node %d, node %d on node %d's", w.now, i, ts.Line.Origin, lineOf, line.Origin)
			}
		}
	}
}

// checkCluster checks node i's cluster timestamp ts (onLine: its view
// follows a timeline): against
// the truth, its reference's clock plus its timeline's K, where that
// reference's clock is honest (a stepping node's, before its step); and,
// whatever the reference, that the cluster time went on from the last
// check as node i's own clock did, within both errors and the drift: it
// moves with no reference's step and at no change of its timeline (its
// reference going or coming back).
func (w *clockWorld) checkCluster(i int, n *clockNode, onLine bool, ts clock.Timestamp) {
	if !onLine {
		if w.now >= w.cfg.Warmup && w.now >= timelineSettles {
			w.violate("at %v node %d follows no timeline", w.now, i)
		}
		return
	}
	ref := int(ts.Ref)
	if ref >= len(w.nodes) {
		w.violate("at %v node %d's timeline names node %d", w.now, i, ref)
		return
	}
	if r := w.nodes[ref]; r.faulty == 0 || r.faulty == 1 && w.now < r.step {
		truth := r.local(w.now) + ts.Line.K
		w.res.ClusterChecked++
		if err := ts.Time - truth; abs(err) <= ts.Error {
			w.res.ClusterWithin++
		} else {
			w.violate("at %v node %d's cluster time is %v ± %v; the truth (node %d's clock + %v) is %v (off by %v)", w.now, i, ts.Time, ts.Error, ref, ts.Line.K, truth, err)
		}
	}
	// Once the fabric settled on one timeline (half the warm-up, and
	// timelineSettles) no split joins two timelines in this scenario.
	local := n.local(w.now)
	if n.hasLine && w.now >= w.cfg.Warmup/2 && w.now >= timelineSettles {
		if n.line != ts.Line {
			w.res.Handovers++
		}
		elapsed := w.now - n.lineAt
		move := (ts.Time - n.lineTime) - (local - n.lineLocal)
		w.res.WorstJump = max(w.res.WorstJump, abs(move))
		// both errors; the drift of the reference against this clock
		// since (at the estimator's rate bound, which an estimate may use
		// until it is corrected); and at a hand-over the new reference's
		// bound on the old, at most the bound target on the longest path
		// widened at the rate bound for as long as it carried the old
		// reference's estimate without news (a report's life, a report
		// interval and a dead interval, at most)
		rate := n.core.Clock().Config().MaxRate + 2*w.cfg.Drift
		allow := ts.Error + n.lineErr + time.Duration(rate*float64(elapsed))
		if n.line != ts.Line {
			stale := float64(4*clockReport + clockReport + clockDead)
			allow += 2*time.Duration(slices.Max(w.hops[ref]))*w.cfg.Jitter + time.Duration(rate*stale)
		}
		if abs(move) > allow {
			w.violate("at %v node %d's cluster time moved by %v against its clock since %v (timeline %+v, then %+v; allowed %v)", w.now, i, move, n.lineAt, n.line, ts.Line, allow)
		}
	}
	n.line, n.hasLine = ts.Line, true
	n.lineAt, n.lineTime, n.lineLocal, n.lineErr = w.now, ts.Time, local, ts.Error
}

// heldCount counts the nodes held satisfies.
func (w *clockWorld) heldCount(held func(*clockNode) bool) int {
	k := 0
	for _, n := range w.nodes {
		if held(n) {
			k++
		}
	}
	return k
}

// checkExclusions: every honest neighbour of a faulty node excluded it,
// with a reason.
func (w *clockWorld) checkExclusions() {
	for i, n := range w.nodes {
		if n.faulty == 0 {
			continue
		}
		for _, j := range w.g.Neighbours(noc.NodeID(i)) {
			if w.nodes[j].faulty != 0 || n.faulty == 1 && w.nodes[j].fresh {
				continue // (a node that restarted after the step never saw it)
			}
			if why, ok := w.excludedBy[i][int(j)]; !ok || why == "" {
				w.violate("node %d never excluded its neighbour %d, whose clock is dishonest", j, i)
			}
		}
	}
}

// Exclusions lists, for every node some neighbour excluded, who did and
// why (one line each, sorted).
func (w *clockWorld) exclusions() []string {
	var out []string
	for i, by := range w.excludedBy {
		for j, why := range by {
			out = append(out, fmt.Sprintf("node %d excluded by node %d: %s", i, j, why))
		}
	}
	slices.Sort(out)
	return out
}

func (w *clockWorld) violate(format string, a ...any) {
	if len(w.res.Violations) < 20 {
		w.res.Violations = append(w.res.Violations, fmt.Sprintf(format, a...))
	} else if len(w.res.Violations) == 20 {
		w.res.Violations = append(w.res.Violations, "(more violations left out)")
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
