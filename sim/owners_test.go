package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The ownership check that asks each node for the pages it holds gives
// the verdicts of the one that asks every node about every page (the one
// debugging uses): same violations, same lost pages, same run.
func TestOwnersCheckPerNode(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for _, replicas := range []int{1, 2} {
		for seed := range uint64(seeds) {
			cfg := Config{Seed: seed + 1, Nodes: 12, Faults: FaultsAll, Replicas: replicas, Workload: 20 * time.Millisecond, Quiesce: 100 * time.Millisecond}
			fast, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// A debugged page that is none of the run's sends the check
			// page by page and prints nothing.
			cfg.DebugPage, cfg.Debug = "gva:none", func(string) {}
			slow, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("seed %d, replicas %d", seed+1, replicas)
			if fast.TraceHash != slow.TraceHash || fast.Lost != slow.Lost || fast.Failovers != slow.Failovers || !slices.Equal(fast.Violations, slow.Violations) {
				t.Errorf("%s: per node: trace %016x lost %d failovers %d violations %q; page by page: %016x %d %d %q",
					what, fast.TraceHash, fast.Lost, fast.Failovers, fast.Violations, slow.TraceHash, slow.Lost, slow.Failovers, slow.Violations)
			}
		}
	}
}
