package coherence

import (
	"syscall"
	"testing"
	"time"
)

// TestStaleGVAIsESTALE: after its home restarts (a new allocation epoch),
// a GVA of the home's earlier run ends with ESTALE, from the home and
// from another node, while a new page of the new run works.
func TestStaleGVAIsESTALE(t *testing.T) {
	epochs := map[int]uint32{}
	x := newFab(t, lineGraph(t, 3), func(c *Config) {
		c.RequestTimeout = 50 * time.Millisecond
		c.HomeRefresh = 10 * time.Millisecond
		epochs[int(c.Self)]++
		c.AllocEpoch = epochs[int(c.Self)]
	})
	old := x.alloc(0)
	x.ok(2, Request{Op: HostStore, GVA: old, Data: []byte{7}})
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !x.f.RunUntil(x.f.Now()+10*time.Second, x.f.Converged) {
		t.Fatal("no convergence after the restart")
	}
	x.f.Run(100 * time.Millisecond) // past the restart's grace
	fresh := x.alloc(0)
	if fresh.Key() == old.Key() {
		t.Fatalf("the restarted node handed out %v again", old)
	}
	for _, n := range []int{0, 2} {
		for _, r := range []Request{
			{Op: HostStore, GVA: old, Data: []byte{1}},
			{Op: HostCAS, GVA: old, Expected: 7, Operand: 8},
			{Op: HostRef, GVA: old},
		} {
			if c := x.do(n, r); errno(c) != syscall.ESTALE {
				t.Fatalf("node %d %v of the earlier run's page: %v, want ESTALE", n, r.Op, c.Err)
			}
		}
	}
	x.ok(2, Request{Op: HostStore, GVA: fresh, Data: []byte{1}})
}
