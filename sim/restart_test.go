package sim

import (
	"testing"
	"time"
)

// restartRun runs one seed of cfg with the node failures and restarts of
// script (times after the workload's start) besides cfg's own faults.
//
// The allocation lifecycle is off in these runs unless cfg turns it on:
// they replay the scripted cases on the workload they were found with.
func restartRun(t *testing.T, cfg Config, script []scriptedFault) Result {
	t.Helper()
	if cfg.Lifecycle == 0 {
		cfg.Lifecycle = -1
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.script = script
	r, err := w.Run()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func crashAt(ms float64, node int) scriptedFault {
	return scriptedFault{at: time.Duration(ms * float64(time.Millisecond)), node: node}
}

func restartAt(ms float64, node int) scriptedFault {
	return scriptedFault{at: time.Duration(ms * float64(time.Millisecond)), node: node, restart: true}
}

// TestOwnerRestartsWhileHalfIsDown replays what real agents did when half
// the fabric or more was down and a page's last owner restarted: a line
// of 2 at R = 2 whose node 0 dies and restarts (1 of 2 alive: no
// majority, no takeover until the restart); a ring of 4 at R = 2 and 3
// whose owner and new owner die one after the other, then restart. Every
// page keeps a copy at its committed version on a live node throughout,
// so none may be lost.
func TestOwnerRestartsWhileHalfIsDown(t *testing.T) {
	line := Config{Nodes: 2, Topo: "line", Replicas: 2, Workload: 250 * time.Millisecond}
	ring2 := Config{Nodes: 4, Topo: "ring", Replicas: 2, Workload: 250 * time.Millisecond}
	ring3 := ring2
	ring3.Replicas = 3
	for _, c := range []struct {
		name   string
		cfg    Config
		script []scriptedFault
	}{
		// The second node of the line alone is no majority: nothing is
		// taken over until the restart; the outage outlasts a copy lease.
		{"line2 R2 kill 0, restart 0", line, []scriptedFault{crashAt(10, 0), restartAt(110, 0)}},
		{"line2 R2 kill 1, restart 1", line, []scriptedFault{crashAt(10, 1), restartAt(110, 1)}},
		// 3 of 4 alive take node 0's pages over and copy them again; then
		// 2 of 4 are no majority until node 1 restarts.
		{"ring4 R2 kill 0, kill 1, restart 1", ring2, []scriptedFault{crashAt(10, 0), crashAt(80, 1), restartAt(180, 1)}},
		{"ring4 R3 kill 0, kill 1, restart 0, restart 1", ring3, []scriptedFault{crashAt(10, 0), crashAt(80, 1), restartAt(170, 0), restartAt(190, 1)}},
		{"ring4 R3 kill 0, kill 1, restart 1", ring3, []scriptedFault{crashAt(10, 0), crashAt(80, 1), restartAt(180, 1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 4; seed++ {
				cfg := c.cfg
				cfg.Seed = seed
				r := restartRun(t, cfg, c.script)
				if !r.OK() || r.Lost != 0 {
					t.Errorf("seed %d: %d pages lost, %d violations\n%v", seed, r.Lost, len(r.Violations), r.Violations)
				}
			}
		})
	}
}

// TestLockedOwnerDiesThenItsBackup: on a ring of 4 at R = 2, node 0 dies
// owning a page a lock of its own clients holds, and 70 ms later node 1,
// the page's only other copy, dies too (restarted 100 ms later). The lock
// holder's node may live beyond a split, so its backup kept the page from
// a takeover for the pin's whole bound (500 ms): one copy for 70 ms, and
// node 1's death lost it (seeds 2 and 4 with the allocation lifecycle on,
// 7 without). The backup now takes the page over at once and copies it
// again, and keeps the lock's pin raised until the bound ran out (no
// acquire or lock before then).
func TestLockedOwnerDiesThenItsBackup(t *testing.T) {
	for _, c := range []struct {
		seed      uint64
		lifecycle int
	}{{2, 4}, {4, 4}, {7, -1}} {
		cfg := Config{Nodes: 4, Topo: "ring", Replicas: 2, Workload: 250 * time.Millisecond, Seed: c.seed, Lifecycle: c.lifecycle}
		r := restartRun(t, cfg, []scriptedFault{crashAt(10, 0), crashAt(80, 1), restartAt(180, 1)})
		if !r.OK() || r.Lost != 0 {
			t.Errorf("seed %d, lifecycle %d: %d pages lost, %d violations\n%v", c.seed, c.lifecycle, r.Lost, len(r.Violations), r.Violations)
		}
	}
}

// TestEveryCopyDiedIsLost: where every copy of a page was on nodes that
// died (node 0 and both its neighbours at once on a ring of 4, R = 2:
// its backups are there), the page is counted lost, and requests for it
// end with an error that says so (EHOSTDOWN, or ESTALE once its home
// restarted without a record of it: sim.lostPagesFail), never with a
// timeout or as if the page were empty; the pages with a copy left come
// back.
func TestEveryCopyDiedIsLost(t *testing.T) {
	cfg := Config{Nodes: 4, Topo: "ring", Replicas: 2, Workload: 250 * time.Millisecond}
	lost := 0
	for seed := uint64(1); seed <= 6; seed++ {
		cfg.Seed = seed
		r := restartRun(t, cfg, []scriptedFault{crashAt(10, 0), crashAt(10.5, 1), crashAt(11, 3), restartAt(100, 1), restartAt(110, 0), restartAt(120, 3)})
		if !r.OK() {
			t.Errorf("seed %d: %d violations\n%v", seed, len(r.Violations), r.Violations)
		}
		lost += r.Lost
	}
	if lost == 0 {
		t.Fatal("no page lost with every copy of it: the scenario moved")
	}
}

// TestPowercutWithDurablePages cuts the power of the whole fabric (every
// node at once, a third of them in the middle of a sync that tears) and
// restarts every node in a random order: with durable pages every node
// reloads its pages from its disk and nothing acknowledged is lost at
// R = 2 and 3 (each takeover is checked to hold every version an owner
// committed and answered). Without them, every page dies.
func TestPowercutWithDurablePages(t *testing.T) {
	for _, replicas := range []int{2, 3} {
		for seed := uint64(1); seed <= 6; seed++ {
			cfg := Config{Nodes: 8, Topo: "ring", Replicas: replicas, Faults: FaultPowercut, Durable: true, Seed: seed}
			r, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() || r.Lost != 0 {
				t.Errorf("R=%d seed %d: %d pages lost, %d violations\n%v", replicas, seed, r.Lost, len(r.Violations), r.Violations)
			}
			if r.Failovers == 0 {
				t.Errorf("R=%d seed %d: no page came back from a disk: the power cut did not happen", replicas, seed)
			}
		}
	}
	cfg := Config{Nodes: 8, Topo: "ring", Replicas: 2, Faults: FaultPowercut, Seed: 1}
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lost == 0 {
		t.Fatal("a power cut without durable pages lost nothing: the fault does not cut the power")
	}
}

// TestDurableSeedsFromSweeps replays the seeds of the durable sweeps
// (dpu-sim --seeds 300 --nodes 16 --topo smallworld --faults all,powercut
// --durable) that failed along the way; each fails with the fix it names
// taken out.
func TestDurableSeedsFromSweeps(t *testing.T) {
	for _, c := range []struct {
		seed     uint64
		replicas int
		why      string
	}{
		{118, 2, "freed pages readable after the power cut: a backup's copy of a freed page, reloaded, was taken over (home records not durable)"},
		{136, 2, "the same"},
		{253, 3, "a copy its owner had given up (its drop lost), reloaded, took the page over after the owner answered as a later incarnation: an acknowledged write lost (the restarted owner's log names its backups)"},
		{155, 3, "a copy of a handover's old owner, given up before the handover, reloaded and taken over beside the heir's backup: two owners (tombstones)"},
		{20, 2, "a tombstone's drop from a handover's heir ended the stand-in kept for it: the page caught in the handover at the cut was lost"},
		{3, 1, "a page whose handover the old owner had committed (its log's record became a tombstone) and whose heir had not taken it yet (its log holds nothing of a page it acquires) was on no disk after the cut: lost with its acknowledged writes (the old owner keeps a stand-in copy until the heir owns it)"},
		{15, 1, "the same, two pages"},
		{124, 1, "the same (two pages lost); with the stand-in, one whose heir's drop was lost and whose heir handed the page on took it over, versions short, when the heir came back from the cut (a heir keeping a later copy, or which handed the page on, drops it)"},
		{70, 1, "a handover's stand-in whose drop was lost asked its heir after the cut; the heir, restarted, had handed the page on (its tombstone named a later epoch) but its host had refed the page since, and a page entry of no more than that hid the tombstone: it answered that it held nothing, and the stand-in took the page back versions short beside the page's owner (acknowledged writes lost, two owners)"},
		{113, 2, "a backup kept as a stand-in at a handover missed the word of it before the power cut (its copy named the old owner, no heir); after the cut the old owner answered its probe as a new incarnation, and it took the page over beside the heir's reloaded copy, the page's home having missed the handover too: two owners (the restarted old owner tells such a fellow stand-in of the heir again)"},
		{253, 2, "the owner's handover commit was the step its disk tore at the power cut, and the tear kept a prefix of the step's records: the home record naming the heir (which never got the done) without the old owner's stand-in; after the cut the home's record dropped the page's every copy as moved on (lost; a sync's records are one batch since)"},
		{209, 1, "not a loss (a checker's): the heir became the owner and applied a held write in the step its disk tore, so nobody saw that version; the checker counted it committed and took the stand-in's takeover, a version short, for acknowledged writes lost"},
	} {
		cfg := Config{Seed: c.seed, Nodes: 16, Topo: "smallworld", Faults: FaultsAll | FaultPowercut, Durable: true, Replicas: c.replicas}
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Lost != 0 {
			t.Errorf("seed %d R=%d (%s): %d lost, %d violations %v; replay: dpu-sim --seed %d --nodes 16 --topo smallworld --faults all,powercut --durable --replicas %d",
				c.seed, c.replicas, c.why, r.Lost, len(r.Violations), r.Violations, c.seed, c.replicas)
		}
	}
}
