package fabric_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
)

// upDurable starts nodes agents on a kind fabric with replicas = r and
// durable pages (dpu-fabric up --replicas r --durable).
func upDurable(t *testing.T, nodes int, kind string, r int) *fabric.State {
	t.Helper()
	return upFabric(t, nodes, kind, r, true)
}

// TestPowercutWithDurablePagesR1 and ...R2: four agents on a ring with
// durable pages, 12 clients CAS-incrementing one word; three times every
// agent is killed (SIGKILL, one right after the other: a power cut of the
// whole fabric) and all are restarted. Each time the page comes back from
// the agents' disks with every acknowledged increment: the final counter
// is at least the increments acknowledged over the three rounds, at most
// the calls of unknown outcome more, read the same through every node.
func TestPowercutWithDurablePagesR1(t *testing.T) { powercutDurable(t, 1) }

func TestPowercutWithDurablePagesR2(t *testing.T) { powercutDurable(t, 2) }

func powercutDurable(t *testing.T, r int) {
	const nodes, rounds = 4, 3
	st := upDurable(t, nodes, "ring", r)
	ctx := ctxFor(t, 5*time.Minute)
	g, err := dialNode(t, st, 0).Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	acked, unknown := 0, 0
	for round := range rounds {
		l := startCASLoad(t, st, g)
		// After a restart the page comes back once the agents' reloaded
		// copies are taken over (two home refreshes, 2 s by default).
		if !eventually(60*time.Second, func() bool { return l.acked() >= 100 }) {
			l.describe()
			t.Fatalf("round %d: only %d increments in 60 s", round, l.acked())
		}
		for i := range nodes {
			if err := st.Kill(i, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		close(l.stop)
		l.wg.Wait()
		for _, cc := range l.counters {
			acked += cc.acked
			unknown += cc.unknown
		}
		t.Logf("round %d: every node killed with %d increments acknowledged so far (%d unknown)", round, acked, unknown)
		for i := range nodes {
			if err := st.Restart(i); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.WaitConverged(ctxFor(t, 60*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	var final uint64
	for i := range nodes {
		var v uint64
		var lerr error
		if !eventually(60*time.Second, func() bool {
			c := dialNode(t, st, i)
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			v, lerr = c.Load64(lctx, g)
			c.Close()
			return lerr == nil
		}) {
			t.Fatalf("read through node %d after the last restart: %v", i, lerr)
		}
		if i > 0 && v != final {
			t.Fatalf("node %d reads %d, node 0 %d", i, v, final)
		}
		final = v
	}
	t.Logf("final counter %d, acknowledged %d, unknown outcomes %d", final, acked, unknown)
	if final < uint64(acked) || final > uint64(acked+unknown) {
		t.Fatalf("final counter %d, want the %d acknowledged increments (+ at most %d of unknown outcome): %d lost", final, acked, unknown, max(0, acked-int(final)))
	}
}
