package link_test

import (
	"testing"

	"github.com/aitherion/dpu/noc/port/mem"
)

// TestWindowStallsCountEachStallOnce: a sender held at the peer's credits
// counts the stall, and a stall ends only with a fragment sent, so there
// are never more stalls than datagrams sent plus one.
func TestWindowStallsCountEachStallOnce(t *testing.T) {
	cb := testConfig(2)
	cb.Window = 8
	cb.MaxMessage = 1000
	p := newPump(t, mem.Config{}, testConfig(1), cb)
	p.waitUp()
	ab := newStream(t, "a->b", 100, func(int) int { return 100 })
	for range 200 {
		ab.fill(p.now, p.a)
		p.step()
	}
	sa := p.a.Stats()
	if sa.WindowStalls == 0 || sa.WindowStalls > sa.TxDatagrams+1 {
		t.Fatalf("%d window stalls for %d datagrams sent: %+v", sa.WindowStalls, sa.TxDatagrams, sa)
	}
}
