package coherence

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// The split rule (split.go): tests on a ring of five nodes cut in two.
// Each fails without the rule: DPU_TEST_NO_SPLIT_RULE=1 go test -run
// TestSplit ./coherence/ runs them with Config.NoSplitRule (the mutation
// check) and must fail all four.

// splitFab is a ring of n nodes at R = 2 with a 12 ms dead interval.
func splitFab(t *testing.T, n int, tune func(*Config)) *fab {
	lc := fastLinks()
	return newFabLinks(t, ringGraph(t, n), &lc, func(c *Config) {
		replicas(2)(c)
		c.FabricNodes = n
		c.NoSplitRule = os.Getenv("DPU_TEST_NO_SPLIT_RULE") == "1"
		c.DeadInterval = lc.DeadInterval
		if tune != nil {
			tune(c)
		}
	})
}

// cut cuts (or, up, restores) every link between side and the other nodes.
func (x *fab) cut(side []noc.NodeID, up bool) {
	x.t.Helper()
	for _, l := range x.g.Links() {
		if slices.Contains(side, l.A) != slices.Contains(side, l.B) {
			if err := x.f.SetLink(l.A, l.B, up); err != nil {
				x.t.Fatal(err)
			}
		}
	}
}

// acting lists the nodes that own key and are not fenced.
func (x *fab) acting(key gva.GVA) []noc.NodeID {
	var out []noc.NodeID
	for i, e := range x.eng {
		if o, _ := e.Holding(key); o && !e.Fenced(key) {
			out = append(out, noc.NodeID(i))
		}
	}
	return out
}

// minoritySide is the owner 0 and its neighbour that is not its backup b:
// two of five nodes, b on the other side.
func minoritySide(b noc.NodeID) []noc.NodeID {
	if b == 1 {
		return []noc.NodeID{0, 4}
	}
	return []noc.NodeID{0, 1}
}

// TestSplitOwnerInMinorityIsFenced: the owner cut off with one other node
// stops acknowledging; its backup, with the majority, takes the page over
// with every acknowledged add; at no instant do two owners act, and after
// the halves join the old owner gives the page up.
func TestSplitOwnerInMinorityIsFenced(t *testing.T) { splitOwnerInMinority(t, nil) }

func splitOwnerInMinority(t *testing.T, tune func(*Config)) {
	x := splitFab(t, 5, tune)
	p := x.alloc(0)
	acked := x.fetchAdds(2, p, 5)
	x.settle()
	b := x.eng[0].Backups(p.Key())[0]
	minority := minoritySide(b)
	other := minority[1]
	x.cut(minority, false)
	for range 40 {
		x.f.Run(5 * time.Millisecond)
		if a := x.acting(p.Key()); len(a) > 1 {
			t.Fatalf("%v after the cut: owners %v act at once", x.f.Now(), a)
		}
	}
	if c := x.do(int(other), Request{Op: HostFetchAdd, GVA: p, Operand: 1}); c.Err == nil {
		t.Fatalf("an add in the minority was acknowledged: %v", c)
	}
	if a := x.acting(p.Key()); !slices.Equal(a, []noc.NodeID{b}) {
		t.Fatalf("acting owners with the owner cut off: %v, want the backup %v", a, b)
	}
	if got := x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1}).Value; got != acked {
		t.Fatalf("add in the majority read %d, %d were acknowledged", got, acked)
	}
	acked++
	x.cut(minority, true)
	for range 40 {
		x.f.Run(5 * time.Millisecond)
		if a := x.acting(p.Key()); len(a) > 1 {
			t.Fatalf("%v after the join: owners %v act at once", x.f.Now(), a)
		}
	}
	if o, _ := x.eng[0].Holding(p.Key()); o {
		t.Fatal("the old owner still holds the page after the join")
	}
	if got := x.ok(int(other), Request{Op: HostFetchAdd, GVA: p, Operand: 1}).Value; got != acked {
		t.Fatalf("add after the join read %d, %d were acknowledged", got, acked)
	}
}

// TestSplitBackupInMinorityWaits: the backup cut off with one other node
// takes nothing over; the owner, with the majority, replaces it and goes
// on acknowledging.
func TestSplitBackupInMinorityWaits(t *testing.T) { splitBackupInMinority(t, nil) }

func splitBackupInMinority(t *testing.T, tune func(*Config)) {
	x := splitFab(t, 5, tune)
	p := x.alloc(0)
	x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	x.settle()
	b := x.eng[0].Backups(p.Key())[0]
	minority := []noc.NodeID{b, 2} // the backup and the node past it
	if b == 4 {
		minority = []noc.NodeID{4, 3}
	}
	x.cut(minority, false)
	for range 40 {
		x.f.Run(5 * time.Millisecond)
		if o, _ := x.eng[b].Holding(p.Key()); o {
			t.Fatalf("%v after the cut: the backup in the minority took the page over", x.f.Now())
		}
	}
	majority := 3
	if b == 4 {
		majority = 2
	}
	if got := x.ok(majority, Request{Op: HostFetchAdd, GVA: p, Operand: 1}).Value; got != 1 {
		t.Fatalf("add in the majority read %d, want 1", got)
	}
	if bs := x.eng[0].Backups(p.Key()); len(bs) != 1 || bs[0] == b {
		t.Fatalf("backups of the owner in the majority: %v, want one in place of %v", bs, b)
	}
}

// TestSplitLockHolderInMinorityKeepsTheLock: a lock's holder cut off in a
// minority (its node owns the page) keeps the lock: the backup in the
// majority does not take the pinned page over, so no one else locks it
// while the holder still holds it.
func TestSplitLockHolderInMinorityKeepsTheLock(t *testing.T) { splitLockHolder(t, nil) }

func splitLockHolder(t *testing.T, tune func(*Config)) {
	x := splitFab(t, 5, func(c *Config) {
		c.Arbiter.MaxPin = 5 * time.Second
		if tune != nil {
			tune(c)
		}
	})
	p := x.alloc(0)
	x.settle()
	if c := x.do(0, Request{Op: HostLock, GVA: p, Holder: 7}); c.Err != nil {
		t.Fatalf("lock: %v", c.Err)
	}
	x.settle()
	b := x.eng[0].Backups(p.Key())[0]
	x.ok(int(b), Request{Op: HostRef, GVA: p})
	x.cut(minoritySide(b), false)
	x.f.Run(200 * time.Millisecond)
	c := x.do(int(b), Request{Op: HostLock, GVA: p, Holder: 9})
	if c.Err == nil {
		t.Fatal("a lock in the majority succeeded while its holder, cut off, still holds it")
	}
	t.Logf("lock in the majority: %v", errno(c)) // timed out, or the owner unreachable
}

// TestSplitOwnerLateToLearnOfTheSplitIsFencedFirst: the owner's only news
// of the split is routing, and routing can be a dead interval late. On a
// ring of seven, the owner 0 is cut off with two nodes; the one between
// it and the far end of the cut crashes before the far end's news of the
// cut passed it, so the owner still sees the whole fabric (the cut link's
// two ends list each other in its database) until its own link to the
// crashed node is declared dead. The backup, in the majority, must not
// take the page over before that: it waits FailoverGrace + SplitGrace,
// and SplitGrace covers the dead interval (dpu-sim seed 93, 15 nodes,
// smallworld, every fault, replicas 2: the owner isolated behind a
// crashed node still acted when its backup had taken the page over).
func TestSplitOwnerLateToLearnOfTheSplitIsFencedFirst(t *testing.T) {
	x := splitFab(t, 7, func(c *Config) { c.FailoverGrace = 2 * time.Millisecond })
	p := x.alloc(0)
	for range 3 {
		x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	}
	x.settle()
	b := x.eng[0].Backups(p.Key())[0]
	minority, relay := []noc.NodeID{0, 1, 2}, noc.NodeID(1)
	if b == 1 {
		minority, relay = []noc.NodeID{0, 6, 5}, 6
	}
	x.cut(minority, false)
	cutAt := x.f.Now()
	x.f.Run(8 * time.Millisecond) // within the dead interval: no one knows yet
	x.f.Kill(relay)
	took := false
	for range 300 {
		x.f.Run(200 * time.Microsecond)
		a := x.acting(p.Key())
		if len(a) > 1 {
			t.Fatalf("%v after the cut: owners %v act at once (the owner did not know it was in a minority)", x.f.Now()-cutAt, a)
		}
		if slices.Equal(a, []noc.NodeID{b}) {
			took = true
		}
	}
	if !took {
		t.Fatalf("the backup %v in the majority did not take the page over", b)
	}
	if got := x.ok(int(b), Request{Op: HostFetchAdd, GVA: p, Operand: 1}).Value; got != 3 {
		t.Fatalf("add in the majority read %d, want 3", got)
	}
}

// TestSplitChecksArePaced: an owner back in a majority asks each backup
// to confirm it at most once per RetryInterval, also when another
// backup's answer comes in between (R = 3: one backup answers, the other's
// checks are lost); once they get through, the owner is confirmed.
func TestSplitChecksArePaced(t *testing.T) {
	lc := fastLinks()
	var muted noc.NodeID = noc.BroadcastNode
	lose := false
	var at []time.Duration
	var x *fab
	x = newFabFilter(t, ringGraph(t, 5), &lc, func(c *Config) {
		replicas(3)(c)
		c.FabricNodes = 5
		c.DeadInterval = lc.DeadInterval
		c.FailoverGrace, c.SplitGrace = time.Second, time.Second // no takeover while the owner is away
	}, func(self noc.NodeID, f *noc.Frame) bool {
		if self == muted && f.Src == 0 && f.Class == noc.ClassControl && f.Op == OpReplicate && f.RequestID&checkBit != 0 {
			at = append(at, x.f.Now())
			return lose
		}
		return false
	})
	p := x.alloc(0)
	x.ok(2, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	x.settle()
	bs := x.eng[0].Backups(p.Key())
	if len(bs) != 2 {
		t.Fatalf("backups %v", bs)
	}
	x.cut([]noc.NodeID{0}, false) // alone: a minority
	x.f.Run(40 * time.Millisecond)
	if !x.eng[0].Fenced(p.Key()) {
		t.Fatal("the owner cut off alone is not fenced")
	}
	muted, lose = bs[1], true
	x.cut([]noc.NodeID{0}, true)
	x.f.Run(20 * lc.HeartbeatInterval)
	if !x.eng[0].Fenced(p.Key()) {
		t.Fatal("the owner was confirmed with one backup's checks lost")
	}
	if len(at) < 3 {
		t.Fatalf("%d checks reached backup %v, want a first one and re-sent ones", len(at), muted)
	}
	retry := x.eng[0].cfg.RetryInterval
	for i := 1; i < len(at); i++ {
		if at[i]-at[i-1] < retry/2 { // half: slack for the way there
			t.Fatalf("checks to backup %v at %v: %v apart, under RetryInterval %v", muted, at, at[i]-at[i-1], retry)
		}
	}
	lose = false
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return !x.eng[0].Fenced(p.Key()) })
	if x.eng[0].Fenced(p.Key()) {
		t.Fatal("the owner is still fenced once its checks get through")
	}
}
