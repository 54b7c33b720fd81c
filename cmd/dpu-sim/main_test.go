package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestSweepSummary(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"--seeds", "3", "--nodes", "6", "--topo", "ring", "--faults", "all", "--workload", "10ms", "--quiesce", "100ms"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`^seeds=3 ops=[1-9][0-9]* errors=\d+ swaps=\d+ lost=\d+ sessions=[1-9][0-9]* closed=\d+ aborted=\d+ violations=0 time=`).MatchString(out.String()) {
		t.Fatalf("summary line: %q", out.String())
	}
}

func TestReplayPrintsTheSameHash(t *testing.T) {
	hash := func() string {
		var out, errb bytes.Buffer
		if err := run([]string{"--seed", "5", "--nodes", "6", "--faults", "all", "--workload", "10ms", "--quiesce", "100ms"}, &out, &errb); err != nil {
			t.Fatalf("run: %v\n%s", err, errb.String())
		}
		m := regexp.MustCompile(`trace=([0-9a-f]{16})`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no trace hash in %q", out.String())
		}
		return m[1]
	}
	if a, b := hash(), hash(); a != b {
		t.Fatalf("replay hashes differ: %s %s", a, b)
	}
}

func TestBadFaultsRefused(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"--faults", "sometimes"}, &out, &errb); err == nil {
		t.Fatal("unknown fault accepted")
	}
}

// TestPlantedBugRefused: a product build has no planted bug to plant.
func TestPlantedBugRefused(t *testing.T) {
	if bugsCompiled {
		t.Skip("built with -tags dpubug")
	}
	var out, errb bytes.Buffer
	err := run([]string{"--seeds", "1", "--plant-bug", "stale-cas"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "dpubug") {
		t.Fatalf("planting a bug in a product build: %v", err)
	}
}
