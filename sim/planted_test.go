//go:build dpubug

package sim

import (
	"strings"
	"testing"

	"github.com/aitherion/dpu/coherence"
)

// TestPlantedBugIsCaught plants a non-atomic CAS (compared against the
// requester's replica, then written through as a plain store): the
// linearizability check must catch it within a few seeds.
func TestPlantedBugIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugStaleCAS
	for _, r := range sweep(t, cfg, 8) {
		for _, v := range r.Violations {
			if strings.Contains(v, "atomic word") && strings.Contains(v, "not linearizable") {
				t.Logf("seed %d caught it: %s", r.Seed, v)
				return
			}
		}
	}
	t.Fatal("the planted non-atomic CAS went unnoticed")
}

// TestPlantedEarlyAckIsCaught plants replication that answers writes
// before the backups hold them: with owner crashes, the failover checks
// must find acknowledged writes missing from the backups.
func TestPlantedEarlyAckIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = FaultCrash
	cfg.Replicas = 2
	cfg.Bug = coherence.BugEarlyAck
	for _, r := range sweep(t, cfg, 16) {
		for _, v := range r.Violations {
			if strings.Contains(v, "holds committed version") || strings.Contains(v, "acknowledged writes lost") {
				t.Logf("seed %d caught it: %s", r.Seed, v)
				return
			}
		}
	}
	t.Fatal("writes acknowledged before the backups held them went unnoticed")
}

// TestPlantedTrustVouchedIsCaught plants owners and tree nodes that serve
// other nodes' requests without checking their users: the guarded pages'
// checks must find the intruder served.
func TestPlantedTrustVouchedIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugTrustVouched
	for _, r := range sweep(t, cfg, 4) {
		for _, v := range r.Violations {
			if strings.Contains(v, "though its mode forbids it") {
				t.Logf("seed %d caught it: %s", r.Seed, v)
				return
			}
		}
	}
	t.Fatal("requests served without checking their users went unnoticed")
}

// TestPlantedFreeHereIsCaught plants allocators that free only the pages
// of an extent they still own: the lifecycle checks must find an extent
// its allocator could not free once a page of it moved.
func TestPlantedFreeHereIsCaught(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = 0
	cfg.Bug = coherence.BugFreeHere
	for _, r := range sweep(t, cfg, 6) {
		for _, v := range r.Violations {
			if strings.Contains(v, "free of the extent") {
				t.Logf("seed %d caught it: %s", r.Seed, v)
				return
			}
		}
	}
	t.Fatal("extents their allocator could not free went unnoticed")
}
