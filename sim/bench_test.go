package sim

import (
	"testing"
	"time"
)

// BenchmarkFabric1024 measures host requests completed per wall second on
// a 1,024-node small-world fabric (no faults; routing convergence and
// setup are not timed).
func BenchmarkFabric1024(b *testing.B) {
	w, err := New(Config{Seed: 1, Nodes: 1024, Topo: "smallworld", HotPages: 8, ColdPages: 248, CheckEvery: -1, Think: 500 * time.Microsecond})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := w.Prepare(); err != nil {
		b.Fatal(err)
	}
	b.Logf("converged and set up in %v (virtual %v)", time.Since(t0), w.now)
	b.ResetTimer()
	start := w.Ops()
	for range b.N {
		w.RunFor(time.Millisecond)
	}
	b.StopTimer()
	ops := w.Ops() - start
	b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(ops)/float64(b.N), "ops/virtual-ms")
}
