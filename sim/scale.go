package sim

import (
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/pathcache"
)

// ScalePhase is a point in a scale row's run, reported to
// ScaleConfig.Phase (so that its caller can read the wall and CPU clocks,
// which the simulator does not).
type ScalePhase uint8

// Scale row phases, in order.
const (
	PhaseBuilt     ScalePhase = iota + 1 // the topology generated (planned) and every node booted
	PhaseConverged                       // every node routes to every other
	PhaseWorkload                        // the workload ran (before the quiet period and the final checks)
	PhaseDone                            // the final checks ran
)

// ScaleConfig is one row of the scale table: one seeded world.
type ScaleConfig struct {
	Config
	// Phase, if set, is called as the run reaches each phase.
	Phase func(ScalePhase)
}

// ScaleRow is what one world of the scale table measured: routing
// convergence, the memory of the routing database and of the path cache
// per node, the cost and latency of requests, and the hops requests
// travel beside the graph's and the Moore bound's averages.
type ScaleRow struct {
	Nodes  int    `json:"nodes"`
	Topo   string `json:"topo"`
	Seed   uint64 `json:"seed"`
	Degree int    `json:"degree"` // the graph's largest node degree
	Links  int    `json:"links"`
	// Diameter and AvgDist are the graph's (a breadth-first search from
	// every node: mean over ordered pairs); MooreDiameter and MooreAvg
	// the Moore bound's least diameter and average hop count for Nodes
	// nodes of Degree ports (noc/topo).
	Diameter      int     `json:"diameter"`
	AvgDist       float64 `json:"avg_dist"`
	MooreDiameter int     `json:"moore_diameter"`
	MooreAvg      float64 `json:"moore_avg"`

	// Converged is the virtual time from the boot of every node until
	// every node's routing table reached every other node (polled every
	// ConvergePoll). ConvergeFrames are the frames put on the wires by
	// then (hellos and LSAs: nothing else runs yet), ConvergeLSAs the
	// LSAs sent (every node's route.Stats.LSAsSent, summed), and
	// ConvergeSPF the shortest-path computations run (SPFRuns, summed).
	Converged      time.Duration `json:"converged_ns"`
	ConvergeFrames uint64        `json:"converge_frames"`
	ConvergeLSAs   uint64        `json:"converge_lsas"`
	ConvergeSPF    uint64        `json:"converge_spf_runs"`
	// Routed: at the end of the workload every node still routed to
	// every other.
	Routed bool `json:"routed"`

	// LSDBBytes and PathCacheBytes are per node, mean over the nodes, at
	// the end of the workload (route.State.DatabaseBytes,
	// coherence.Engine.PathCacheBytes); LSDBMax and PathCacheMax the
	// largest node's; PathCacheEntries the mean entry count.
	LSDBBytes        int     `json:"lsdb_bytes"`
	LSDBMax          int     `json:"lsdb_max_bytes"`
	PathCacheBytes   int     `json:"pathcache_bytes"`
	PathCacheMax     int     `json:"pathcache_max_bytes"`
	PathCacheEntries float64 `json:"pathcache_entries"`

	// Requests: the clients' host requests completed during the workload
	// (Ops), the frames put on the wires during it per request, the
	// requests' latency in virtual time (submission to completion,
	// errors included), and the update and invalidate messages sent per
	// write or atomic applied at an owner (every node's counters).
	Ops         int           `json:"ops"`
	FramesPerOp float64       `json:"frames_per_op"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
	// Local is the share of those requests that completed in no virtual
	// time: answered at their node (a load of a valid replica, a request
	// on a page owned there), without a frame.
	Local            float64 `json:"local_share"`
	MessagesPerWrite float64 `json:"messages_per_write"`
	// Hops is the mean number of links from a request's node up its
	// path-cache tree to the page's owner, read when a client request on a
	// shared page completes without error (0 at the owner); PairDist is
	// the mean shortest-path distance of the same pairs (the requester's
	// routing table), so Hops ≥ PairDist, with Hops − PairDist the stretch
	// the trees add. HopSamples counts them (walks that met a node
	// without an entry, mid-change, are left out).
	Hops       float64 `json:"hops"`
	PairDist   float64 `json:"pair_dist"`
	HopSamples int     `json:"hop_samples"`

	Violations int `json:"violations"`
}

// ConvergePoll is how often a scale row looks whether routing converged
// (the resolution of ScaleRow.Converged).
const ConvergePoll = 10 * time.Microsecond

// scaleState is what a scale row records while the workload runs.
type scaleState struct {
	latencies          []time.Duration
	hops, dist, shared int
}

// observe records a client's completed request.
func (s *scaleState) observe(w *World, n *simNode, po *pendingOp, cp coherence.Completion, errno syscall.Errno) {
	s.latencies = append(s.latencies, cp.At-po.start)
	if po.page < 0 || errno != 0 {
		return
	}
	key := w.pages[po.page].g.Key()
	at, hops := n, 0
	for {
		ent, ok := at.eng.Entry(key)
		if !ok || hops > int(^uint8(0)) {
			return // the tree is changing here
		}
		if ent.Owner {
			break
		}
		pe, ok := w.graph.Peer(at.id, ent.Up)
		if !ok || !w.nodes[pe.Node].alive {
			return
		}
		at, hops = w.nodes[pe.Node], hops+1
	}
	d := 0
	if at != n {
		var ok bool
		if _, d, ok = n.core.NextHop(at.id); !ok {
			return
		}
	}
	s.hops, s.dist, s.shared = s.hops+hops, s.dist+d, s.shared+1
}

// RunScale runs one world of the scale table: it boots the nodes, runs
// until routing converged (looking every ConvergePoll), then the usual
// set-up, workload and final checks, and measures the row. The world's
// own events are those of Run with the same Config, but set-up starts at
// the convergence ConvergePoll finds rather than Run's coarser poll, so
// its trace differs from Run's.
func RunScale(sc ScaleConfig) (ScaleRow, error) {
	phase := func(p ScalePhase) {
		if sc.Phase != nil {
			sc.Phase(p)
		}
	}
	w, err := New(sc.Config)
	if err != nil {
		return ScaleRow{}, err
	}
	phase(PhaseBuilt)
	g := w.graph
	row := ScaleRow{Nodes: g.N(), Topo: w.cfg.Topo, Seed: w.cfg.Seed, Degree: g.MaxDegree(), Links: g.NumLinks()}

	w.pollEvery = ConvergePoll
	if !w.runUntil(w.now+5*time.Second, w.converged) {
		return row, fmt.Errorf("sim: scale row of %d nodes (%s): %w", row.Nodes, row.Topo, errNoConvergence)
	}
	row.Converged, row.ConvergeFrames = w.now, w.wires.Sent
	for _, n := range w.nodes {
		st := n.core.Routing().Stats()
		row.ConvergeLSAs += st.LSAsSent
		row.ConvergeSPF += st.SPFRuns
	}
	w.pollEvery = 0
	phase(PhaseConverged)

	if err := w.Prepare(); err != nil {
		return row, err
	}
	w.scale = &scaleState{}
	frames0, ops0 := w.wires.Sent, w.res.Ops
	w.RunFor(w.cfg.Workload)
	row.Ops = len(w.scale.latencies)
	row.FramesPerOp = float64(w.wires.Sent-frames0) / float64(max(w.res.Ops-ops0, 1))
	var messages, writes uint64
	for _, n := range w.nodes {
		if !n.alive {
			continue
		}
		st := n.eng.Stats()
		messages += st.UpdatesSent + st.InvalidatesSent
		writes += st.Writes + st.Atomics
		lsdb, pc := n.core.Routing().DatabaseBytes(), n.eng.PathCacheBytes()
		row.LSDBBytes += lsdb
		row.LSDBMax = max(row.LSDBMax, lsdb)
		row.PathCacheBytes += pc
		row.PathCacheMax = max(row.PathCacheMax, pc)
		row.PathCacheEntries += float64(pc / pathcache.EntryBytes)
	}
	row.LSDBBytes /= len(w.nodes)
	row.PathCacheBytes /= len(w.nodes)
	row.PathCacheEntries /= float64(len(w.nodes))
	row.MessagesPerWrite = float64(messages) / float64(max(writes, 1))
	lat := slices.Clone(w.scale.latencies)
	slices.Sort(lat)
	row.P50, row.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		zero, _ := slices.BinarySearch(lat, 1)
		row.Local = float64(zero) / float64(len(lat))
	}
	if s := w.scale; s.shared > 0 {
		row.Hops, row.PairDist, row.HopSamples = float64(s.hops)/float64(s.shared), float64(s.dist)/float64(s.shared), s.shared
	}
	w.routeVer = nil // look at every table again
	row.Routed = w.converged()
	w.scale = nil
	phase(PhaseWorkload)

	res := w.Finish()
	row.Violations = len(res.Violations)
	m := g.Metrics()
	row.Diameter, row.AvgDist = m.Diameter, m.AvgHops
	row.MooreDiameter, _ = topo.MooreDiameter(row.Nodes, row.Degree)
	row.MooreAvg, _ = topo.MooreAvgHops(row.Nodes, row.Degree)
	phase(PhaseDone)
	return row, nil
}

// percentile is the q-quantile of sorted (nearest rank; 0 when empty).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ScaleTopos are the wirings of the scale table: the planner's at degree
// 4 (topo.Plan, Generate's "planned" kind) and a 2-D torus.
var ScaleTopos = []string{"planned", "torus2d"}
