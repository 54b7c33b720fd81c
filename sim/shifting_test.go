package sim

import (
	"testing"
	"time"
)

func shiftConfig(placement bool) Config {
	return Config{Seed: 1, Nodes: 16, Topo: "smallworld", Shifting: 8, Placement: placement, Workload: 160 * time.Millisecond}
}

// TestShiftingPlacementCutsRemoteWrites: with each shifting page's
// dominant writer moving every phase, placement off leaves almost every
// write remote; placement auto moves each page to its writer, and the
// settled writes are at least 5 times less often remote, within the move
// limit.
func TestShiftingPlacementCutsRemoteWrites(t *testing.T) {
	var share [2]float64
	for i, on := range []bool{false, true} {
		r, err := Run(shiftConfig(on))
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() {
			t.Fatalf("placement %v: %v", on, r.Violations)
		}
		s := r.Shift
		share[i] = s.RemoteShare(true)
		t.Logf("placement %v: %d writes, %.1f%% remote, settled %.1f%%; %d placement moves, %.2f per page per window, at most %d in one",
			on, s.Writes, 100*s.RemoteShare(false), 100*share[i], s.Moves, s.MovesPerPageWindow(), s.MaxInWindow)
		if s.Writes < 5000 || s.SettledWrites < s.Writes/2 {
			t.Fatalf("placement %v: the shifters wrote %d times (%d settled)", on, s.Writes, s.SettledWrites)
		}
		if on && (s.ShiftMoves < s.Pages*s.Phases/2 || s.MaxInWindow > s.Limit) {
			t.Fatalf("placement on: %d moves of %d pages over %d phases, %d in one window (limit %d)", s.ShiftMoves, s.Pages, s.Phases, s.MaxInWindow, s.Limit)
		}
		if !on && s.Moves != 0 {
			t.Fatalf("placement off moved pages %d times", s.Moves)
		}
	}
	if share[0] < 0.8 || share[1]*5 > share[0] {
		t.Fatalf("settled remote writes: %.1f%% with placement off, %.1f%% on: want a fall of 5 times or more", 100*share[0], 100*share[1])
	}
}

// TestShiftingFastPhasesKeepTheLimit: dominant writers that change every
// 3 ms would pull a page along every phase; the dwell keeps it at the
// limit per window, and the run replays exactly.
func TestShiftingFastPhasesKeepTheLimit(t *testing.T) {
	cfg := shiftConfig(true)
	cfg.Phase, cfg.Workload = 3*time.Millisecond, 80*time.Millisecond
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatal(r.Violations)
	}
	if r.Shift.MaxInWindow != r.Shift.Limit {
		t.Fatalf("at most %d placement moves in one window: want the limit, %d", r.Shift.MaxInWindow, r.Shift.Limit)
	}
	again, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again.TraceHash != r.TraceHash || again.Shift != r.Shift {
		t.Fatalf("seed 1 did not replay: trace %x then %x, %+v then %+v", r.TraceHash, again.TraceHash, r.Shift, again.Shift)
	}
}
