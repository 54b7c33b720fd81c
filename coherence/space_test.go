package coherence

import (
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
