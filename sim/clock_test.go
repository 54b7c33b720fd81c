package sim

import (
	"testing"
	"time"
)

// TestClockWithinBounds: on 16 nodes with clocks skewed by up to ±1 s and
// drifting ±100 ppm over asymmetric, jittery links, every node's estimate
// of every other is within its bound at every check, and after the
// warm-up every bound is at most twice the path's one-way jitter.
func TestClockWithinBounds(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		r, err := RunClock(ClockConfig{Seed: seed, Nodes: 16, Duration: 24 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Summary())
		for _, v := range r.Violations {
			t.Error(v)
		}
		if r.Checked == 0 || r.Within != r.Checked {
			t.Errorf("seed %d: %d of %d estimates within their bounds", seed, r.Within, r.Checked)
		}
	}
}

// TestClockTimelineOutlivesItsReference: the cluster time's reference
// stops and later starts again with a fresh core; every node's cluster
// timestamp stays within its error of the truth (its reference's clock
// plus its timeline's K), and neither hand-over of the timeline moves the
// cluster time by more than the new reference's bound and the drift.
func TestClockTimelineOutlivesItsReference(t *testing.T) {
	r, err := RunClock(ClockConfig{Seed: 1, Nodes: 16, Duration: 24 * time.Second, Restart: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Summary())
	for _, v := range r.Violations {
		t.Error(v)
	}
	// 15 nodes follow node 1 when node 0 stops, then node 0 again
	if r.ClusterChecked == 0 || r.ClusterWithin != r.ClusterChecked || r.Handovers < 2*15 {
		t.Errorf("%d of %d cluster timestamps within their error; %d hand-overs", r.ClusterWithin, r.ClusterChecked, r.Handovers)
	}
}

// TestClockExcludesDishonestNeighbours: a node whose clock steps and one
// whose clock runs 2000 ppm fast are excluded by every neighbour, with a
// reason, and every honest node's estimates stay within their bounds.
func TestClockExcludesDishonestNeighbours(t *testing.T) {
	r, err := RunClock(ClockConfig{Seed: 3, Nodes: 16, Faulty: 2, Duration: 24 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Summary())
	for _, e := range r.Exclusions {
		t.Log(e)
	}
	for _, v := range r.Violations {
		t.Error(v)
	}
	if r.Excluded == 0 || len(r.Exclusions) == 0 {
		t.Error("no neighbour was excluded")
	}
}

// TestClockReplays: a seed replays exactly (same trace hash); another seed
// differs.
func TestClockReplays(t *testing.T) {
	run := func(seed uint64) uint64 {
		r, err := RunClock(ClockConfig{Seed: seed, Nodes: 8, Duration: 3 * time.Second, Warmup: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return r.TraceHash
	}
	if a, b := run(5), run(5); a != b {
		t.Errorf("seed 5 ran twice: trace %016x then %016x", a, b)
	}
	if run(5) == run(6) {
		t.Error("seeds 5 and 6 gave the same trace")
	}
}
