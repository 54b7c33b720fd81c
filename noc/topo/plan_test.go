package topo

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aitherion/dpu/noc"
)

var (
	planTable   = flag.String("plan.table", "", `run the planner over a table of cells and print what it reaches: "all" for {64,128,256,512,1024} × {4..8}, or cells as N:K,N:K`)
	planSeeds   = flag.String("plan.seeds", "1", "the seeds TestPlanTable plans each cell with, as S,S,...")
	planScale   = flag.Float64("plan.scale", 1, "TestPlanTable multiplies every search budget by this")
	planStreamN = flag.Int("plan.streams", 0, "TestPlanTable's search streams per plan (0: Plan's own)")
)

// TestRecordFor checks the table lookups the planner's targets rest on.
func TestRecordFor(t *testing.T) {
	cases := []struct{ n, k, d, order int }{
		{10, 3, 2, 10}, {11, 3, 3, 20}, {64, 4, 4, 98}, {99, 4, 5, 364}, {1024, 4, 7, 1320},
		{64, 5, 3, 72}, {1024, 5, 6, 2772}, {1024, 6, 5, 1404}, {50, 7, 2, 50}, {1024, 7, 5, 2756},
		{57, 8, 2, 57}, {253, 8, 3, 253}, {254, 8, 4, 1100}, {1101, 8, 5, 5060},
	}
	for _, c := range cases {
		r, ok := RecordFor(c.n, c.k)
		if !ok || r.Diameter != c.d || r.Nodes != c.order || r.Ports != c.k {
			t.Errorf("RecordFor(%d, %d) = %+v %v, want D=%d with %d nodes", c.n, c.k, r, ok, c.d, c.order)
		}
	}
	for _, c := range [][2]int{{5, 4}, {100, 2}, {100, 11}, {201038923, 10}} {
		if r, ok := RecordFor(c[0], c[1]); ok {
			t.Errorf("RecordFor%v = %+v, want none", c, r)
		}
	}
	// every entry lies at or below the Moore bound and grows with D
	for i, row := range degreeDiameterRecords {
		for j, order := range row {
			if k, d := i+3, j+2; order > MooreBound(k, d) || j > 0 && order <= row[j-1] {
				t.Errorf("record k=%d D=%d: %d nodes (Moore bound %d)", k, d, order, MooreBound(k, d))
			}
		}
	}
}

// TestPlanReachesRecords checks a few cells whose record diameter a plain
// random graph misses.
func TestPlanReachesRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("plans take seconds")
	}
	for _, c := range [][2]int{{64, 4}, {64, 6}, {128, 7}} {
		n, k := c[0], c[1]
		p, err := Plan(n, k, 1)
		if err != nil {
			t.Fatal(err)
		}
		checkWiring(t, p.Graph, k)
		m := p.Graph.Metrics()
		if !m.Connected || m.Diameter != p.Diameter {
			t.Fatalf("%d×%d: plan says D=%d, graph has %+v", n, k, p.Diameter, m)
		}
		if p.Record == nil || p.RecordGap != 0 || p.Diameter != p.Record.Diameter {
			t.Errorf("%d×%d: diameter %d, record %+v (source %s)", n, k, p.Diameter, p.Record, p.Source)
		}
		if p.LiftEvaluations < 1000 {
			t.Errorf("%d×%d: only %d lift evaluations", n, k, p.LiftEvaluations)
		}
	}
}

// TestPlanTable prints what the planner reaches over a table of cells
// (-plan.table all, or -plan.table 64:5,1024:4); it fails when a cell
// misses its record diameter.
func TestPlanTable(t *testing.T) {
	if *planTable == "" {
		t.Skip("-plan.table not set")
	}
	var cells [][2]int
	if *planTable == "all" {
		for _, n := range []int{64, 128, 256, 512, 1024} {
			for k := 4; k <= 8; k++ {
				cells = append(cells, [2]int{n, k})
			}
		}
	} else {
		for _, f := range strings.Split(*planTable, ",") {
			a, b, _ := strings.Cut(f, ":")
			n, err1 := strconv.Atoi(a)
			k, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil {
				t.Fatalf("cell %q: want N:K", f)
			}
			cells = append(cells, [2]int{n, k})
		}
	}
	var seeds []int64
	for _, f := range strings.Split(*planSeeds, ",") {
		s, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("seed %q: %v", f, err)
		}
		seeds = append(seeds, s)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tports\tseed\trecord D\t(nodes)\tMoore D\tplan D\tavg hops\tMoore avg\tover\tlift evals\tswap evals\ttime\tsource\t")
	for _, c := range cells {
		for _, seed := range seeds {
			planCell(t, tw, c[0], c[1], seed)
		}
	}
}

// planCell plans one cell of TestPlanTable, prints its row and fails the
// test when the plan misses the record diameter.
func planCell(t *testing.T, tw *tabwriter.Writer, n, k int, seed int64) {
	t.Helper()
	start := time.Now()
	budget := defaultBudget(n).scaled(*planScale)
	if *planStreamN > 0 {
		budget.streams = *planStreamN
	}
	p, err := planWith(n, k, seed, budget)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	rd, rn := -1, 0
	if p.Record != nil {
		rd, rn = p.Record.Diameter, p.Record.Nodes
	}
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%+.3f\t%d\t%d\t%.1fs\t%s\t\n", n, k, seed, rd, rn, p.MooreDiameter,
		p.Diameter, p.AvgHops, p.MooreAvgHops, p.AvgHopsOver, p.LiftEvaluations, p.Evaluations, took.Seconds(), p.Source)
	tw.Flush()
	if p.RecordGap != 0 {
		t.Errorf("%d×%d seed %d: diameter %d, record %d", n, k, seed, p.Diameter, rd)
	}
}

// TestFarPair checks the distance matrix's far pairs, which the swap
// search aims at.
func TestFarPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range [][2]int{{100, 3}, {130, 4}, {64, 5}} {
		g, err := Generate("random-regular", c[0], Options{Ports: c[1], Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		m, ok := newDistMatrix(adjacencyOf(g))
		d := g.Metrics().Diameter
		if !ok || m.diameter() != d {
			t.Fatalf("%v: D=%d ok=%v, graph D=%d", c, m.diameter(), ok, d)
		}
		for thr := d - 1; thr <= d; thr++ {
			for range 20 {
				fp, found := m.farPair(thr, rng)
				if got := g.Distances(noc.NodeID(fp[0]))[fp[1]]; !found || got < thr {
					t.Fatalf("%v: far pair %v at %d hops (found %v), want %d or more", c, fp, got, found, thr)
				}
			}
		}
		if _, found := m.farPair(d+1, rng); found {
			t.Errorf("%v: a pair beyond the diameter %d", c, d)
		}
	}
}

// benchPlan plans n nodes with k ports (seed 1) per iteration and reports
// the plan's diameter, its gap to the record, its average hops above the
// Moore bound's and the process's CPU seconds per plan (both streams).
func benchPlan(b *testing.B, n, k int) {
	var p *Proposal
	cpu0 := cpuSeconds()
	for b.Loop() {
		var err error
		if p, err = Plan(n, k, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(p.Diameter), "diameter")
	b.ReportMetric(float64(p.RecordGap), "record-gap")
	b.ReportMetric(p.AvgHopsOver, "hops-over-moore")
}

// cpuSeconds is the user and system CPU time the process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func BenchmarkPlan1024x4(b *testing.B) { benchPlan(b, 1024, 4) }
func BenchmarkPlan1024x5(b *testing.B) { benchPlan(b, 1024, 5) }
func BenchmarkPlan1024x6(b *testing.B) { benchPlan(b, 1024, 6) }
func BenchmarkPlan1024x7(b *testing.B) { benchPlan(b, 1024, 7) }
func BenchmarkPlan1024x8(b *testing.B) { benchPlan(b, 1024, 8) }

// TestPlanStreamsDeterministic checks that the parallel streams give the
// same plan whether they run one at a time or side by side, and that a
// second stream is searched at all.
func TestPlanStreamsDeterministic(t *testing.T) {
	plan := func(procs int) *Proposal {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		p, err := planWith(48, 5, 3, defaultBudget(48).scaled(0.25))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := plan(1), plan(4)
	if !slices.Equal(a.Links, b.Links) || a.Source != b.Source || a.Evaluations != b.Evaluations || a.LiftEvaluations != b.LiftEvaluations {
		t.Fatalf("one proc: %s, %d+%d evaluations; four: %s, %d+%d", a.Source, a.LiftEvaluations, a.Evaluations, b.Source, b.LiftEvaluations, b.Evaluations)
	}
	one := defaultBudget(48).scaled(0.25)
	one.streams = 1
	single, err := planWith(48, 5, 3, one)
	if err != nil {
		t.Fatal(err)
	}
	if a.Streams != 2 || single.Streams != 1 || single.LiftEvaluations >= a.LiftEvaluations || single.Diameter < a.Diameter ||
		single.Diameter == a.Diameter && single.AvgHops < a.AvgHops {
		t.Fatalf("one stream: D=%d avg=%.3f %d lift evaluations; two: D=%d avg=%.3f %d", single.Diameter, single.AvgHops,
			single.LiftEvaluations, a.Diameter, a.AvgHops, a.LiftEvaluations)
	}
}
