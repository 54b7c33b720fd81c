package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestClockRun: --clock runs the fabric clock scenario, one line per seed
// and a total, and fails only on violations; a planted bug the product
// does not carry is refused.
func TestClockRun(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"--clock", "--nodes", "8", "--seeds", "2", "--clock-duration", "3s", "--progress", "never"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "clock seeds=2 nodes=8") || strings.Count(out.String(), "violations=0") != 2 {
		t.Fatalf("output: %s", out.String())
	}
	err := run([]string{"--clock", "--nodes", "4", "--clock-duration", "1s", "--plant-bug", "stale-cas"}, &out, &errb)
	if err == nil || errors.Is(err, errViolations) {
		t.Fatalf("--clock with a coherence bug: %v", err)
	}
	if !bugsCompiled {
		if err := run([]string{"--clock", "--nodes", "4", "--clock-duration", "1s", "--plant-bug", "clock-symmetric"}, &out, &errb); err == nil || errors.Is(err, errViolations) {
			t.Fatalf("a planted bug in a build without them: %v", err)
		}
	}
}
