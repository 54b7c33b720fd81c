package sim

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// TestReplicasSurviveOwnerCrashes sweeps with replicas = 2 and every
// fault: owners crash, their pages fail over to backups that must hold
// every committed version, and the histories across the failovers stay
// linearizable.
func TestReplicasSurviveOwnerCrashes(t *testing.T) {
	cfg := testConfig()
	cfg.Replicas = 2
	n := seedsToRun(t, 60)
	lost, failovers := 0, 0
	for _, r := range sweep(t, cfg, n) {
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 8 --topo smallworld --faults all --workload 25ms --replicas 2\n%v",
				r.Seed, len(r.Violations), r.Seed, r.Violations)
		}
		lost += r.Lost
		failovers += r.Failovers
	}
	if failovers == 0 {
		t.Fatalf("%d seeds: no page failed over", n)
	}
	t.Logf("%d seeds: %d failovers, %d pages lost", n, failovers, lost)
}

// TestSeedsFromSweeps replays seeds of dpu-sim sweeps that once broke an
// invariant (or, with replicas, lost a page), with the sweep's own
// configuration: 16 nodes, smallworld, every fault of the time on real
// links (drop, delay, flap, crash: "all" before partitions joined it), or
// flaps on abstract links; and 15 nodes split in two; and 13 nodes on a
// line with every fault.
func TestSeedsFromSweeps(t *testing.T) {
	real := Config{Nodes: 16, Topo: "smallworld", Faults: FaultsNoSplit} // "all" when they were found
	flaps := Config{Nodes: 16, Topo: "smallworld", Faults: FaultFlap, Links: LinksAbstract}
	// A split into 7 and 8 nodes: the 8 hold a strict majority and take
	// the pages of owners on the 7-node side over (the split rule).
	split := Config{Nodes: 15, Topo: "smallworld", Faults: FaultPartition}
	// "all" before outages joined it, when these were found
	splitAll := Config{Nodes: 15, Topo: "smallworld", Faults: FaultsBeforeOutage}
	lineAll := Config{Nodes: 13, Topo: "line", Faults: FaultsBeforeOutage} // flaps and a crash split a line again and again
	realAll := Config{Nodes: 16, Topo: "smallworld", Faults: FaultsBeforeOutage}
	outageAll := Config{Nodes: 16, Topo: "smallworld", Faults: FaultsAll} // "all" since outages
	// before the allocation lifecycle was on by default
	outageNoLife := Config{Nodes: 16, Topo: "smallworld", Faults: FaultsAll, Lifecycle: -1}
	for _, c := range []struct {
		cfg      Config
		seed     uint64
		replicas int
		why      string
	}{
		{real, 87, 2, "a swap's done cut by a link already down left a branch at the versions before the swap"},
		{real, 731, 2, "a handover's old owner restarted before its heir took the page: the reachable restarted node held the stand-in back (lost)"},
		{real, 734, 2, "the same, with the old owner the page's home"},
		{real, 745, 2, "the same"},
		{real, 59, 1, "a graft answer sent by a link whose port-down had passed left a branch no node hung below"},
		{real, 188, 1, "the same"},
		{real, 165, 2, "a ref held through a swap, answered after its sender left the tree, left a branch no node hung below"},
		{real, 269, 2, "the same"},
		{real, 295, 2, "the same"},
		{real, 976, 1, "a node that detached a done's sender kept it as a branch"},
		{real, 27, 2, "requests for a page whose owner (its home) restarted ended with ESTALE before the backup took it over"},
		{real, 200, 2, "requests redirected to a restarted owner ended with EHOSTDOWN before the backup took the page over"},
		{real, 292, 1, "a node's own store, let through at Submit while the node did not know the page's attributes (a restarted home), was served unchecked once the node took the page"},
		{real, 156, 2, "the same, the page taken back from the backup that took it over"},
		{real, 718, 2, "a write staged as the replication timer ran the page's waiting requests left the timer's attention: its delta, lost, was never sent again and the page took no more writes"},
		{real, 62, 1, "a session closed while its lock ran: Close gave the lock's ref back and so did the lock's undo, and the node's mappings fell under another session's ref (EINVAL: page not mapped)"},
		{flaps, 5, 1, "an old owner whose swap's last link was down at its commit turned its entry toward it: the page's tree became a cycle"},
		{flaps, 6, 1, "the same"},
		{split, 38, 2, "a heir in the minority, its done lost to the split, took the page after the halves joined from its old owner's re-sent done, beside the stand-in that had taken it over"},
		{split, 6, 2, "the same (two acting owners after the join)"},
		{split, 26, 2, "the same"},
		{split, 27, 2, "an owner still fenced after the quiet period"},
		{split, 13, 2, "an owner whose backup held its staged write never got the backup's confirmation after the split (asked at the committed version)"},
		{split, 29, 2, "a heir in the minority whose stand-in had taken the page over and handed it on took the stand-in's answer (no copy) as its drop"},
		{split, 69, 2, "a lock held by a client of an owner in the minority was released by its backup's takeover in the majority"},
		{split, 78, 2, "the same"},
		{split, 86, 2, "the same"},
		{split, 64, 2, "a stand-in not told of the heir took the page over at the heir's epoch: the home kept the heir's record and requests went nowhere"},
		{split, 84, 2, "final loads timed out after the split (passes since locks wait for their backups; the cause was not isolated)"},
		{split, 6, 3, "a fenced owner beside an acting one after the quiet period (passes since takeovers take the epoch two past the copy's)"},
		{split, 77, 3, "a heir in the majority took the page from its old owner's done, re-sent after the join, past a takeover by the old owner's backup"},
		{split, 160, 3, "a stand-in in the minority took the page over at the handover's version after the heir gave the page up to a takeover in the majority (acknowledged writes lost)"},
		{splitAll, 93, 2, "an owner in the minority, cut off from the news of the split by a node of the minority that crashed, still saw the whole fabric when its backup took the page over (routing a dead interval late: SplitGrace now covers it)"},
		{lineAll, 141, 2, "a heir in one majority gave up its stand-ins, cut off, and committed without them; fenced in a minority since, its stand-ins in a later majority without the page's home (cut off with the heir) took the page over from their stale copies (acknowledged writes lost)"},
		{realAll, 666, 1, "a CAS applied by an owner that crashed before its answer came back ended with ESTALE (certainly not applied) when its re-sent copy met the restarted home: a later fetch-add saw its effect"},
		{splitAll, 73, 3, "a backup in the minority when its owner crashed took the page over after the join from its stale copy: the majority had taken it over and handed it on, and the home, in the minority too, had not heard of it (acknowledged writes lost)"},
		{outageAll, 117, 3, "a handover's stand-in and the heir's backup, both held back by a minority (an outage of 10 of 16 nodes), took the page over in the same tick as the majority came back: two owners"},
		{outageAll, 32, 3, "the same (two owners after the quiet period)"},
		{outageAll, 112, 3, "the same"},
		{outageAll, 907, 2, "a full copy the owner had sent before later writes reached its backup late and took the copy a version back; the owner, which had the later version acknowledged, crashed, and the backup took the page over a version short (acknowledged write lost)"},
		{outageAll, 197, 2, "a heir (the page's home) died before its stand-in confirmed the drop and came back; the stand-in, probing the heir of its unconfirmed copy, found it restarted and took the page over beside the heir's own backup: two owners"},
		{outageAll, 204, 2, "a backup alone in a minority while its owner was dead saw the owner reachable for a moment (stale link-state as the outage ended), forgot when routing had lost it, and took the owner's death 60 ms later for an owner that had stopped confirming the copy: it dropped the page's last copy (owner crashed, no backup took it over)"},
		{outageAll, 929, 2, "a node whose own write came back (its replica applied it: read-your-writes) took the version for its entry's; it became the owner before the owner's update of that version reached it, so the update was never passed to its branches, and ownership found none behind: a replica below stayed valid a version short after the quiet period"},
		{outageNoLife, 103, 3, "a backup took the page over with its owner's staged write and served it to readers before its fellows dropped their copies; cut off by a split, it lost the page to a fellow in the majority that took it over from its own copy, a version short (a version readers saw undone)"},
	} {
		cfg := c.cfg
		cfg.Seed, cfg.Replicas = c.seed, c.replicas
		if c.replicas > 1 {
			cfg.Flooders = -1 // found before flooders ran with replicas
		}
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		faults := "drop,delay,flap,crash"
		switch cfg.Faults {
		case FaultFlap:
			faults = "flap"
		case FaultPartition:
			faults = "partition"
		case FaultsAll:
			faults = "all"
		case FaultsBeforeOutage:
			faults = "drop,delay,flap,crash,partition"
		}
		replay := fmt.Sprintf("dpu-sim --seed %d --nodes %d --topo %s --faults %s --links %v --replicas %d", c.seed, cfg.Nodes, cfg.Topo, faults, cfg.Links, c.replicas)
		if cfg.Lifecycle < 0 {
			replay += " --lifecycle -1"
		}
		if cfg.Flooders < 0 {
			replay += " --flooders -1"
		}
		if c.replicas > 1 && r.Lost > 0 {
			t.Errorf("seed %d (%s): %d pages lost; replay: %s", c.seed, c.why, r.Lost, replay)
		}
		if c.replicas > 1 && r.Gone > 0 && cfg.Faults != FaultPartition {
			// No page is lost: none may be answered as if it were (a where
			// may report an owner routing cannot reach while its page
			// fails over).
			t.Errorf("seed %d (%s): %d requests (not where) ended with EHOSTDOWN or ESTALE; replay: %s", c.seed, c.why, r.Gone, replay)
		}
		if n := r.ErrorsBy[syscall.EINVAL]; n > 0 {
			// The workload asks only for what its sessions hold.
			t.Errorf("seed %d (%s): %d requests ended with EINVAL; replay: %s", c.seed, c.why, n, replay)
		}
		if !r.OK() {
			t.Errorf("seed %d (%s): %d violations; replay: %s\n%v", c.seed, c.why, len(r.Violations), replay, r.Violations)
		}
	}
}

// TestAbstractLinksWithFlapsAndCrashes sweeps flaps and crashes on abstract
// links, where a cut or a failure drops the carrier at once, with replicas
// 1 and 2.
func TestAbstractLinksWithFlapsAndCrashes(t *testing.T) {
	n := seedsToRun(t, 30)
	for _, r := range []int{1, 2} {
		cfg := Config{Nodes: 16, Topo: "smallworld", Faults: FaultFlap | FaultCrash, Links: LinksAbstract, Replicas: r}
		for _, res := range sweep(t, cfg, n) {
			if !res.OK() {
				t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 16 --links abstract --faults flap,crash --replicas %d\n%v",
					res.Seed, len(res.Violations), res.Seed, r, res.Violations)
			}
		}
	}
}

// TestPartitionFault: --faults partition cuts every link between the half
// of the nodes nearest one node and the rest, and restores them. With
// replicas = 1 nothing fails over and a split breaks no invariant (the far
// side's pages are unreachable for a while). With replicas = 2 on 15 nodes
// the 8-node side holds a majority and takes over the pages of owners cut
// off on the other (the split rule, docs/replication.md "Partitions"):
// no page with two owners, no acknowledged write lost.
func TestPartitionFault(t *testing.T) {
	w := &World{}
	g, err := topo.Generate("smallworld", 16, topo.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.graph = g
	for from := range 16 {
		side := w.nearestHalf(noc.NodeID(from))
		n := 0
		for _, in := range side {
			if in {
				n++
			}
		}
		if n != 8 || !side[from] {
			t.Fatalf("half nearest node %d: %d nodes (%v)", from, n, side)
		}
	}
	cut := 0
	for _, r := range sweep(t, Config{Nodes: 16, Topo: "smallworld", Faults: FaultPartition, Replicas: 1}, seedsToRun(t, 10)) {
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --faults partition\n%v",
				r.Seed, len(r.Violations), r.Seed, r.Violations)
		}
		cut += r.ErrorsBy[syscall.EHOSTDOWN] + r.ErrorsBy[syscall.ETIMEDOUT]
	}
	if cut == 0 {
		t.Fatal("no request met the split (no timeout, no unreachable owner)")
	}
	failovers := 0
	for _, r := range sweep(t, Config{Nodes: 15, Topo: "smallworld", Faults: FaultPartition, Replicas: 2}, seedsToRun(t, 10)) {
		if !r.OK() {
			t.Errorf("seed %d: %d violations; replay: dpu-sim --seed %d --nodes 15 --topo smallworld --faults partition --replicas 2\n%v",
				r.Seed, len(r.Violations), r.Seed, r.Violations)
		}
		failovers += r.Failovers
	}
	if failovers == 0 {
		t.Fatal("replicas 2: no page failed over to the majority side")
	}
}

// TestReloadsDuringAFailoverFindThePage: a host copy's reload of a page
// whose owner (its home) died and restarted, and whose backup takes it
// over later, is answered "retry" until the takeover, never "page lost"
// (ESTALE) for a page that is not lost. Seeds 9 and 29 at R = 2: the
// restarted home called the page lost while a stand-in waited for the
// heir to come back (seed 29), or once its learning grace ran out, 20 ms
// before the stand-in that had asked it took the page over (seed 9).
func TestReloadsDuringAFailoverFindThePage(t *testing.T) {
	for _, seed := range []uint64{9, 29} {
		r, err := Run(Config{Seed: seed, Nodes: 16, Topo: "smallworld", Faults: FaultsAll, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Lost != 0 || r.ReloadsGone != 0 {
			t.Errorf("seed %d: %d reloads answered EHOSTDOWN or ESTALE, %d lost, %d violations %v; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --faults all --replicas 2",
				seed, r.ReloadsGone, r.Lost, len(r.Violations), r.Violations, seed)
		}
	}
}

// TestTieredStoresUnderFaults: every node over a tiered store of 16
// memory pages and a fast disk tier (frames poisoned when a page leaves
// them), every fault, at R = 1 and 2: pages spill and come back under
// every protocol step, and every check holds. With durable pages and a
// power cut, seed 32: a handover's heir applied two writes in the step
// whose sync the cut tore, and the stand-in took the page back without
// them; the checker counted them as acknowledged writes lost, though
// nothing of that step left the heir (it now takes them back).
func TestTieredStoresUnderFaults(t *testing.T) {
	for _, c := range []struct {
		replicas int
		durable  bool
	}{{1, false}, {2, false}} {
		faults := FaultsAll
		if c.durable {
			faults |= FaultPowercut
		}
		spills := 0
		for i := range seedsToRun(t, 6) {
			seed := uint64(i + 1)
			r, err := Run(Config{Seed: seed, Nodes: 16, Topo: "smallworld", Faults: faults, Replicas: c.replicas, Durable: c.durable, Tiers: true})
			if err != nil {
				t.Fatal(err)
			}
			spills += r.TierSpills
			if !r.OK() {
				t.Errorf("seed %d R=%d durable=%v: %d violations %v; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --tiers --replicas %d (--faults all,powercut --durable if durable)",
					seed, c.replicas, c.durable, len(r.Violations), r.Violations, seed, c.replicas)
			}
		}
		if spills == 0 {
			t.Errorf("R=%d durable=%v: no page spilled: the test did not exercise the tiers", c.replicas, c.durable)
		}
	}
	r, err := Run(Config{Seed: 32, Nodes: 16, Topo: "smallworld", Faults: FaultsAll | FaultPowercut, Durable: true, Tiers: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Lost != 0 {
		t.Errorf("seed 32, durable, tiers: %d lost, %d violations %v; replay: dpu-sim --seed 32 --nodes 16 --topo smallworld --faults all,powercut --durable --tiers", r.Lost, len(r.Violations), r.Violations)
	}
}

// TestOutageSeedsFromSweeps replays the seeds of the sweeps with every
// fault, outages included (dpu-sim --seeds 1500 --nodes 13 --topo line
// --faults all --replicas 2; --nodes 8 --topo ring), that failed along the
// way, with the sweep's own configuration (flooders and garblers on).
func TestOutageSeedsFromSweeps(t *testing.T) {
	for _, c := range []struct {
		nodes int
		topo  string
		seed  uint64
		why   string
		r     int // replicas (0: 2)
	}{
		{13, "line", 119, "a backup cut off in a minority, replaced meanwhile by its owner in the majority, took the page over from its stale copy when the owner (the page's home) restarted without it: the home had no record to say the page had a newer copy (acknowledged writes lost)", 0},
		{13, "line", 533, "the same, three pages", 0},
		{13, "line", 511, "a node restarted with its routing incarnation reused an LSA sequence number with other adjacencies; the far side took it for a duplicate, kept a one-way view and could not route to the page's home for a whole refresh interval, so the crashed owner's backup took nothing over", 0},
		{13, "line", 1952, "a handover's stand-ins (the page's home among them), cut off, were given up by the heir, which wrote on with its own backup; heir and backup then fell into a minority and the stand-ins, in the next majority, took the page over from the handover's version (acknowledged writes lost)", 0},
		{13, "line", 63, "the allocator's free of a page that moved away again each time it was taken back ran out of its bound and answered EINVAL (not the allocator's to free) instead of ETIMEDOUT", 3},
		{13, "line", 2780, "the checker counted a handover's stand-in as keeping the page while the heir's drop to it was on its way (the heir's backup held the page), and crashed that backup after the heir: the page's last copy", 0},
		{4, "ring", 253, "a backup's answer that crossed its owner's handover drew a drop from the old owner that ended the copy it had just made a stand-in; the heir never got the commit and the old owner died: no copy left (one crash at R = 2, the page lost)", 0},
		{8, "ring", 292, "the checker counted a copy its live owner had given up (the handover's drop was lost) as keeping the page alive, and crashed the last real copy's holder", 0},
	} {
		cfg := Config{Seed: c.seed, Nodes: c.nodes, Topo: c.topo, Faults: FaultsAll, Replicas: max(c.r, 2)}
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Lost != 0 {
			t.Errorf("seed %d (%s): %d lost, %d violations %v; replay: dpu-sim --seed %d --nodes %d --topo %s --faults all --replicas %d",
				c.seed, c.why, r.Lost, len(r.Violations), r.Violations, c.seed, c.nodes, c.topo, cfg.Replicas)
		}
	}
}
