//go:build dpubug

package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/clock"
)

// TestPlantedSymmetricClockIsCaught plants an estimator that takes a
// link's two delays for equal to within half the round trip: on the
// simulator's asymmetric links the clock checker must find an estimate
// outside its bound.
func TestPlantedSymmetricClockIsCaught(t *testing.T) {
	r, err := RunClock(ClockConfig{Seed: 1, Nodes: 16, Duration: 6 * time.Second, Warmup: 4 * time.Second, Bug: clock.BugSymmetric})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Summary())
	for _, v := range r.Violations {
		if strings.Contains(v, "the truth is") {
			t.Logf("caught it: %s", v)
			return
		}
	}
	t.Fatal("the planted symmetric-delay bound went unnoticed")
}
