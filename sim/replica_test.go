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
