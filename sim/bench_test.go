package sim

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// worlds keeps the worlds the benchmarks set up: the testing package runs
// a benchmark once with b.N = 1 before the real run, and the second run
// goes on with the first one's world rather than converging again.
var worlds = map[string]*World{}

// prepared returns cfg's world, converged, set up and warmed.
func prepared(b *testing.B, cfg Config) *World {
	key := fmt.Sprintf("%+v", cfg)
	if w := worlds[key]; w != nil {
		return w
	}
	w, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := w.Prepare(); err != nil {
		b.Fatal(err)
	}
	warm := 5 * time.Millisecond // every client has mapped pages
	if cfg.Nodes > 256 {
		warm = 50 * time.Millisecond // and the routing refresh that completed convergence is over
	}
	w.RunFor(warm)
	b.Logf("%d nodes, %v links: converged, set up and warmed in %v wall", cfg.Nodes, cfg.Links, time.Since(t0))
	worlds[key] = w
	return w
}

// benchFabric measures host requests completed per wall second on an
// n-node small-world fabric without faults (routing convergence and setup
// are not timed). One iteration runs 1ms of virtual time.
func benchFabric(b *testing.B, n int, cfg Config) {
	cfg.Seed, cfg.Nodes, cfg.Topo, cfg.CheckEvery = 1, n, "smallworld", -1
	if cfg.HotPages == 0 {
		cfg.HotPages, cfg.ColdPages = 8, n/4+8
	}
	w := prepared(b, cfg)
	b.ResetTimer()
	start, frames, cpu := w.Ops(), w.res.Frames, cpuTime()
	for range b.N {
		w.RunFor(time.Millisecond)
	}
	b.StopTimer()
	ops := w.Ops() - start
	b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "ops/s")
	// On a shared machine the wall clock counts other processes' time
	// too: requests per second of this process's own CPU time is the
	// figure per core (the simulator is single-threaded; the garbage
	// collector's time counts too).
	b.ReportMetric(float64(ops)/(cpuTime()-cpu).Seconds(), "ops/cpu-s")
	b.ReportMetric(float64(ops)/float64(b.N), "ops/vms")
	b.ReportMetric(float64(w.res.Frames-frames)/float64(max(ops, 1)), "frames/op")
}

// BenchmarkFabric runs the default mix of the sweeps (a quarter loads,
// the rest writes, atomics, locks, acquires, maps) and a read-mostly mix
// (most requests are loads of mapped replicas).
func BenchmarkFabric(b *testing.B) {
	sizes := []int{16, 128}
	if os.Getenv("DPU_SIM_BENCH_1024") != "" {
		sizes = append(sizes, 1024)
	}
	for _, n := range sizes {
		if n <= 128 {
			b.Run(fmt.Sprintf("nodes=%d/mix=default", n), func(b *testing.B) { benchFabric(b, n, Config{}) })
		}
		if n <= 128 {
			b.Run(fmt.Sprintf("nodes=%d/mix=read-mostly", n), func(b *testing.B) { benchFabric(b, n, Config{ReadMostly: true}) })
			continue
		}
		// On a large fabric a write to a page every node maps costs one
		// update per node: clients work on the pages of their
		// neighbourhood (each page shared by about 8 nodes).
		local := Config{HotPages: 4, ColdPages: n / 2, Neighbourhood: 4}
		b.Run(fmt.Sprintf("nodes=%d/mix=default/local", n), func(b *testing.B) { benchFabric(b, n, local) })
		local.ReadMostly = true
		b.Run(fmt.Sprintf("nodes=%d/mix=read-mostly/local", n), func(b *testing.B) { benchFabric(b, n, local) })
	}
}

// BenchmarkLinks compares the two link modes on 256 and 1,024 nodes with
// the same workloads (clients on the pages of their neighbourhood, as
// BenchmarkFabric's large runs; the default mix and the read-mostly one):
// abstract links, which carry whole frames, against the real link layer
// over datagram wires. Each reports host requests per wall second and per
// second of the process's CPU time, and frames put on the wires per
// request.
func BenchmarkLinks(b *testing.B) {
	for _, n := range []int{256, 1024} {
		for _, mix := range []string{"default", "read-mostly"} {
			for _, links := range []Links{LinksAbstract, LinksReal} {
				cfg := Config{HotPages: 4, ColdPages: n / 2, Neighbourhood: 4, Links: links, ReadMostly: mix == "read-mostly"}
				b.Run(fmt.Sprintf("nodes=%d/mix=%s/links=%v", n, mix, links), func(b *testing.B) { benchFabric(b, n, cfg) })
			}
		}
	}
}
