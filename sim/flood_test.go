package sim

import (
	"strings"
	"testing"
)

// TestFlooderSeeds: seeds whose flooder (a session that submits a burst
// of requests and closes with them in flight) found a broken session in
// the core. Seed 4 and 25: a session with two acquires of one page, one
// done and one running, lost the page's ownership; the loss took the
// running acquire's count with the done one's, Close then gave back a ref
// the running acquire still owed, and the session was forgotten owing it
// (the core's invariant on close stopped the node).
func TestFlooderSeeds(t *testing.T) {
	for _, seed := range []uint64{4, 25} {
		r, err := Run(Config{Seed: seed, Nodes: 16, Topo: "smallworld", Faults: FaultsAll})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --faults all\n%s",
				seed, len(r.Violations), seed, strings.Join(r.Violations, "\n"))
		}
	}
}
