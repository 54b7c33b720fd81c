package sim

import (
	"testing"
)

// Garbage from an ordinary user's sessions, through the host wire's
// decoder and the agent's admission, under every fault: it reaches the
// core in every shape (refused by the decoder, served by the server
// itself, admitted, succeeding on its own pages) and breaks nothing.
func TestGarbageEndsAlone(t *testing.T) {
	cfg := testConfig()
	cfg.Garblers = 3
	var sum GarbageResult
	for _, r := range sweep(t, cfg, 8) {
		if !r.OK() {
			t.Errorf("seed %d: replay: dpu-sim --seed %d --nodes 8 --topo smallworld --faults all --workload 25ms --garblers 3\n%v", r.Seed, r.Seed, r.Violations)
		}
		g := r.Garbage
		sum.Sent += g.Sent
		sum.Undecodable += g.Undecodable
		sum.NotCore += g.NotCore
		sum.Admitted += g.Admitted
		sum.Succeeded += g.Succeeded
	}
	t.Logf("garbage over 8 seeds: %+v", sum)
	if sum.Undecodable == 0 || sum.NotCore == 0 || sum.Admitted == 0 || sum.Succeeded == 0 {
		t.Fatalf("the garbage did not reach every path: %+v", sum)
	}
	if sum.Undecodable+sum.NotCore+sum.Refused+sum.Admitted != sum.Sent {
		t.Fatalf("garbage unaccounted for: %+v", sum)
	}
}
