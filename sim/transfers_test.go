package sim

import "testing"

// TestTransferSessions: bulk transfers through admit.Transfer under every
// fault, at R = 1 and R = 2, keep their budget and answer what their
// pieces did (transfers.go), and their stores are acknowledged writes the
// checker holds the fabric to.
func TestTransferSessions(t *testing.T) {
	n := seedsToRun(t, 24)
	for _, replicas := range []int{1, 2} {
		cfg := testConfig()
		cfg.Transfers, cfg.Replicas = 4, replicas
		answered, bytes := 0, int64(0)
		for _, r := range sweep(t, cfg, n) {
			answered += r.Transfers
			bytes += r.TransferBytes
			if !r.OK() {
				t.Errorf("R = %d, seed %d: %d violations; replay: dpu-sim --seed %d --nodes 8 --topo smallworld --faults all --workload 25ms --transfers 4 --replicas %d\n%v",
					replicas, r.Seed, len(r.Violations), r.Seed, replicas, r.Violations)
			}
		}
		t.Logf("R = %d: %d seeds, %d transfers answered, %d bytes done", replicas, n, answered, bytes)
		if answered < 10*n || bytes == 0 {
			t.Fatalf("R = %d: %d seeds answered only %d transfers (%d bytes)", replicas, n, answered, bytes)
		}
	}
}
