package agent

import (
	"testing"
	"time"
)

// TestEpochOfOutlastsAPreemption: the epoch is taken from the tightest of
// its samples: a sample whose thread waited 95 µs between reading the
// clocks (the first two here) does not offset it; the true epoch is 7 s.
func TestEpochOfOutlastsAPreemption(t *testing.T) {
	const truth = 7 * time.Second
	var up time.Duration // now's reading
	waits := []time.Duration{95 * time.Microsecond, 95 * time.Microsecond, 300 * time.Nanosecond}
	calls := 0
	now := func() time.Duration { return up }
	mono := func() (time.Duration, error) {
		m := truth + up // read at once
		if calls < len(waits) {
			up += waits[calls] // then preempted before the next read of now
		}
		calls++
		up += 100 * time.Nanosecond
		return m, nil
	}
	if got := epochOf(now, mono); got-truth > time.Microsecond || truth-got > time.Microsecond {
		t.Fatalf("epoch %v, want %v within 1 µs (%d samples)", got, truth, calls)
	}
}
