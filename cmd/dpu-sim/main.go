// Command dpu-sim runs the deterministic fabric simulator: N DPU cores with
// their coherence engines on a generated topology, virtual time, seeded
// faults and workload, and the invariant checkers.
//
//	dpu-sim --seeds 1000 --nodes 16 --topo smallworld --faults all
//	dpu-sim --seed 42 --nodes 16 --topo smallworld --faults all -v
//	dpu-sim --nodes 128 --links abstract --cold 64 --workload 10ms
//	dpu-sim --nodes 1024 --topo torus2d --links abstract --cold 512 --neighbourhood 4
//	dpu-sim --scale-table 16,64,256,1024
//
// --scale-table prints the scaling table instead of a sweep: one seeded
// world per node count on the planner's wiring of degree 4 and on a 2-D
// torus, abstract links, one row each (routing convergence in virtual
// time, frames and shortest-path runs, LSDB and path cache bytes per node,
// frames and latency per request, messages per write, request hops beside
// the graph's average distance and the Moore bound's, wall and CPU
// seconds; --json: a JSON object per row). docs/simulator.md, "Scale".
//
// --links says what the nodes' ports talk through: real (the default) runs
// the link layer over wires that carry its datagrams, which every fault kind
// needs; abstract delivers whole frames in order with a seeded delay and no
// link-layer datagrams, acks or retransmissions, for large fabrics (routing,
// path cache, coherence engine and host sessions are the same code). With
// abstract links --faults defaults to none; flap and crash work there (a
// cut or a failure drops the carrier at once), drop and delay act on
// link-layer datagrams and are refused.
//
// It prints one summary line (seeds=… replicas=… ops=… checked=… unchecked=…
// violations=… time=… cpu=… ops/cpu-s=…: host requests completed per second
// of the process's CPU time), a line breaking errors down by errno (errors by errno:
// ETIMEDOUT=… …), then a line saying that --help says what each counter
// means, and exits non-zero on any violation, printing the failing seed and the command that
// replays it. checked counts the atomic and lock operations the
// linearizability check judged; unchecked those a history could not hold
// (past --max-history), which fail the run too. On a terminal it shows
// progress on stderr while it runs (seeds done, ops/s, ETA;
// --progress=always|never overrides). A replay prints the run's trace hash: the same seed on
// the same commit gives the same hash.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/cmd/internal/version"
	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/sim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errDone) {
			return
		}
		if !errors.Is(err, errViolations) {
			fmt.Fprintln(os.Stderr, "dpu-sim:", err)
		}
		os.Exit(1)
	}
}

var errViolations = errors.New("violations found")

// errDone ends a run that printed what was asked (--help, --version).
var errDone = errors.New("done")

// legendPointer ends every run's output: where the meaning of each counter
// is said (once, in --help, rather than on every run).
const legendPointer = "(dpu-sim --help says what each counter means)"

// legendText says what each counter of the summary line means.
const legendText = `replicas: the replication factor R of every node; ops: host requests completed (with a result or an error); errors: those that ended with an errno (timeouts, owners unreachable behind a fault, locks taken elsewhere: expected under faults, not violations); swaps: ownership transfers completed; lost: pages every copy of which was on nodes that failed (expected with crash and outage faults and replicas=1; with replicas>1 only where every copy's node failed within a failover's grace: each loss is worth a replay; a sweep names the seeds that lost pages on the line after the errors); failovers: pages a backup took over from a crashed owner, or from one cut off in a minority by a partition (replicas>1; each checked to hold every version the owner committed); checked: atomic and lock operations the linearizability check judged; unchecked: those past --max-history that no history could hold (they fail the run); sessions: host sessions opened; closed: sessions their client closed (the core must release all they held, checked); aborted: requests their caller gave up on (undone by the core); lock-waits: locks that queued in the core behind another session of their node; hand-offs: locks the core handed to the first such waiter as the holder let go; refused: requests on the guarded pages (an ordinary user's, mode 0640) refused with EACCES (each checked against the mode: an allowed one refused, or a forbidden one served, is a violation); freed: extents of the allocation lifecycle their allocator freed, often after another node took a page of them (a free refused to its allocator, a second free or a foreign one served, or a freed page readable anywhere at the end, is a violation); garbage: messages the garblers (an ordinary user's sessions) sent, valid requests of every operation and mangled ones, through the host wire's decoder and the agent's admission; admitted: those that became requests of the core (one that succeeds on a page not its user's, or on its user's page after the page's free was acknowledged, is a violation); violations: broken invariants (must be 0); time: wall-clock time of the run; cpu: CPU time the process used (user and system, every thread: the garbage collector's too), and ops/cpu-s: ops per second of it, the simulator's speed on a shared machine (it counts each seed's start-up, building the nodes and converging routing, and the final checks too: go test -bench Abstract1024 ./sim/ gives the steady state apart)`

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// errorsLine breaks the errors counter down by errno, most frequent first.
func errorsLine(by map[syscall.Errno]int) string {
	es := make([]syscall.Errno, 0, len(by))
	for e := range by {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b syscall.Errno) int {
		if by[a] != by[b] {
			return by[b] - by[a]
		}
		return int(a) - int(b)
	})
	var b strings.Builder
	b.WriteString("errors by errno:")
	for _, e := range es {
		name := unix.ErrnoName(e)
		if name == "" {
			name = fmt.Sprintf("errno%d", int(e))
		}
		fmt.Fprintf(&b, " %s=%d", name, by[e])
	}
	return b.String()
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dpu-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seeds := fs.Int("seeds", 1, "number of seeds to run, starting at --first")
	first := fs.Uint64("first", 1, "first seed of a --seeds sweep")
	seed := fs.Uint64("seed", 0, "run (replay) exactly this seed")
	nodes := fs.Int("nodes", 16, "number of nodes")
	topoKind := fs.String("topo", "smallworld", "topology: line, ring, tree, torus2d, smallworld, random-regular")
	faults := fs.String("faults", "all", "faults: none, all, or a list of drop,delay,flap,crash,partition,outage (all: every one; partition splits the fabric in two halves for 30-60 ms: at replicas > 1 only a node in a strict majority of the fabric takes a page over, an owner in a minority is fenced, see docs/replication.md; outage fails half the nodes or more in four runs of ten, together or one after another, and restarts them one by one in another order, at replicas > 1 only while every page keeps a copy at its committed version elsewhere; powercut, not in all, fails every node at once, some in the middle of a sync, and restarts them all (use --durable); with --links abstract: none, the default there, or flap,crash)")
	links := fs.String("links", "real", "what ports talk through: real (the link layer over datagram wires; every fault needs it) or abstract (whole frames delivered in order with a seeded delay, no link-layer datagrams, acks or retransmissions: for large fabrics; flap and crash faults only)")
	clients := fs.Int("clients", 2, "clients per node")
	workload := fs.Duration("workload", 0, "virtual time clients issue requests (default 40ms)")
	quiesce := fs.Duration("quiesce", 0, "virtual quiet time before the final checks (default 150ms)")
	jobs := fs.Int("j", runtime.GOMAXPROCS(0), "seeds run in parallel")
	verbose := fs.Bool("v", false, "print the trace of a single seed")
	smallCache := fs.Bool("small-cache", false, "physical pages for half the workload's pages, small path caches with an idle TTL (evictions, capacity rule)")
	tiers := fs.Bool("tiers", false, "every node keeps its pages in a tiered store: 16 pages of memory over a fast disk tier (an in-memory file) for the rest, so pages spill and come back under every protocol step")
	cold := fs.Int("cold", 0, "cold pages (default 12)")
	neighbourhood := fs.Int("neighbourhood", 0, "if positive, each client works on that many cold pages of its own part of the page list (nodes with nearby ids share pages) and touches the hot pages 1% of the time: a workload that scales to large fabrics, where a hot page every node maps costs an update per node and write (with --cold about half the nodes, each page is shared by about 8 nodes)")
	guarded := fs.Int("guarded", 0, "pages of an ordinary user (mode 0640) that clients try as their owner, a group member and an intruder (default 2; -1: none)")
	lifecycle := fs.Int("lifecycle", 0, "extents of the allocation lifecycle live at once: allocated, moved by another node, freed by their allocator and checked unreadable (default 4; -1: none)")
	flooders := fs.Int("flooders", 0, "hostile sessions that flood their node with bursts of requests and close with them in flight (default 1; -1: none)")
	transfers := fs.Int("transfers", 0, "sessions that run bulk transfers (STORE_BULK, LOAD_BULK) of their own extents through the agent's admission and budget, some closing mid-transfer (default 0: none)")
	garblers := fs.Int("garblers", 0, "sessions of an ordinary user that send garbled requests through the host wire's decoder and admission (default 1; -1: none)")
	replicas := fs.Int("replicas", 1, "replication factor R: every owned page has R-1 backups that take it over when its owner crashes (1: none)")
	durable := fs.Bool("durable", false, "every node keeps its owned pages and backup copies in a durable page log on an in-memory disk that survives its crashes (a crash in the middle of a sync tears it); a restarted node reloads them (see docs/replication.md, \"Durable pages\"); with --faults powercut nothing may be lost")
	noSplit := fs.Bool("no-split-rule", false, "turn the split rule off (replicas > 1): a node routing cannot reach is taken for dead even across a partition, as before the rule (to see what it prevents)")
	plant := fs.String("plant-bug", "", "plant a protocol bug to see the checkers catch it: stale-cas, early-ack (with --replicas 2: writes answered before the backups hold them), trust-vouched (requests of other nodes served without checking their users), free-here (an allocator frees only the pages of an extent it still owns), quota-leak (a freed page stays charged to its allocator's quota), admit-no-groups (the host layer's permission check ignores supplementary groups), swap-stale-content (a new owner keeps its old replica's content), or place-no-dwell (with --placement auto: placement moves pages without their dwell; with --shifting and a short --phase pages move past their limit) (in a dpu-sim built with go build -tags dpubug)")
	placement := fs.String("placement", "off", "the engines' placement of ownership: off, or auto (a page's ownership follows the node that dominates its recent writes, at most 2 moves per page per 20 ms window; a run fails if a page moves more; see docs/placement.md)")
	shifting := fs.Int("shifting", 0, "pages of the shifting-locality workload: each page's dominant writer moves to another node every --phase; the summary tells the share of remote writes and the placement moves per page per window")
	phase := fs.Duration("phase", 0, "with --shifting: how long a page keeps its dominant writer (default 20ms)")
	maxHistory := fs.Int("max-history", 0, "operations recorded per atomic word and lock for the linearizability check (default 16384); more fail the run")
	debugPage := fs.String("debug-page", "", "with --seed: trace the engines' steps for this page (gva:…, or all) and dump its tree")
	progressMode := fs.String("progress", "auto", "progress on stderr: auto (when stderr is a terminal), always, never")
	showVersion := fs.Bool("version", false, "print the version and exit")
	clockRun := fs.Bool("clock", false, "run the fabric clock scenario instead of the workload: node clocks skewed by up to ±1 s and drifting ±100 ppm, links with asymmetric base delays and 0-50 µs jitter; checks every estimate against the truth (with --plant-bug clock-symmetric to see the checker catch a wrong bound)")
	clockFor := fs.Duration("clock-duration", 0, "with --clock: virtual time of a run (default 30s; the bound target applies from 20s, or two thirds of a shorter run)")
	clockRestart := fs.Bool("clock-restart", false, "with --clock: the cluster time's reference (the lowest honest node) stops at half the warm-up and starts again, a fresh core, 4 s later; the cluster time must go on without a jump across both hand-overs")
	clockFaulty := fs.Int("clock-faulty", 0, "with --clock: nodes with dishonest clocks (one in two steps by 20 ms, the other runs 2000 ppm fast) that their neighbours must exclude")
	scaleTable := fs.String("scale-table", "", "print the scaling table instead of a sweep: for each of these node counts (a comma list, e.g. 16,64,256,1024) one seeded world (--seed, default 1) on the planner's wiring of degree 4 (--topo planned) and on a 2-D torus, on abstract links without faults, with clients on the pages of their neighbourhood (--cold, default half the nodes; --neighbourhood, default 4); each row: routing convergence (virtual time, frames, shortest-path runs, CPU), link-state database and path cache bytes per node, frames per request, request latency p50/p99, messages per write, the hops requests travel beside the graph's average distance and the Moore bound's, wall and CPU seconds; --topo (a comma list) replaces the two wirings (docs/simulator.md, \"The scaling table\")")
	jsonOut := fs.Bool("json", false, "with --scale-table: one JSON object per row instead of the text table")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: dpu-sim [OPTIONS]\n\nRuns the deterministic fabric simulator (see docs/simulator.md).\n\nOPTIONS")
			fs.PrintDefaults()
			fmt.Fprintf(stdout, "\nTHE SUMMARY LINE\n\n%s\n", wrap(legendText, 76, "  "))
			return errDone
		}
		return fmt.Errorf("%w (dpu-sim --help lists the options)", err)
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("dpu-sim"))
		return errDone
	}
	var showProgress bool
	switch *progressMode {
	case "auto":
		showProgress = isTerminal(stderr)
	case "always":
		showProgress = true
	case "never":
	default:
		return fmt.Errorf("--progress %q: want auto, always or never", *progressMode)
	}
	lm, err := sim.ParseLinks(*links)
	if err != nil {
		return fmt.Errorf("--links: %w", err)
	}
	faultsSet := false
	fs.Visit(func(f *flag.Flag) { faultsSet = faultsSet || f.Name == "faults" })
	if (lm == sim.LinksAbstract || *scaleTable != "") && !faultsSet {
		*faults = "none"
	}
	fl, err := sim.ParseFaults(*faults)
	if err != nil {
		return err
	}
	if lm == sim.LinksAbstract && fl&(sim.FaultDrop|sim.FaultDelay) != 0 {
		return fmt.Errorf("--faults %s with --links abstract: drop and delay need the real link layer (they act on its datagrams), and abstract links carry whole frames without loss; use --links real for them, or --faults flap,crash or none", *faults)
	}
	if *debugPage != "" {
		if *debugPage != "all" {
			if _, err := gva.Parse(*debugPage); err != nil {
				return fmt.Errorf("--debug-page %q: want a page's GVA (gva:…) or all: %w", *debugPage, err)
			}
		}
		if *seed == 0 && *seeds != 1 {
			return fmt.Errorf("--debug-page traces one seed: give --seed S")
		}
	}
	if *scaleTable != "" {
		sizes, err := parseSizes(*scaleTable)
		if err != nil {
			return err
		}
		if fl != 0 {
			return fmt.Errorf("--scale-table runs without faults (abstract links): leave --faults out")
		}
		sd := *seed
		if sd == 0 {
			sd = *first
		}
		topos := sim.ScaleTopos
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "topo" {
				topos = strings.Split(*topoKind, ",")
			}
		})
		return runScaleTable(stdout, scaleArgs{sizes: sizes, topos: topos, seed: sd, cold: *cold, neighbour: *neighbourhood, json: *jsonOut,
			progress: progressTo(showProgress, stderr), base: sim.Config{ClientsPerNode: *clients, Workload: *workload, Quiesce: *quiesce}})
	}
	if *clockRun {
		return runClock(stdout, stderr, clockArgs{seeds: seedList(*seed, *first, *seeds), nodes: *nodes, topo: *topoKind,
			duration: *clockFor, faulty: *clockFaulty, restart: *clockRestart, plant: *plant, jobs: *jobs})
	}
	var bug coherence.PlantedBug
	switch *plant {
	case "":
	case "stale-cas":
		bug = coherence.BugStaleCAS
	case "early-ack":
		bug = coherence.BugEarlyAck
	case "trust-vouched":
		bug = coherence.BugTrustVouched
	case "free-here":
		bug = coherence.BugFreeHere
	case "quota-leak":
		bug = coherence.BugQuotaLeak
	case "admit-no-groups":
		bug = coherence.BugAdmitNoGroups
	case "swap-stale-content":
		bug = coherence.BugSwapStaleContent
	case "place-no-dwell":
		bug = coherence.BugPlaceNoDwell
	default:
		return fmt.Errorf("unknown --plant-bug %q (want stale-cas, early-ack, trust-vouched, free-here, quota-leak, admit-no-groups, swap-stale-content or place-no-dwell)", *plant)
	}
	var placeOn bool
	switch *placement {
	case "off":
	case "auto":
		placeOn = true
	default:
		return fmt.Errorf("--placement %q: want off or auto", *placement)
	}
	base := sim.Config{Placement: placeOn, Shifting: *shifting, Phase: *phase, Bug: bug, SmallCache: *smallCache, Tiers: *tiers, ColdPages: *cold, Neighbourhood: *neighbourhood, Nodes: *nodes, Topo: *topoKind, Faults: fl, Links: lm, ClientsPerNode: *clients, Workload: *workload, Quiesce: *quiesce, MaxHistory: *maxHistory, Replicas: *replicas, NoSplitRule: *noSplit, Durable: *durable, Guarded: *guarded, Lifecycle: *lifecycle, Flooders: *flooders, Garblers: *garblers, Transfers: *transfers}
	list := make([]uint64, 0, *seeds)
	if *seed != 0 {
		list = append(list, *seed)
	} else {
		for i := range *seeds {
			list = append(list, *first+uint64(i))
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	results := make([]sim.Result, len(list))
	errs := make([]error, len(list))
	var wg sync.WaitGroup
	var prog *progress
	if showProgress && len(list) > 1 {
		prog = startProgress(stderr, len(list), start)
	}
	next := make(chan int)
	for range max(1, min(*jobs, len(list))) {
		wg.Go(func() {
			for i := range next {
				cfg := base
				cfg.Seed = list[i]
				if *verbose && len(list) == 1 {
					cfg.Trace = func(line string) { fmt.Fprintln(stdout, line) }
				}
				if *debugPage != "" && len(list) == 1 {
					cfg.DebugPage = *debugPage
					cfg.Debug = func(line string) { fmt.Fprintln(stdout, line) }
				}
				results[i], errs[i] = sim.Run(cfg)
				prog.done(results[i].Ops)
			}
		})
	}
	for i := range list {
		next <- i
	}
	close(next)
	wg.Wait()
	prog.stop()

	var ops, errCount, violations, lost, failovers, connects, disconnects, aborts, checked, unchecked, refused, freed, garbage, garbageAdmitted, lockWaits, handOffs, spills, returns int
	var xfers, xferErrs int
	var xferBytes int64
	var swaps uint64
	var shift sim.ShiftResult
	errorsBy := map[syscall.Errno]int{}
	var failed []int
	for i, r := range results {
		if errs[i] != nil {
			return fmt.Errorf("seed %d: %w", list[i], errs[i])
		}
		ops += r.Ops
		errCount += r.Errors
		for e, n := range r.ErrorsBy {
			errorsBy[e] += n
		}
		swaps += r.Swaps
		lost += r.Lost
		failovers += r.Failovers
		spills, returns = spills+r.TierSpills, returns+r.TierReturns
		connects, disconnects, aborts = connects+r.Connects, disconnects+r.Disconnects, aborts+r.Aborts
		lockWaits, handOffs = lockWaits+r.LockWaits, handOffs+r.LockHandOffs
		checked, unchecked = checked+r.Checked, unchecked+r.Unchecked
		refused += r.Refused
		garbage, garbageAdmitted = garbage+r.Garbage.Sent, garbageAdmitted+r.Garbage.Admitted
		freed += r.Freed
		xfers, xferErrs, xferBytes = xfers+r.Transfers, xferErrs+r.TransferErrors, xferBytes+r.TransferBytes
		violations += len(r.Violations)
		shift.Pages += r.Shift.Pages
		shift.Writes, shift.Remote = shift.Writes+r.Shift.Writes, shift.Remote+r.Shift.Remote
		shift.SettledWrites, shift.SettledRemote = shift.SettledWrites+r.Shift.SettledWrites, shift.SettledRemote+r.Shift.SettledRemote
		shift.Moves, shift.ShiftMoves = shift.Moves+r.Shift.Moves, shift.ShiftMoves+r.Shift.ShiftMoves
		shift.MaxInWindow = max(shift.MaxInWindow, r.Shift.MaxInWindow)
		shift.Window, shift.Limit = r.Shift.Window, r.Shift.Limit
		shift.Workload = r.Shift.Workload
		if !r.OK() {
			failed = append(failed, i)
		}
	}
	cpu := cpuTime() - cpu0
	fmt.Fprintf(stdout, "seeds=%d replicas=%d ops=%d errors=%d swaps=%d lost=%d failovers=%d sessions=%d closed=%d aborted=%d lock-waits=%d hand-offs=%d refused=%d freed=%d garbage=%d admitted=%d checked=%d unchecked=%d violations=%d time=%v cpu=%v ops/cpu-s=%.0f\n",
		len(list), max(1, *replicas), ops, errCount, swaps, lost, failovers, connects, disconnects, aborts, lockWaits, handOffs, refused, freed, garbage, garbageAdmitted, checked, unchecked, violations, time.Since(start).Round(time.Millisecond),
		cpu.Round(time.Millisecond), float64(ops)/max(cpu.Seconds(), 1e-9))
	if len(list) == 1 {
		fmt.Fprintf(stdout, "seed=%d trace=%016x virtual=%v frames=%d\n", list[0], results[0].TraceHash, results[0].Virtual, results[0].Frames)
	}
	fmt.Fprintln(stdout, errorsLine(errorsBy))
	if lost > 0 && len(list) > 1 {
		fmt.Fprintln(stdout, lostLine(list, results))
	}
	if *transfers > 0 {
		fmt.Fprintf(stdout, "transfers: %d bulk transfers answered (%d with an errno), %d bytes done (each checked against its pieces' outcomes and budget)\n", xfers, xferErrs, xferBytes)
	}
	if *tiers {
		fmt.Fprintf(stdout, "tiers: %d pages spilled to the fast disk, %d brought back (the live nodes' stores at the end)\n", spills, returns)
	}
	if *shifting > 0 || placeOn {
		fmt.Fprintln(stdout, shiftLine(*placement, shift))
	}
	fmt.Fprintln(stdout, legendPointer)
	for _, i := range failed {
		r := results[i]
		replay := fmt.Sprintf("dpu-sim --seed %d --nodes %d --topo %s --faults %s --clients %d", r.Seed, *nodes, *topoKind, *faults, *clients)
		if lm == sim.LinksAbstract {
			replay += " --links abstract"
		}
		if *workload != 0 {
			replay += " --workload " + workload.String()
		}
		if *quiesce != 0 {
			replay += " --quiesce " + quiesce.String()
		}
		if *durable {
			replay += " --durable"
		}
		if *tiers {
			replay += " --tiers"
		}
		if *lifecycle != 0 {
			replay += fmt.Sprintf(" --lifecycle %d", *lifecycle)
		}
		if *flooders != 0 {
			replay += fmt.Sprintf(" --flooders %d", *flooders)
		}
		if *garblers != 0 {
			replay += fmt.Sprintf(" --garblers %d", *garblers)
		}
		if *transfers != 0 {
			replay += fmt.Sprintf(" --transfers %d", *transfers)
		}
		if *guarded != 0 {
			replay += fmt.Sprintf(" --guarded %d", *guarded)
		}
		if *replicas > 1 {
			replay += fmt.Sprintf(" --replicas %d", *replicas)
		}
		if *smallCache {
			replay += " --small-cache"
		}
		if *cold != 0 {
			replay += fmt.Sprintf(" --cold %d", *cold)
		}
		if *neighbourhood != 0 {
			replay += fmt.Sprintf(" --neighbourhood %d", *neighbourhood)
		}
		if *maxHistory != 0 {
			replay += fmt.Sprintf(" --max-history %d", *maxHistory)
		}
		if placeOn {
			replay += " --placement auto"
		}
		if *shifting > 0 {
			replay += fmt.Sprintf(" --shifting %d", *shifting)
		}
		if *phase != 0 {
			replay += " --phase " + phase.String()
		}
		if *plant != "" {
			replay += " --plant-bug " + *plant
		}
		fmt.Fprintf(stderr, "FAIL seed=%d trace=%016x: replay with: %s\n", r.Seed, r.TraceHash, replay)
		for _, v := range r.Violations {
			fmt.Fprintf(stderr, "  %s\n", v)
		}
	}
	if len(failed) > 0 {
		return errViolations
	}
	return nil
}

// progressTo is w when progress is shown, else nil.
func progressTo(show bool, w io.Writer) io.Writer {
	if show {
		return w
	}
	return nil
}

// wrap breaks text into lines of at most width characters (a longer word
// stays whole), each starting with indent.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	b.WriteString(line)
	return b.String()
}

// shiftLine sums up the shifting-locality workload and placement over the
// seeds: the share of the shifters' writes that were remote (all, and
// settled: after the first quarter of each phase), and the placement
// moves.
func shiftLine(placement string, s sim.ShiftResult) string {
	line := fmt.Sprintf("placement=%s shifting-pages=%d writes=%d remote=%.1f%% settled-writes=%d settled-remote=%.1f%% placement-moves=%d",
		placement, s.Pages, s.Writes, 100*s.RemoteShare(false), s.SettledWrites, 100*s.RemoteShare(true), s.Moves)
	if s.Limit > 0 {
		line += fmt.Sprintf(" moves/page/window=%.2f max-in-window=%d limit=%d/%v", s.MovesPerPageWindow(), s.MaxInWindow, s.Limit, s.Window)
	}
	return line
}

// lostLine names the seeds that lost pages (the first 20), so that a sweep's
// losses can be replayed one by one with --seed.
func lostLine(seeds []uint64, results []sim.Result) string {
	var b strings.Builder
	b.WriteString("pages lost in seeds:")
	n := 0
	for i, r := range results {
		if r.Lost == 0 {
			continue
		}
		if n == 20 {
			b.WriteString(" …")
			break
		}
		fmt.Fprintf(&b, " %d (%d)", seeds[i], r.Lost)
		n++
	}
	return b.String()
}
