package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/sim"
)

// clockArgs are the options of a --clock run.
type clockArgs struct {
	seeds    []uint64
	nodes    int
	topo     string
	duration time.Duration
	faulty   int
	restart  bool
	plant    string
	jobs     int
}

func seedList(seed, first uint64, seeds int) []uint64 {
	if seed != 0 {
		return []uint64{seed}
	}
	list := make([]uint64, 0, seeds)
	for i := range seeds {
		list = append(list, first+uint64(i))
	}
	return list
}

// runClock runs the fabric clock scenario for every seed: one summary line
// per seed, then a total; a seed with violations is named with its replay
// command.
func runClock(stdout, stderr io.Writer, a clockArgs) error {
	var bug clock.PlantedBug
	switch a.plant {
	case "":
	case "clock-symmetric":
		bug = clock.BugSymmetric
	default:
		return fmt.Errorf("--clock: unknown --plant-bug %q (want clock-symmetric)", a.plant)
	}
	cfg := sim.ClockConfig{Nodes: a.nodes, Topo: a.topo, Duration: a.duration, Faulty: a.faulty, Restart: a.restart, Bug: bug}
	if a.duration > 0 && a.duration < 30*time.Second {
		cfg.Warmup = a.duration * 2 / 3
	}
	start := time.Now()
	results := make([]sim.ClockResult, len(a.seeds))
	errs := make([]error, len(a.seeds))
	var wg sync.WaitGroup
	next := make(chan int)
	for range max(1, min(a.jobs, len(a.seeds))) {
		wg.Go(func() {
			for i := range next {
				c := cfg
				c.Seed = a.seeds[i]
				results[i], errs[i] = sim.RunClock(c)
			}
		})
	}
	for i := range a.seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	checked, within, failed := 0, 0, 0
	clusterChecked, clusterWithin, worstJump := 0, 0, time.Duration(0)
	worstErr, worstBound := 0.0, 0.0
	for i, r := range results {
		if errs[i] != nil {
			return fmt.Errorf("seed %d: %w", a.seeds[i], errs[i])
		}
		fmt.Fprintln(stdout, r.Summary())
		checked, within = checked+r.Checked, within+r.Within
		clusterChecked, clusterWithin, worstJump = clusterChecked+r.ClusterChecked, clusterWithin+r.ClusterWithin, max(worstJump, r.WorstJump)
		worstErr, worstBound = max(worstErr, r.WorstError), max(worstBound, r.WorstBound)
		if !r.OK() {
			failed++
			replay := fmt.Sprintf("dpu-sim --clock --seed %d --nodes %d --topo %s", r.Seed, a.nodes, a.topo)
			if a.duration != 0 {
				replay += " --clock-duration " + a.duration.String()
			}
			if a.faulty != 0 {
				replay += fmt.Sprintf(" --clock-faulty %d", a.faulty)
			}
			if a.restart {
				replay += " --clock-restart"
			}
			if a.plant != "" {
				replay += " --plant-bug " + a.plant
			}
			fmt.Fprintf(stderr, "FAIL seed=%d trace=%016x: replay with: %s\n", r.Seed, r.TraceHash, replay)
			for _, v := range r.Violations {
				fmt.Fprintf(stderr, "  %s\n", v)
			}
		}
	}
	fmt.Fprintf(stdout, "clock seeds=%d nodes=%d checked=%d within=%d (%.4f%%) worst_err/bound=%.3f worst_bound/2jitter=%.3f cluster_checked=%d cluster_within=%d worst_jump=%v failed=%d time=%v\n",
		len(a.seeds), a.nodes, checked, within, 100*float64(within)/float64(max(checked, 1)), worstErr, worstBound,
		clusterChecked, clusterWithin, worstJump, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return errViolations
	}
	return nil
}
