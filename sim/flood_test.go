package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"
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

// TestFlooderSeedsWithReplicas: seeds that broke with a flooder beside
// replicated pages.
func TestFlooderSeedsWithReplicas(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		why  string
		args string
	}{
		{Config{Seed: 11, Nodes: 16, Replicas: 3}, "a free acknowledged before the backups dropped their copies: the heir that freed it, also its home, crashed, and a stand-in took the freed page over (readable at version 0 on every node)", "--nodes 16 --replicas 3"},
		{Config{Seed: 186, Nodes: 16, Replicas: 3}, "two Frees of one extent by its allocator, side by side, each freed one page and failed on the other's (page not mapped), and neither freed the extent", "--nodes 16 --replicas 3"},
		{Config{Seed: 750, Nodes: 16, Replicas: 2}, "a node routing a graft while it hung below another port unref'd the sender unremembered; detached, it re-joined below the sender by the next graft it routed, and the sender, that unref arriving after, never counted it: replicas below stayed valid at an old version", "--nodes 16 --replicas 2"},
		{Config{Seed: 500, Nodes: 16, Replicas: 2}, "a backup of an earlier owner whose drop was lost kept its copy through a handover; an outage later took the page's owner, its home and the earlier owner down, and that copy and the last owner's backup both took the page over, the restarted home taking both for owners (the one of the earlier epoch now gives way when the home or the other owner names it)", "--nodes 16 --replicas 2"},
		{Config{Seed: 103, Nodes: 16, Replicas: 3}, "two backups of one owner took the page over at one epoch: the first, which did not know the other held a copy (the owner added it after its last word to the first), in a majority before a split; the other in the next majority, from its copy; the first, fenced by the split and confirmed after it, acted beside the second (the one that holds the later version, else the higher node, now keeps the page and tells the other, which gives way)", "--nodes 16 --replicas 3"},
		{Config{Seed: 62, Nodes: 16, Replicas: 2}, "a ref sent to a page's old owner after it handed the page over went where the old owner's hint, older than its own ownership, named, and that node's hint named the old owner back: refs circled to the hop limit for ever (final loads timed out)", "--nodes 16 --replicas 2"},
		{Config{Seed: 70, Nodes: 16, Replicas: 3}, "the same", "--nodes 16 --replicas 3"},
		{Config{Seed: 22, Nodes: 8, Replicas: 2, Workload: 25 * time.Millisecond}, "updates a full link refused were dropped: the replicas below stayed valid at old versions for ever", "--nodes 8 --workload 25ms --replicas 2"},
	} {
		cfg := c.cfg
		cfg.Topo, cfg.Faults = "smallworld", FaultsAll
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() {
			replay := fmt.Sprintf("dpu-sim --seed %d --topo smallworld --faults all %s", cfg.Seed, c.args)
			t.Errorf("seed %d (%s): %d violations; replay: %s\n%s", cfg.Seed, c.why, len(r.Violations), replay, strings.Join(r.Violations, "\n"))
		}
	}
}
