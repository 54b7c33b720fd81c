package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/aitherion/dpu/sim"
)

// scaleArgs are the options of a --scale-table run.
type scaleArgs struct {
	sizes     []int
	topos     []string
	seed      uint64
	base      sim.Config // workload options; Nodes, Topo, Seed and Links are set per row
	cold      int        // 0: half the nodes
	neighbour int        // 0: 4
	json      bool
	progress  io.Writer // if set, a line per phase of every row
}

// parseSizes reads --scale-table's comma list of node counts.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			return nil, fmt.Errorf("--scale-table %q: want a comma list of node counts of at least 2: %q", s, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--scale-table %q: no node count", s)
	}
	return out, nil
}

// scaleLine is one row of the scale table with the clocks read around it.
type scaleLine struct {
	sim.ScaleRow
	WallS        float64 `json:"wall_s"`
	CPUS         float64 `json:"cpu_s"`
	BuildCPUS    float64 `json:"build_cpu_s"`
	ConvergeCPUS float64 `json:"converge_cpu_s"`
	FramesPerN2  float64 `json:"converge_frames_per_n2"`
}

const scaleHeader = "%6s %-8s %3s %4s %8s %6s | %8s %11s %7s %8s %8s | %9s %9s | %9s %6s %8s %8s %9s %5s %5s | %8s %8s %7s %4s\n"

// runScaleTable runs one seeded world per node count and wiring, one at a
// time (the CPU time of a row is the process's while it ran), and prints a
// row for each as it ends.
func runScaleTable(stdout io.Writer, a scaleArgs) error {
	if !a.json {
		fmt.Fprintf(stdout, scaleHeader, "nodes", "topo", "deg", "diam", "avg-dist", "moore",
			"conv", "conv-frames", "f/n²", "spf/node", "conv-cpu",
			"lsdb/node", "pc/node",
			"frames/op", "local", "p50", "p99", "msg/write", "hops", "pair",
			"build", "wall", "cpu", "viol")
	}
	enc := json.NewEncoder(stdout)
	bad := 0
	for _, n := range a.sizes {
		for _, kind := range a.topos {
			cfg := a.base
			cfg.Seed, cfg.Nodes, cfg.Topo, cfg.Links = a.seed, n, kind, sim.LinksAbstract
			cfg.ColdPages, cfg.Neighbourhood = a.cold, a.neighbour
			if cfg.ColdPages == 0 {
				cfg.ColdPages = max(n/2, 12)
			}
			if cfg.Neighbourhood == 0 {
				cfg.Neighbourhood = 4
			}
			runtime.GC() // the last row's world is not this row's garbage
			var built, converged time.Duration
			start, cpu0 := time.Now(), cpuTime()
			row, err := sim.RunScale(sim.ScaleConfig{Config: cfg, Phase: func(p sim.ScalePhase) {
				switch p {
				case sim.PhaseBuilt:
					built = cpuTime() - cpu0
				case sim.PhaseConverged:
					converged = cpuTime() - cpu0 - built
				}
				if a.progress != nil {
					fmt.Fprintf(a.progress, "scale table: %d nodes %s: %s after %v wall, %v CPU\n", n, kind, phaseNames[p], time.Since(start).Round(time.Second), (cpuTime() - cpu0).Round(time.Second))
				}
			}})
			if err != nil {
				return fmt.Errorf("scale table, %d nodes %s: %w", n, kind, err)
			}
			l := scaleLine{ScaleRow: row, WallS: time.Since(start).Seconds(), CPUS: (cpuTime() - cpu0).Seconds(),
				BuildCPUS: built.Seconds(), ConvergeCPUS: converged.Seconds(),
				FramesPerN2: float64(row.ConvergeFrames) / float64(row.Nodes*row.Nodes)}
			if row.Violations > 0 || !row.Routed {
				bad++
			}
			if a.json {
				if err := enc.Encode(l); err != nil {
					return fmt.Errorf("scale table: %w", err)
				}
				continue
			}
			fmt.Fprintf(stdout, "%6d %-8s %3d %4d %8.3f %6.3f | %8v %11d %7.2f %8.1f %7.2fs | %9s %9s | %9.1f %5.1f%% %8v %8v %9.2f %5.2f %5.2f | %7.1fs %7.1fs %6.1fs %4d\n",
				row.Nodes, row.Topo, row.Degree, row.Diameter, row.AvgDist, row.MooreAvg,
				row.Converged.Round(time.Microsecond), row.ConvergeFrames, l.FramesPerN2, float64(row.ConvergeSPF)/float64(row.Nodes), l.ConvergeCPUS,
				humanBytes(row.LSDBBytes), humanBytes(row.PathCacheBytes),
				row.FramesPerOp, 100*row.Local, row.P50.Round(100*time.Nanosecond), row.P99.Round(100*time.Nanosecond), row.MessagesPerWrite, row.Hops, row.PairDist,
				l.BuildCPUS, l.WallS, l.CPUS, row.Violations)
		}
	}
	if !a.json {
		fmt.Fprintln(stdout, scaleLegend)
	}
	if bad > 0 {
		return fmt.Errorf("scale table: %d rows with violations or nodes without a route to every other: %w", bad, errViolations)
	}
	return nil
}

// scaleLegend says what the table's columns are (docs/simulator.md,
// "Scale", says more).
const scaleLegend = "(deg/diam/avg-dist: the graph's; moore: the Moore bound's average hops for nodes and deg; conv: virtual time until every node routes to every other, " +
	"conv-frames: frames on the wires by then (hellos and LSA floods), f/n²: those over nodes², spf/node: shortest-path runs per node by then, conv-cpu: CPU time converging; " +
	"lsdb/node, pc/node: link-state database and path cache bytes per node (mean); frames/op: frames per request; local: requests answered at their node, in no virtual time; p50/p99: request latency, virtual; " +
	"msg/write: updates and invalidates per write; hops: links from a request's node up its page's tree to the owner, pair: shortest distance of the same pairs; " +
	"build: CPU time generating the wiring (the planner) and booting; wall, cpu: the row's; viol: violations)"

var phaseNames = map[sim.ScalePhase]string{sim.PhaseBuilt: "wiring built, nodes booted", sim.PhaseConverged: "routing converged", sim.PhaseWorkload: "workload done", sim.PhaseDone: "final checks done"}

// humanBytes writes a byte count in B, KiB or MiB.
func humanBytes(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2fMiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}
