package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/sim"
)

func TestSweepSummary(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"--seeds", "3", "--nodes", "6", "--topo", "ring", "--faults", "all", "--workload", "10ms", "--quiesce", "100ms"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`^seeds=3 replicas=1 ops=[1-9][0-9]* errors=\d+ swaps=\d+ lost=\d+ failovers=0 sessions=[1-9][0-9]* closed=\d+ aborted=\d+ lock-waits=\d+ hand-offs=\d+ refused=[1-9][0-9]* freed=\d+ garbage=[1-9][0-9]* admitted=[1-9][0-9]* checked=[1-9][0-9]* unchecked=0 violations=0 time=`).MatchString(out.String()) {
		t.Fatalf("summary line: %q", out.String())
	}
}

// TestTransfersLine: --transfers adds transfer sessions and the summary
// says what they did.
func TestTransfersLine(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"--seeds", "2", "--nodes", "6", "--topo", "ring", "--faults", "all", "--workload", "10ms", "--quiesce", "100ms", "--transfers", "2"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`(?m)^transfers: [1-9][0-9]* bulk transfers answered \(\d+ with an errno\), [1-9][0-9]* bytes done`).MatchString(out.String()) {
		t.Fatalf("no transfers line: %q", out.String())
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

func TestTruncatedHistoryFails(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"--seeds", "1", "--nodes", "6", "--faults", "none", "--workload", "10ms", "--max-history", "3"}, &out, &errb)
	if !errors.Is(err, errViolations) {
		t.Fatalf("run with --max-history 3: %v", err)
	}
	if !regexp.MustCompile(` unchecked=[1-9][0-9]* `).MatchString(out.String()) || !strings.Contains(errb.String(), "went unchecked") ||
		!strings.Contains(errb.String(), "--max-history 3") {
		t.Fatalf("stdout %q, stderr %q", out.String(), errb.String())
	}
}

// --help explains every counter of the summary line; a run ends with a
// short line that says so, not with the explanation.
func TestSummaryCountersExplained(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"--seeds", "2", "--nodes", "4", "--topo", "ring", "--faults", "none", "--workload", "5ms", "--quiesce", "50ms", "--progress", "always"}, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; last != legendPointer {
		t.Errorf("the last line of a run: %q, want %q", last, legendPointer)
	}
	if len(out.String()) > 1000 {
		t.Errorf("a run prints %d bytes: %q", len(out.String()), out.String())
	}
	var help, herr bytes.Buffer
	if err := run([]string{"--help"}, &help, &herr); !errors.Is(err, errDone) {
		t.Fatal(err)
	}
	explained := strings.Join(strings.Fields(help.String()[strings.Index(help.String(), "THE SUMMARY LINE"):]), " ")
	for _, kv := range strings.Fields(lines[0]) {
		k, _, _ := strings.Cut(kv, "=")
		if k != "seeds" && !strings.Contains(explained, k+": ") {
			t.Errorf("--help does not explain %q", k)
		}
	}
	if !strings.HasSuffix(errb.String(), "\r\x1b[K") {
		t.Errorf("progress line not cleared: %q", errb.String())
	}
}

// TestDebugPageChecked: --debug-page takes a GVA or all, for one seed.
func TestDebugPageChecked(t *testing.T) {
	for _, args := range [][]string{{"--seed", "1", "--debug-page", "bogus"}, {"--seeds", "5", "--debug-page", "all"}} {
		var out, errb bytes.Buffer
		err := run(args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "--debug-page") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestProgressLine(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &progress{total: 4, start: t0}
	if got, want := p.line(t0.Add(time.Second)), "seeds 0/4  ops 0 (0/s)  elapsed 1s  ETA ?"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	p.done(100)
	p.done(50)
	if got, want := p.line(t0.Add(3*time.Second)), "seeds 2/4  ops 150 (50/s)  elapsed 3s  ETA 3s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var nilp *progress
	nilp.done(1) // no progress shown: nothing to count
	nilp.stop()
}

func TestHelpAndVersion(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "--version"} {
		var out, errb bytes.Buffer
		if err := run([]string{arg}, &out, &errb); !errors.Is(err, errDone) || out.Len() == 0 {
			t.Errorf("%s: %v %q", arg, err, out.String())
		}
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

// TestLostLineNamesTheSeeds: a sweep's summary names the seeds that lost
// pages and how many, so each can be replayed.
func TestLostLineNamesTheSeeds(t *testing.T) {
	got := lostLine([]uint64{7, 8, 9}, []sim.Result{{Lost: 0}, {Lost: 2}, {Lost: 1}})
	if want := "pages lost in seeds: 8 (2) 9 (1)"; got != want {
		t.Fatalf("lostLine = %q, want %q", got, want)
	}
	seeds := make([]uint64, 30)
	results := make([]sim.Result, 30)
	for i := range results {
		seeds[i], results[i].Lost = uint64(i+1), 1
	}
	if got := lostLine(seeds, results); !strings.HasSuffix(got, " 20 (1) …") {
		t.Fatalf("lostLine of 30 seeds = %q, want the first 20 and an ellipsis", got)
	}
}
