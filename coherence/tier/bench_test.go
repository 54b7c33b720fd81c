package tier_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
)

// countingFile counts the reads of a File.
type countingFile struct {
	tier.File
	reads int
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.File.ReadAt(p, off)
}

// osFile opens a tier file of slots slots in dir.
func osFile(tb testing.TB, dir string, slots int) *tier.OSFile {
	tb.Helper()
	p := filepath.Join(dir, "fast.tier")
	if _, err := os.Stat(p); err != nil {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	f, err := tier.OpenFile(p, int64(slots+1)*tier.SlotSize)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

// TestReturnFromADiskFileIsOneRead: on a real file (the test's temporary
// directory) a spilled page comes back with one read, exact; and the
// store reopened on the file (a restart) finds every spilled page.
func TestReturnFromADiskFileIsOneRead(t *testing.T) {
	dir := t.TempDir()
	f := &countingFile{File: osFile(t, dir, 200)}
	s, err := tier.New(tier.Config{Memory: 32, Fast: f, Poison: true})
	if err != nil {
		t.Fatal(err)
	}
	h := newHolder(s)
	for i := range 100 {
		fill(h.alloc(t, key(i)), i, 1)
		h.endStep()
	}
	var spilled []int
	for i := range 100 {
		if s.Speed(key(i)) == gva.SpeedFastDisk {
			spilled = append(spilled, i)
		}
	}
	if len(spilled) < 60 {
		t.Fatalf("%d pages spilled of 100 in a memory of 32", len(spilled))
	}
	// a restart: the file closed and opened again
	s.Close()
	f2 := &countingFile{File: osFile(t, dir, 200)}
	r, err := tier.New(tier.Config{Memory: 32, Fast: f2})
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, k := range r.Recovered() {
		found = append(found, int(k.Page())-1)
	}
	slices.Sort(found)
	if !slices.Equal(found, spilled) {
		t.Fatalf("reopened, the file holds pages %v, want the spilled %v", found, spilled)
	}
	for _, i := range spilled {
		before := f2.reads
		p, ok := r.Lookup(key(i))
		if !ok {
			t.Fatalf("page %d lost", i)
		}
		if n := f2.reads - before; n != 1 {
			t.Fatalf("page %d came back with %d reads, want 1", i, n)
		}
		if g, err := gen(p, i); err != nil || g != 1 {
			t.Fatalf("page %d: gen %d, %v", i, g, err)
		}
	}
}

// BenchmarkSpillReturn: a 4 KiB page's spill to a fast tier and its
// return, on tmpfs (/dev/shm; TIER_BENCH_DIR names another directory).
// Reported: the median spill (a Balance's time per page it spilled, its
// write and fdatasync included) and the median return (a Lookup of a page
// on the disk tier: one read), in ns.
func BenchmarkSpillReturn(b *testing.B) {
	dir := os.Getenv("TIER_BENCH_DIR")
	if dir == "" {
		dir = "/dev/shm"
	}
	d, err := os.MkdirTemp(dir, "tier-bench")
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	const mem, pages = 1000, 4000
	s, err := tier.New(tier.Config{Memory: mem, Fast: osFile(b, d, 2*pages), High: 0.85, Low: 0.849})
	if err != nil {
		b.Fatal(err)
	}
	h := newHolder(s)
	for i := range pages {
		fill(h.alloc(b, key(i)), i, 1)
		h.endStep()
	}
	var spills, returns []time.Duration
	i := 0
	b.ResetTimer()
	for range b.N {
		// the next page on disk
		for s.Speed(key(i%pages)) == gva.SpeedMemory {
			i++
		}
		k := key(i % pages)
		i++
		t0 := time.Now()
		if _, ok := s.Lookup(k); !ok {
			b.Fatal("lost")
		}
		returns = append(returns, time.Since(t0))
		before := s.Stats().Spills
		t0 = time.Now()
		h.endStep()
		if n := s.Stats().Spills - before; n > 0 {
			spills = append(spills, time.Since(t0)/time.Duration(n))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(median(returns).Nanoseconds()), "return-p50-ns")
	b.ReportMetric(float64(median(spills).Nanoseconds()), "spill-p50-ns")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}
