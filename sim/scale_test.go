package sim

import (
	"testing"
)

// TestREADME1024Nodes runs the README's 1,024-node fabric, seed 1:
// dpu-sim --nodes 1024 --topo torus2d --links abstract --cold 512
// --neighbourhood 4. It ended with 20 final loads of replicas timed out
// (issue 28), for two causes the engine tests isolate: on a page's tree
// grown 49 nodes deep the answer to a ref came back after the nodes on
// the way had closed their fetch (TestRefAnswerOutlastsMergeWindow), and a
// ref that went to a stale owner, on to the page's home and up the tree
// crossed 64 nodes, the old hop limit (TestRefCrossesMoreThan64Nodes).
// About 40 s of CPU: not under -short.
func TestREADME1024Nodes(t *testing.T) {
	if testing.Short() {
		t.Skip("1,024 nodes: about 40 s of CPU")
	}
	r, err := Run(Config{Seed: 1, Nodes: 1024, Topo: "torus2d", Links: LinksAbstract, ColdPages: 512, Neighbourhood: 4, ClientsPerNode: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		n := min(len(r.Violations), 5)
		t.Fatalf("%d violations; replay: dpu-sim --seed 1 --nodes 1024 --topo torus2d --links abstract --cold 512 --neighbourhood 4; the first %d:\n%v", len(r.Violations), n, r.Violations[:n])
	}
	if r.Ops < 50000 {
		t.Fatalf("%d requests on 1,024 nodes: too few to have tested anything", r.Ops)
	}
}
