package sim

import (
	"strings"
	"testing"
)

// TestHostCopySeeds: seeds whose host copies of mapped pages (views.go)
// stayed "valid" at an old version after the quiet period, one per cause
// the core had: seed 1 without faults, newer content an acquire brought
// in without a word to the host; seed 2, an invalidation for a branch cut
// from its owner that the copy took for a version it had, and a write of
// this node whose caller gave up, applied to the node's replica and never
// to the host's copy; seed 79, versions that came down to a replica that
// had fallen behind while off the tree, with no invalidation; seed 528,
// updates that came down to a replica locked by a swap granted to its
// node, after the owner had called that swap off (the node not yet
// knowing): neither applied nor told to the host, whose copy stayed valid
// when the swap reverted.
func TestHostCopySeeds(t *testing.T) {
	for _, c := range []struct {
		seed   uint64
		faults Faults
		arg    string
	}{{1, 0, "none"}, {2, FaultsAll, "all"}, {79, FaultsAll, "all"}, {528, FaultsAll, "all"}} {
		r, err := Run(Config{Seed: c.seed, Nodes: 16, Topo: "smallworld", Faults: c.faults})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --faults %s\n%s",
				c.seed, len(r.Violations), c.seed, c.arg, strings.Join(r.Violations, "\n"))
		}
	}
}
