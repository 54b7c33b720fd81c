package agent_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
)

// TestClockOnLiveNodes: on a line of three agents (one process, so one
// monotonic clock: every true offset is zero), dpuctl clock show on node 0
// estimates both others within their bounds, and dpu_clock's reading
// (client.Clock) on every node names node 0's clock and orders readings
// taken one after the other.
func TestClockOnLiveNodes(t *testing.T) {
	nodes := startLine(t, 3, nil)
	c, ctx := dialCtl(t, nodes[0].runDir)
	var entries []ctl.ClockEntry
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if entries, err = c.Clock(ctx); err != nil {
			t.Fatal(err)
		}
		known := map[noc.NodeID]bool{}
		for _, e := range entries {
			// (the first estimates on a loaded machine may be wide: wait
			// for ones within the bound checked below)
			known[e.Node] = !e.Excluded && (e.Self || e.Bound <= 20*time.Millisecond)
		}
		if known[1] && known[2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 0's clock after 20 s: %+v", entries)
		}
		time.Sleep(100 * time.Millisecond)
		ctx = ctxT(t, 5*time.Second)
	}
	t.Logf("node 0's clock: %+v", entries)
	for _, e := range entries {
		switch {
		case e.Self:
			if e.Node != 0 || e.Cluster == nil || e.Cluster.Ref != 0 || e.Cluster.Error != 0 {
				t.Errorf("node 0's own entry %+v: it is the reference", e)
			}
		case e.Excluded:
			t.Errorf("node %d excluded: %s", e.Node, e.Reason)
		default:
			if e.Offset > e.Bound || -e.Offset > e.Bound || e.Bound > 20*time.Millisecond {
				t.Errorf("node %d: offset %v ± %v; the truth is 0", e.Node, e.Offset, e.Bound)
			}
			if e.Hops != int(e.Node) {
				t.Errorf("node %d: %d hops", e.Node, e.Hops)
			}
		}
	}
	hctx := ctxT(t, time.Minute)
	var prev struct{ time, err time.Duration }
	for i := range 6 {
		nd := nodes[i%3]
		r, err := dialHost(t, nd).Clock(hctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Ref != 0 || r.Error < 0 {
			t.Errorf("node %d's reading %+v: want node 0's clock", i%3, r)
		}
		if i > 0 && r.Time+r.Error < prev.time-prev.err {
			t.Errorf("reading %d (%v ± %v) is before the one taken before it (%v ± %v)", i, r.Time, r.Error, prev.time, prev.err)
		}
		prev.time, prev.err = r.Time, r.Error
	}
}
