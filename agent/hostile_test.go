//go:build dpubug

package agent_test

import (
	"syscall"
	"testing"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/internal/privtest"
)

// TestPlantedBugSkippedCheckRefusedByOwner: node 1 is modified (a test
// hook compiled only with the tag dpubug) so that its host layer lets
// every user through without checking, and passes the users'
// credentials on as it should. The page's owner, node 0, checks them
// itself: uid B still gets EACCES for uid A's 0600 page and for writes to
// its 0644 page, on the modified node, and uid A still works there; the
// owner's counters say it refused them. On the old code (the owner
// trusting its neighbours' checks) uid B read and overwrote the 0600
// page.
func TestPlantedBugSkippedCheckRefusedByOwner(t *testing.T) {
	privtest.Require(t)
	run, nodes := permPair(t)
	a := run(uidA, 0, "alloc 600", "alloc 644")
	p600, p644 := gvaOfAlloc(t, a[0]), gvaOfAlloc(t, a[1])
	coherence.BugSkipHostChecks(1, true)
	defer coherence.BugSkipHostChecks(1, false)
	perm := syscall.EACCES.Error()
	for _, c := range []struct{ got, want string }{
		{run(uidB, 1, "load "+p600)[0], "load " + p600 + " err " + perm + " 0"},
		{run(uidB, 1, "store "+p600+" 9")[0], "store " + p600 + " err " + perm},
		{run(uidB, 1, "store "+p644+" 9")[0], "store " + p644 + " err " + perm},
		{run(uidB, 1, "load "+p644)[0], "load " + p644 + " ok 1420"}, // 1000 + 0o644
		{run(uidA, 1, "store "+p600+" 7")[0], "store " + p600 + " ok"},
		{run(uidA, 1, "load "+p600)[0], "load " + p600 + " ok 7"},
		// after uid A used the page on node 1, the owner still refuses
		// uid B's writes from there
		{run(uidB, 1, "store "+p600+" 9")[0], "store " + p600 + " err " + perm},
		{run(uidA, 0, "load "+p600)[0], "load " + p600 + " ok 7"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if n := counter(t, nodes[0], "coherence_refused"); n < 4 {
		t.Errorf("the owner refused %d of node 1's requests, want at least 4", n)
	}
}
