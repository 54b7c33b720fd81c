package sim

import "testing"

// TestReplicasSurviveOwnerCrashes sweeps with replicas = 2 and every
// fault: owners crash, their pages fail over to backups that must hold
// every committed version, and the histories across the failovers stay
// linearizable.
func TestReplicasSurviveOwnerCrashes(t *testing.T) {
	cfg := testConfig()
	cfg.Replicas = 2
	n := seedsToRun(t, 60)
	lost, failovers := 0, 0
	for _, r := range sweep(t, cfg, n) {
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 8 --topo smallworld --faults all --workload 25ms --replicas 2\n%v",
				r.Seed, len(r.Violations), r.Seed, r.Violations)
		}
		lost += r.Lost
		failovers += r.Failovers
	}
	if failovers == 0 {
		t.Fatalf("%d seeds: no page failed over", n)
	}
	t.Logf("%d seeds: %d failovers, %d pages lost", n, failovers, lost)
}

// TestSeedsFromSweeps replays seeds of the 1000-seed dpu-sim sweep
// that once broke an invariant (or, with replicas, lost a page), with the
// sweep's own configuration.
func TestSeedsFromSweeps(t *testing.T) {
	for _, c := range []struct {
		seed     uint64
		replicas int
		why      string
	}{
		{87, 2, "a swap's done cut by a link already down left a branch at the versions before the swap"},
		{731, 2, "a handover's old owner restarted before its heir took the page: the reachable restarted node held the stand-in back (lost)"},
		{734, 2, "the same, with the old owner the page's home"},
		{745, 2, "the same"},
		{59, 1, "a graft answer sent by a link whose port-down had passed left a branch no node hung below"},
		{188, 1, "the same"},
		{165, 2, "a ref held through a swap, answered after its sender left the tree, left a branch no node hung below"},
		{269, 2, "the same"},
		{295, 2, "the same"},
	} {
		cfg := Config{Seed: c.seed, Nodes: 16, Topo: "smallworld", Faults: FaultsAll, Replicas: c.replicas}
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.replicas > 1 && r.Lost > 0 {
			t.Errorf("seed %d (replicas %d; %s): %d pages lost", c.seed, c.replicas, c.why, r.Lost)
		}
		if !r.OK() {
			t.Errorf("seed %d (replicas %d; %s): %d violations; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --faults all --replicas %d\n%v",
				c.seed, c.replicas, c.why, len(r.Violations), c.seed, c.replicas, r.Violations)
		}
	}
}
