package pathcache

import (
	"runtime"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
)

// BenchmarkGetHit looks up entries of a full cache in a scattered order
// (target: ≤ 100 ns, 0 allocs): hot is a 1k-entry working set that stays in
// the CPU caches; 64k-cold touches a cold map slot and entry per lookup, so
// it measures memory latency as much as code.
func BenchmarkGetHit(b *testing.B) {
	for _, bc := range []struct {
		name string
		n    int
	}{{"hot-1k", 1 << 10}, {"64k-cold", 1 << 16}} {
		b.Run(bc.name, func(b *testing.B) {
			n := bc.n
			c := mustNew(b, Config{MaxEntries: n, IdleTTL: time.Second})
			keys := make([]gva.GVA, n)
			for i := range keys {
				keys[i] = key(uint64(i) * 2654435761 % (1 << 40))
				insert(b, c, keys[i], 0)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, ok := c.Get(keys[i*7919%n], time.Duration(i)); !ok {
					b.Fatal("miss")
				}
			}
		})
	}
}

// BenchmarkUpsertEvict inserts new pages into a full cache: every insert
// evicts the least recently used entry (which has down ports) and reports it.
func BenchmarkUpsertEvict(b *testing.B) {
	const n = 1 << 14
	c := mustNew(b, Config{MaxEntries: n})
	for i := range uint64(n) {
		e := insert(b, c, key(i), 0)
		e.Down, _ = e.Down.Add(1)
		e.Up = 0
	}
	b.ReportAllocs()
	b.ResetTimer()
	next := uint64(n)
	for b.Loop() {
		e, _, ev, err := c.Upsert(key(next), time.Duration(next))
		if err != nil || len(ev) != 1 {
			b.Fatal(ev, err)
		}
		e.Down, _ = e.Down.Add(2)
		e.Up = 0
		next++
	}
}

// BenchmarkSweep measures expiring idle entries: each op is one Sweep that
// evicts a full batch (64) of entries with down ports. The timer is stopped
// while the cache is refilled.
func BenchmarkSweep(b *testing.B) {
	const n = 1 << 14
	c := mustNew(b, Config{MaxEntries: n, IdleTTL: time.Millisecond})
	now := time.Duration(0)
	fill := func() {
		for i := range uint64(n) {
			e, _, _, _ := c.Upsert(key(i), now)
			e.Down, _ = e.Down.Add(3)
		}
		now += time.Second
	}
	fill()
	b.ReportAllocs()
	b.ResetTimer()
	evicted := 0
	for b.Loop() {
		if c.Len() == 0 {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		evicted += len(c.Sweep(now))
	}
	b.ReportMetric(float64(evicted)/float64(b.N), "evictions/op")
}

// BenchmarkMemoryPerEntry reports the heap held per entry of a cache of
// 100k entries (entry, LRU list element and map slot together).
func BenchmarkMemoryPerEntry(b *testing.B) {
	const n = 100_000
	var perEntry float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := mustNew(b, Config{MaxEntries: n})
		for i := range uint64(n) {
			e, _, _, _ := c.Upsert(key(i*2654435761%(1<<40)), 0)
			e.Down, _ = e.Down.Add(1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perEntry, "B/entry")
}
