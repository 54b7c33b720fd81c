package coherence

import (
	"errors"
	"runtime"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/gva"
)

func TestAllocationSpacesOfRunsAreDisjoint(t *testing.T) {
	e := &Engine{nextPage: firstPage(7)}
	pn, ok := e.takePage()
	if !ok || AllocEpoch(pn) != 7 || uint64(pn)&counterMask != 1 {
		t.Fatalf("first page of epoch 7: %#x %v", pn, ok)
	}
	// the next run's first page lies above everything this run can take
	next := firstPage(8) + 1
	e.nextPage = firstPage(8) - 1 // this run's last page
	if _, ok := e.takePage(); ok {
		t.Fatal("took a page past the end of the run's space")
	}
	if next <= e.nextPage {
		t.Fatalf("epoch 8 starts at %#x, not above epoch 7's last %#x", next, e.nextPage)
	}
	if g := gva.New(1, firstPage(MaxAllocEpoch)+counterMask, 0, 0); g.Page() != firstPage(MaxAllocEpoch)+counterMask {
		t.Fatalf("largest page number does not fit a GVA: %v", g)
	}
}

// TestHostsAllocBeyondCapacityIsRefusedCheaply: the documented maximum
// (1 TiB, 2^28 pages) on a 64-page node is ENOMEM before any per-page
// work (it once built a value per page and ran the agent out of memory).
func TestHostsAllocBeyondCapacityIsRefusedCheaply(t *testing.T) {
	x := newHostFab(t, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := x.do(0, Request{Op: HostAlloc, Pages: 1 << 28})
	runtime.ReadMemStats(&after)
	if !errors.Is(c.Err, syscall.ENOMEM) {
		t.Fatalf("1 TiB alloc on a 64-page node: %v, want ENOMEM", c.Err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
		t.Fatalf("refusing it allocated %d MB", d>>20)
	}
	x.ok(0, Request{Op: HostAlloc, Pages: 1})
}
