//go:build dpubug

package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const bugsCompiled = true

// TestViolationsFailWithTheSeed: a run that finds violations (a planted
// bug) fails, names each failing seed and how to replay it.
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
}

// TestClockViolationsFailWithTheSeed: the planted symmetric-delay bound
// fails a --clock run, naming the seed and its replay command.
func TestClockViolationsFailWithTheSeed(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"--clock", "--nodes", "8", "--clock-duration", "2s", "--plant-bug", "clock-symmetric", "--progress", "never"}, &out, &errb)
	if !errors.Is(err, errViolations) {
		t.Fatalf("run with a planted clock bug: %v", err)
	}
	if !strings.Contains(errb.String(), "replay with: dpu-sim --clock --seed 1") || !strings.Contains(errb.String(), "the truth is") {
		t.Fatalf("stderr: %s", errb.String())
	}
}
