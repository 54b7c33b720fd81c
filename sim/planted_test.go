//go:build dpubug

package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/host/admit"
)

// TestPlantedBugIsCaught plants a non-atomic CAS (compared against the
// requester's replica, then written through as a plain store): the
// linearizability check must catch it within a few seeds.
func TestPlantedBugIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugStaleCAS
	if !caught(t, cfg, 8, func(v string) bool {
		return strings.Contains(v, "atomic word") && strings.Contains(v, "not linearizable")
	}) {
		t.Fatal("the planted non-atomic CAS went unnoticed")
	}
}

// TestPlantedEarlyAckIsCaught plants replication that answers writes
// before the backups hold them: with owner crashes, the failover checks
// must find acknowledged writes missing from the backups.
func TestPlantedEarlyAckIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = FaultCrash
	cfg.Replicas = 2
	cfg.Bug = coherence.BugEarlyAck
	// A crash must fall between an early answer and the backups' copy:
	// a few seeds in a hundred (3 of the first 120 with host copies kept).
	if !caught(t, cfg, 128, func(v string) bool {
		return strings.Contains(v, "holds committed version") || strings.Contains(v, "acknowledged writes lost")
	}) {
		t.Fatal("writes acknowledged before the backups held them went unnoticed")
	}
}

// TestPlantedTrustVouchedIsCaught plants owners and tree nodes that serve
// other nodes' requests without checking their users: the guarded pages'
// checks must find the intruder served.
func TestPlantedTrustVouchedIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugTrustVouched
	if !caught(t, cfg, 4, func(v string) bool { return strings.Contains(v, "though its mode forbids it") }) {
		t.Fatal("requests served without checking their users went unnoticed")
	}
}

// TestPlantedFreeHereIsCaught plants allocators that free only the pages
// of an extent they still own: the lifecycle checks must find an extent
// its allocator could not free once a page of it moved.
func TestPlantedFreeHereIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugFreeHere
	if !caught(t, cfg, 6, func(v string) bool { return strings.Contains(v, "free of the extent") }) {
		t.Fatal("extents their allocator could not free went unnoticed")
	}
}

// TestPlantedQuotaLeakIsCaught plants allocators whose frees keep the
// pages charged: the final checks must find a quota that charges more
// than its users hold.
func TestPlantedQuotaLeakIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugQuotaLeak
	if !caught(t, cfg, 6, func(v string) bool { return strings.Contains(v, "page quota charges") }) {
		t.Fatal("a quota that keeps freed pages charged went unnoticed")
	}
}

// caught reports whether a sweep of seeds seeds of cfg has a violation
// that match accepts, and logs the first.
func caught(t *testing.T, cfg Config, seeds int, match func(v string) bool) bool {
	t.Helper()
	for _, r := range sweep(t, cfg, seeds) {
		for _, v := range r.Violations {
			if match(v) {
				t.Logf("seed %d caught it: %s", r.Seed, v)
				return true
			}
		}
	}
	return false
}

// TestPlantedAdmitNoGroupsIsCaught plants a host-layer admission that
// checks a user's primary group only: the guarded pages' checks must
// find a member of their group (through its supplementary groups)
// refused what the mode allows.
func TestPlantedAdmitNoGroupsIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugAdmitNoGroups
	if !caught(t, cfg, 6, func(v string) bool { return strings.Contains(v, "refused, though its mode allows it") }) {
		t.Fatal("an admission that ignores supplementary groups went unnoticed")
	}
}

// TestPlantedSwapStaleContentIsCaught plants a new owner that keeps its
// old replica's content through an ownership transfer: a load under a
// lock, and a host's copy of the page at the owner's version, must hold
// what the owner applied.
func TestPlantedSwapStaleContentIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugSwapStaleContent
	if !caught(t, cfg, 8, func(v string) bool {
		return strings.Contains(v, "a load under node") || strings.Contains(v, "host copy at version")
	}) {
		t.Fatal("a new owner serving its old replica's content under a lock went unnoticed")
	}
}

// TestPlantedPlaceNoDwellIsCaught plants placement without its dwell:
// with dominant writers that change every 3 ms, the move-limit check must
// find a page moved more often than its limit in one window.
func TestPlantedPlaceNoDwellIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Placement, cfg.Shifting, cfg.Phase = true, 8, 3*time.Millisecond
	cfg.Workload = 60 * time.Millisecond
	cfg.Bug = coherence.BugPlaceNoDwell
	if !caught(t, cfg, 4, func(v string) bool { return strings.Contains(v, "placement moved it") }) {
		t.Fatal("placement past its move limit went unnoticed")
	}
}

// TestPlantedAdmitAsRootIsCaught plants an admission that admits every
// request as root: the garblers' checks must find an ordinary user's
// garbage served on a page that is not its user's.
func TestPlantedAdmitAsRootIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	admit.BugAdmitAsRoot(true)
	defer admit.BugAdmitAsRoot(false)
	if !caught(t, cfg, 4, func(v string) bool { return strings.Contains(v, "succeeded on a page that is not its user's") }) {
		t.Fatal("an admission that admits everyone as root went unnoticed")
	}
}

// TestPlantedTransferAnswerIsCaught plants a bulk transfer whose answer
// counts the pieces after the first that failed as done: the transfer
// sessions' check of each answer against its pieces' outcomes must see it.
func TestPlantedTransferAnswerIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Transfers = 6
	admit.BugAnswerPastFailure(true)
	defer admit.BugAnswerPastFailure(false)
	if !caught(t, cfg, 20, func(v string) bool { return strings.Contains(v, "its pieces say") }) {
		t.Fatal("a transfer answering past its first failed piece went unnoticed")
	}
}

// TestPlantedTransferBudgetIsCaught plants transfers that let every piece
// into the core at once: the transfer sessions' count of their pieces in
// the core must pass the budget.
func TestPlantedTransferBudgetIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Transfers = 2
	admit.BugNoBudget(true)
	defer admit.BugNoBudget(false)
	if !caught(t, cfg, 2, func(v string) bool { return strings.Contains(v, "pieces in the core, its budget is") }) {
		t.Fatal("transfers past their budget went unnoticed")
	}
}
