package coherence

import (
	"fmt"
	"slices"
	"testing"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// advTracer records the Tracer's ReplicaAdvanced calls as
// "node:had:from->to".
type advTracer struct{ adv []string }

func (r *advTracer) Applied(noc.NodeID, gva.GVA, gva.Version, int, []byte) {}

func (r *advTracer) ReplicaAdvanced(self noc.NodeID, _ gva.GVA, had bool, from, to gva.Version) {
	r.adv = append(r.adv, fmt.Sprintf("%v:%v:%d->%d", self, had, from, to))
}

// TestTracerSeesTheContentASwapBrings: the Tracer (the simulator's
// checker of replica versions) is told of every content a replica takes:
// the first install of a ref, and at an acquire the newer content the swap
// brings over a replica an invalidation left behind.
func TestTracerSeesTheContentASwapBrings(t *testing.T) {
	rec := &advTracer{}
	x := newFab(t, lineGraph(t, 3), func(c *Config) { c.Tracer = rec })
	p := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: p})
	if want := []string{"2:false:0->0"}; !slices.Equal(rec.adv, want) {
		t.Fatalf("replica advances at the ref: %v, want %v", rec.adv, want)
	}
	// A write past UpdateThreshold invalidates node 2's replica: its
	// content stays at version 0.
	x.ok(0, Request{Op: HostStore, GVA: p, Data: make([]byte, DefaultUpdateThreshold+1)})
	x.settle()
	rec.adv = nil
	x.ok(2, Request{Op: HostAcquire, GVA: p})
	x.settle()
	if want := []string{"2:true:0->1"}; !slices.Equal(rec.adv, want) {
		t.Fatalf("replica advances at the acquire: %v, want %v", rec.adv, want)
	}
}
