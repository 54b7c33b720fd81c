package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// With abstract links a sweep runs without faults by default, passes its
// checks and replays exactly.
func TestAbstractLinks(t *testing.T) {
	args := []string{"--nodes", "8", "--links", "abstract", "--workload", "10ms", "--quiesce", "100ms"}
	var out, errb bytes.Buffer
	if err := run(append([]string{"--seeds", "3"}, args...), &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`^seeds=3 replicas=1 ops=[1-9][0-9]* .* violations=0 `).MatchString(out.String()) {
		t.Fatalf("summary line: %q", out.String())
	}
	hash := func() string {
		var out, errb bytes.Buffer
		if err := run(append([]string{"--seed", "2"}, args...), &out, &errb); err != nil {
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

func TestAbstractLinksRefuseDatagramFaults(t *testing.T) {
	for _, f := range []string{"all", "drop", "delay", "flap,drop"} {
		var out, errb bytes.Buffer
		err := run([]string{"--links", "abstract", "--faults", f}, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "--links real") {
			t.Errorf("--links abstract --faults %s: %v", f, err)
		}
	}
	var out, errb bytes.Buffer
	if err := run([]string{"--links", "ideal"}, &out, &errb); err == nil {
		t.Error("unknown link mode accepted")
	}
}
