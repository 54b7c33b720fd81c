package sim

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// seedsToRun is how many seeds a sweep runs: DPU_SIM_SEEDS overrides;
// -short runs a quarter.
func seedsToRun(t *testing.T, def int) int {
	if s := os.Getenv("DPU_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("DPU_SIM_SEEDS: %v", err)
		}
		return n
	}
	if testing.Short() {
		return def / 4
	}
	return def
}

// sweep runs seeds 1..n of cfg on every core and returns the results in
// seed order.
func sweep(t *testing.T, cfg Config, n int) []Result {
	t.Helper()
	res := make([]Result, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				c := cfg
				c.Seed = uint64(i + 1)
				res[i], errs[i] = Run(c)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("seed %d: %v", i+1, err)
		}
	}
	return res
}

// testConfig is the fabric the sweeps use: small enough to run hundreds of
// seeds under the race detector. The quiet period is the default's 150 ms
// (120 ms before outages joined "all": an outage's last restart comes up
// to 45 ms after the workload, and the takeovers it allows after it, with
// a restarted home, up to three refresh periods later).
func testConfig() Config {
	return Config{Nodes: 8, Topo: "smallworld", Faults: FaultsAll, Workload: 25 * time.Millisecond, Quiesce: 150 * time.Millisecond}
}

func TestSeedsWithAllFaults(t *testing.T) {
	n := seedsToRun(t, 200)
	start := time.Now()
	res := sweep(t, testConfig(), n)
	ops, swaps, lost := 0, uint64(0), 0
	for _, r := range res {
		ops += r.Ops
		swaps += r.Swaps
		lost += r.Lost
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 8 --topo smallworld --faults all --workload 25ms\n%v",
				r.Seed, len(r.Violations), r.Seed, r.Violations)
		}
	}
	if ops < 100*n || swaps == 0 {
		t.Fatalf("%d seeds did too little: %d ops, %d swaps", n, ops, swaps)
	}
	t.Logf("%d seeds: %d ops, %d swaps, %d pages lost with failed owners, in %v", n, ops, swaps, lost, time.Since(start))
}

// TestSeedsWithEvictions sweeps with small path caches, idle aging and
// capacity for half the pages: evictions detach subtrees, maps beyond the
// capacity rule fail with ENOMEM.
func TestSeedsWithEvictions(t *testing.T) {
	cfg := testConfig()
	cfg.SmallCache, cfg.ColdPages = true, 30
	evictions := 0
	for _, r := range sweep(t, cfg, seedsToRun(t, 20)) {
		if !r.OK() {
			t.Errorf("seed %d: %v", r.Seed, r.Violations)
		}
		evictions += r.Evictions
	}
	if evictions == 0 {
		t.Fatal("no path cache eviction happened")
	}
}

func TestSeedsOnEveryTopology(t *testing.T) {
	for _, kind := range []string{"line", "ring", "tree", "torus2d", "random-regular"} {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig()
			cfg.Topo = kind
			cfg.Nodes = 9
			for _, r := range sweep(t, cfg, seedsToRun(t, 6)) {
				if !r.OK() {
					t.Errorf("seed %d: %v", r.Seed, r.Violations)
				}
			}
		})
	}
}

func TestReplayIsExact(t *testing.T) {
	cfg := testConfig()
	cfg.Seed = 7
	var lines []string
	cfg.Trace = func(l string) { lines = append(lines, l) }
	a, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := lines
	lines = nil
	b, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.TraceHash != b.TraceHash || a.Ops != b.Ops || a.Frames != b.Frames || len(first) != len(lines) {
		t.Fatalf("replay differs: %x/%d/%d vs %x/%d/%d", a.TraceHash, a.Ops, a.Frames, b.TraceHash, b.Ops, b.Frames)
	}
	for i := range lines {
		if lines[i] != first[i] {
			t.Fatalf("trace line %d differs:\n%s\n%s", i, first[i], lines[i])
		}
	}
	cfg.Seed = 8
	c, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.TraceHash == a.TraceHash {
		t.Fatal("two seeds gave the same trace")
	}
}

// TestTruncatedHistoryFails: a run that issues more atomic or lock
// operations than a history holds fails, naming what went unchecked, and
// counts them (a truncated history is not judged: a prefix of a
// linearizable history can look illegal); with the default bound the same
// run checks everything.
func TestTruncatedHistoryFails(t *testing.T) {
	cfg := testConfig()
	cfg.Seed = 3
	full, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !full.OK() || full.Unchecked != 0 || full.Checked == 0 {
		t.Fatalf("default bound: checked %d, unchecked %d, violations %v", full.Checked, full.Unchecked, full.Violations)
	}
	cfg.MaxHistory = 5
	short, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if short.Unchecked == 0 || short.Checked+short.Unchecked < full.Checked || short.Checked >= full.Checked {
		t.Fatalf("MaxHistory 5: checked %d, unchecked %d (the full run checked %d)", short.Checked, short.Unchecked, full.Checked)
	}
	found := false
	for _, v := range short.Violations {
		found = found || strings.Contains(v, "went unchecked")
	}
	if !found {
		t.Fatalf("MaxHistory 5: %d operations unchecked but no violation says so: %v", short.Unchecked, short.Violations)
	}
	t.Logf("seed 3: %d operations checked; with MaxHistory 5, %d checked and %d unchecked", full.Checked, short.Checked, short.Unchecked)
}

// TestSeedsWithLocalLockContention: many clients per node on one hot page,
// so that sessions of one node queue for the node's lock in the core:
// FIFO hand-offs, waits that reach their bound, waiters that give up or
// whose client goes away, holders that go away. The lock histories are
// linearizable and no two clients of a node ever both hold the lock.
func TestSeedsWithLocalLockContention(t *testing.T) {
	cfg := Config{Nodes: 4, Topo: "ring", Faults: FaultsAll, ClientsPerNode: 6, HotPages: 1, ColdPages: 2,
		Workload: 30 * time.Millisecond, Quiesce: 120 * time.Millisecond}
	var waits, handOffs, expired, left, checked int
	// Not shortened by -short (24 seeds take well under a second): a
	// waiter whose client leaves is rare, a few in 24 seeds.
	n := 24
	if os.Getenv("DPU_SIM_SEEDS") != "" {
		n = seedsToRun(t, n)
	}
	for _, r := range sweep(t, cfg, n) {
		if !r.OK() {
			t.Errorf("seed %d: %v (replay: this test's Config with that Seed)", r.Seed, r.Violations)
		}
		waits, handOffs, expired, left, checked = waits+r.LockWaits, handOffs+r.LockHandOffs, expired+r.LockWaitsExpired, left+r.LockWaitsLeft, checked+r.Checked
	}
	if waits == 0 || handOffs == 0 || left == 0 {
		t.Fatalf("the workload did not exercise the node's lock queue: %d waits, %d hand-offs, %d expired, %d left", waits, handOffs, expired, left)
	}
	t.Logf("%d waits, %d hand-offs, %d expired, %d left; %d operations checked", waits, handOffs, expired, left, checked)
}
