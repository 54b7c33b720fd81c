package sim

import (
	"fmt"
	"os"
	"runtime"
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

// worlds keeps the world the benchmark that runs set up: the testing
// package runs a benchmark once with b.N = 1 before the real run, and the
// second run goes on with the first one's world rather than converging
// again. The next benchmark's world replaces it: a 1,024-node world left
// live would have the garbage collector go over it during every later
// benchmark, counted in their CPU time.
var worlds = map[string]*preparedWorld{}

type preparedWorld struct {
	*World
	// startup is the CPU time New and Prepare took: building the nodes,
	// converging routing, allocating the pages, opening the sessions.
	startup time.Duration
}

// prepared returns cfg's world, converged, set up and warmed.
func prepared(b *testing.B, cfg Config) *preparedWorld {
	key := fmt.Sprintf("%+v", cfg)
	if w := worlds[key]; w != nil {
		return w
	}
	clear(worlds)
	runtime.GC() // the world just dropped is freed before the timing starts
	t0, cpu := time.Now(), cpuTime()
	w, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Prepare(); err != nil {
		b.Fatal(err)
	}
	pw := &preparedWorld{World: w, startup: cpuTime() - cpu}
	warm := 5 * time.Millisecond // every client has mapped pages
	if cfg.Nodes > 256 && cfg.Links == LinksReal {
		warm = 50 * time.Millisecond // and the routing refresh that completed convergence is over
	}
	w.RunFor(warm)
	b.Logf("%d nodes, %v links: converged and set up in %v of CPU time, warmed, in %v wall", cfg.Nodes, cfg.Links, pw.startup.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	worlds[key] = pw
	return pw
}

// benchFabric measures host requests completed per wall second on an
// n-node small-world fabric without faults (routing convergence and setup
// are not timed). One iteration runs 1ms of virtual time.
func benchFabric(b *testing.B, n int, cfg Config) {
	cfg.Seed, cfg.Nodes = 1, n
	if cfg.CheckEvery == 0 {
		cfg.CheckEvery = -1 // the ownership check only at the end
	}
	if cfg.Topo == "" {
		cfg.Topo = "smallworld"
	}
	if cfg.HotPages == 0 {
		cfg.HotPages, cfg.ColdPages = 8, n/4+8
	}
	w := prepared(b, cfg)
	b.ResetTimer()
	start, frames, cpu := w.Ops(), w.wires.Sent, cpuTime()
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
	b.ReportMetric(float64(w.wires.Sent-frames)/float64(max(ops, 1)), "frames/op")
	b.ReportMetric(w.startup.Seconds(), "startup-cpu-s")
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

// BenchmarkAbstract1024 measures the simulator on 1,024 nodes with
// abstract links, the mode for large fabrics: host requests completed per
// second of the process's CPU time in the steady state (ops/cpu-s; one
// iteration runs 1 ms of virtual time, with every check that runs during a
// workload on, the ownership check every 200 µs as in dpu-sim's runs), and
// apart from it the one-off start-up (startup-cpu-s: building the nodes,
// converging routing, allocating the pages and opening the sessions). The
// clients work on the pages of their neighbourhood, as BenchmarkLinks's
// (a page every node maps would cost an update per node and write), with
// the default mix and the read-mostly one, on a 2-D torus and a
// small-world lattice:
//
//	go test -run '^$' -bench Abstract1024 -benchtime 20x ./sim/
func BenchmarkAbstract1024(b *testing.B) {
	const n = 1024
	for _, topo := range []string{"torus2d", "smallworld"} {
		for _, mix := range []string{"default", "read-mostly"} {
			cfg := Config{Topo: topo, HotPages: 4, ColdPages: n / 2, Neighbourhood: 4, Links: LinksAbstract, ReadMostly: mix == "read-mostly", CheckEvery: 200 * time.Microsecond}
			b.Run(fmt.Sprintf("topo=%s/mix=%s", topo, mix), func(b *testing.B) { benchFabric(b, n, cfg) })
		}
	}
}
