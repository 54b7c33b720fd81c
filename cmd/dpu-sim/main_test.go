package main

import (
	"bytes"
	"errors"
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

func TestViolationsFailWithTheSeed(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"--seeds", "4", "--nodes", "8", "--faults", "none", "--workload", "25ms", "--plant-bug", "stale-cas"}, &out, &errb)
	if !errors.Is(err, errViolations) {
		t.Fatalf("run with a planted bug: %v", err)
	}
	if !strings.Contains(errb.String(), "FAIL seed=") || !strings.Contains(errb.String(), "replay with: dpu-sim --seed ") ||
		!strings.Contains(errb.String(), "not linearizable") {
		t.Fatalf("stderr: %s", errb.String())
	}
	if err := run([]string{"--faults", "sometimes"}, &out, &errb); err == nil {
		t.Fatal("unknown fault accepted")
	}
}
