package sim

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/timeq"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/route"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
	"github.com/aitherion/dpu/pathcache"
)

// Faults is a set of fault kinds to inject.
type Faults uint8

// Fault kinds.
const (
	FaultDrop  Faults = 1 << iota // datagrams dropped and duplicated on the wires
	FaultDelay                    // some datagrams delayed far beyond the usual jitter
	FaultFlap                     // links cut for a while, then restored
	FaultCrash                    // nodes fail-stop, then restart as a new incarnation
	// FaultPartition splits the fabric in two halves for longer than the
	// failure detection (every link between them cut at once, then
	// restored). At R > 1 the engines' split rule keeps it from leaving
	// a page two owners (docs/replication.md, "Partitions").
	FaultPartition
	// FaultOutage takes half the fabric or more down at once (faults.go,
	// scheduleOutage): nodes fail one after another or together, then
	// come back one by one in another order, a node that died first (an
	// owner whose pages others took over, or could not) often while the
	// rest is still down, some of them down longer than a copy lease. At
	// R > 1 a node is failed only while every page keeps a copy at its
	// committed version on another live node, so nothing may be lost; at
	// R = 1 the pages of the failed owners are.
	FaultOutage
	// FaultPowercut fails every node at once (a power cut of the whole
	// fabric), some in the middle of a sync of their durable pages (a torn
	// write), then restarts them one by one in a random order. Without
	// Config.Durable every page is lost; with it none may be. Not in
	// FaultsAll.
	FaultPowercut
	// FaultsAll is every fault kind (partition too, since the split rule;
	// outage since restarts were made survivable with half the fabric
	// down).
	FaultsAll = FaultDrop | FaultDelay | FaultFlap | FaultCrash | FaultPartition | FaultOutage
	// FaultsBeforeOutage is "all" before outages joined it: the sweeps
	// recorded then replay with it.
	FaultsBeforeOutage = FaultDrop | FaultDelay | FaultFlap | FaultCrash | FaultPartition
	// FaultsNoSplit is "all" before the split rule: the sweeps recorded
	// then replay with it.
	FaultsNoSplit = FaultDrop | FaultDelay | FaultFlap | FaultCrash
)

// ParseFaults reads "none", "all" or a comma list of drop, delay, flap,
// crash, partition, outage, powercut ("all" is every one but powercut).
func ParseFaults(s string) (Faults, error) {
	var f Faults
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "", "none":
		case "all":
			f |= FaultsAll
		case "drop":
			f |= FaultDrop
		case "delay":
			f |= FaultDelay
		case "flap":
			f |= FaultFlap
		case "crash":
			f |= FaultCrash
		case "partition":
			f |= FaultPartition
		case "outage":
			f |= FaultOutage
		case "powercut":
			f |= FaultPowercut
		default:
			return 0, fmt.Errorf("sim: unknown fault %q (want none, all, drop, delay, flap, crash, partition, outage, powercut)", w)
		}
	}
	return f, nil
}

// Config shapes one simulated run. Zero fields take defaults.
type Config struct {
	Seed   uint64
	Nodes  int    // default 16
	Topo   string // a noc/topo kind, default "smallworld"
	Faults Faults
	// Durable gives every node a durable page log (coherence/pagelog) on
	// an in-memory disk that survives the node's crashes and tears the
	// sync a crash interrupts: a restarted node reloads its pages.
	Durable bool
	// Links is what the nodes' ports talk through: the real link layer
	// over datagram wires (the default), or abstract links that carry
	// whole frames (see Links).
	Links Links
	// ClientsPerNode host clients run on every node (default 2); HotPages
	// are shared by everyone (default 4), ColdPages spread the rest
	// (default 12).
	ClientsPerNode, HotPages, ColdPages int
	// Workload is how long clients issue requests (virtual, default 40ms);
	// Quiesce how long the fabric then runs quietly before the final
	// checks (default 150ms; at least the request bound plus 10ms, so
	// that every request, an abandoned one too, has ended).
	Workload, Quiesce time.Duration
	// Think is the longest pause of a client between two requests
	// (default 200µs).
	Think time.Duration
	// ReadMostly makes 95% of a client's requests loads (of pages it has
	// mapped), the rest the usual mix.
	ReadMostly bool
	// Neighbourhood, if positive, makes each client work on that many
	// pages of its own part of the page list (nodes with nearby ids share
	// pages, and in a small-world lattice they are near in the fabric) and
	// touch the hot pages only 1% of the time.
	Neighbourhood int
	// SmallCache gives every node physical pages for half the workload's
	// pages, a path cache a little larger and an idle TTL, so that
	// entries age out and maps hit the capacity rule.
	SmallCache bool
	// Tiers gives every node a tiered page store (coherence/tier): 16
	// pages of memory over a fast disk tier (an in-memory file) with room
	// for the rest, so that pages spill and come back under every
	// protocol step (the agent's tier = fast PATH SIZE). A restarted node
	// starts with an empty store, as the agent drops an earlier run's
	// spilled pages.
	Tiers bool
	// CheckEvery is the period of the continuous ownership check (default
	// 200µs; negative: only at the end).
	CheckEvery time.Duration
	// MaxHistory bounds the operations recorded per atomic word and lock
	// for the linearizability check (default 16384). A history that
	// overflows is not judged: its operations are counted
	// (Result.Unchecked) and the run fails. Porcupine
	// judges the longest histories a 5 s workload of 8 clients per node
	// records (about 11,600 operations per word) in under 1.5 s.
	MaxHistory int
	// NoChurn keeps every client on one host session and never abandons
	// a request; by default clients now and then give up on a request
	// (abort) or close their session and open a new one (disconnect).
	NoChurn bool
	// Replicas is the engines' replication factor R (default 1): with
	// R > 1 a crashed owner's pages fail over to a backup, and the checks
	// require that no acknowledged write is lost.
	Replicas int
	// NoSplitRule turns the engines' split rule off (coherence.Config):
	// the behaviour before it, to show what it prevents.
	NoSplitRule bool
	// Guarded is how many pages of an ordinary user (mode 0640) the
	// workload has besides the shared ones; clients reach them as their
	// owner, a group member and an intruder, and every answer is checked
	// against the mode (users.go). Default 2; negative: none.
	Guarded int
	// Lifecycle is how many extents of the allocation lifecycle workload
	// (lifecycle.go) may be live at once: allocated, moved, freed at
	// their allocator and checked. Default 4; negative: none.
	Lifecycle int
	// Flooders is how many hostile sessions flood their node with bursts
	// of requests and close with them in flight (flood.go). Default 1;
	// negative: none.
	Flooders int
	// Transfers is how many sessions run bulk transfers (STORE_BULK,
	// LOAD_BULK) of their own extents through admit.Transfer, as the
	// agent's server does (transfers.go). Default 0: none.
	Transfers int
	// Garblers is how many sessions of an ordinary user send garbage
	// through the host wire's decoder and admission (garbage.go).
	// Default 1; negative: none.
	Garblers int
	// Placement runs the engines with placement = auto (shifting.go);
	// Shifting is how many pages of the shifting-locality workload the run
	// has (default none), whose dominant writer changes every Phase
	// (default 20ms).
	Placement bool
	Shifting  int
	Phase     time.Duration
	// Bug plants a protocol bug (checker tests only).
	Bug coherence.PlantedBug
	// Trace, if set, receives one line per completion and fault.
	Trace func(line string)
	// DebugPage, with Debug set, traces every protocol step the engines
	// take for that page (its text form, or "all"), its owners, and dumps
	// its tree at the end.
	DebugPage string
	Debug     func(line string)
}

func (c Config) withDefaults() Config {
	if c.Nodes <= 0 {
		c.Nodes = 16
	}
	if c.Topo == "" {
		c.Topo = "smallworld"
	}
	if c.ClientsPerNode <= 0 {
		c.ClientsPerNode = 2
	}
	if c.HotPages <= 0 {
		c.HotPages = 4
	}
	if c.ColdPages < 0 {
		c.ColdPages = 0
	} else if c.ColdPages == 0 {
		c.ColdPages = 12
	}
	if c.Workload <= 0 {
		c.Workload = 40 * time.Millisecond
	}
	if c.Quiesce <= 0 {
		c.Quiesce = 150 * time.Millisecond
	}
	// The final checks want every request ended: a closed session's
	// abandoned requests run on to their bound.
	c.Quiesce = max(c.Quiesce, engineTiming.RequestTimeout+10*time.Millisecond)
	if c.Think <= 0 {
		c.Think = 200 * time.Microsecond
	}
	if c.CheckEvery == 0 {
		c.CheckEvery = 200 * time.Microsecond
	}
	if c.MaxHistory <= 0 {
		c.MaxHistory = 1 << 14
	}
	if c.Lifecycle == 0 {
		c.Lifecycle = 4
	}
	if c.Guarded == 0 {
		c.Guarded = 2
	}
	if c.Phase <= 0 {
		c.Phase = defaultPhase
	}
	if c.Flooders == 0 {
		c.Flooders = 1
	}
	if c.Garblers == 0 {
		c.Garblers = 1
	}
	return c
}

// Result is the outcome of one run.
type Result struct {
	Seed     uint64
	Ops      int                   // host requests completed (results and errors)
	Errors   int                   // of which errors
	ErrorsBy map[syscall.Errno]int // the errors by errno
	Gone     int                   // EHOSTDOWN or ESTALE, as if the page were lost (where requests, which report an unreachable owner, left out)
	// ReloadsGone: host copies' reloads answered so (counted apart from
	// Gone; a reload during a failover is answered "retry" until a backup
	// took the page over, TestReloadsDuringAFailoverFindThePage)
	ReloadsGone int
	Violations  []string
	TraceHash   uint64
	Frames      uint64 // datagrams (frames, with abstract links) put on wires
	Swaps       uint64 // ownership transfers completed
	Evictions   int    // path cache entries aged out
	// TierSpills, TierReturns: pages the live nodes' tiered stores spilled
	// to disk and brought back (Config.Tiers), at the end.
	TierSpills, TierReturns int
	Lost                    int // pages lost with a failed owner
	Failovers               int // pages a backup took over from a failed owner (replicas > 1)
	// Host sessions: opened, closed by their client (everything they held
	// released by the core), requests abandoned by their caller.
	Connects, Disconnects, Aborts int
	// Locks between the sessions of one node (the nodes alive at the end):
	// lock requests that queued behind another session of their node,
	// locks handed to the first waiter, waiters whose bound passed in the
	// queue and waiters that left it (abandoned, or their session closed).
	LockWaits, LockHandOffs, LockWaitsExpired, LockWaitsLeft int
	Virtual                                                  time.Duration
	// Checked is how many atomic and lock operations the linearizability
	// check judged; Unchecked how many it did not, because their history
	// overflowed MaxHistory (each such history is a violation).
	Checked, Unchecked int
	// Refused is how many requests on guarded pages ended with EACCES.
	Refused int
	// Freed is how many extents of the lifecycle workload their
	// allocator freed (each then checked unreadable everywhere).
	Freed int
	// Transfers is how many bulk transfers of the transfer sessions
	// answered (Config.Transfers), TransferErrors how many of them with
	// an errno, TransferBytes the bytes they answered done.
	Transfers, TransferErrors int
	TransferBytes             int64
	// Shift is what the shifting-locality workload and placement did
	// (shifting.go).
	Shift ShiftResult
	// Garbage is what the garblers sent and what became of it.
	Garbage GarbageResult
}

// OK reports whether the run found no violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Timing of the simulated fabric.
const (
	wireDelay  = 5 * time.Microsecond
	wireJitter = 15 * time.Microsecond
	mtu        = 1500
	// deadInterval is the link layer's: a port whose neighbour has been
	// silent this long goes down.
	deadInterval = 12 * time.Millisecond
)

// Engine timers of the simulated nodes.
var engineTiming = coherence.Config{
	RequestTimeout: 60 * time.Millisecond,
	RetryInterval:  time.Millisecond,
	SwapTimeout:    8 * time.Millisecond,
	SwapGiveUp:     80 * time.Millisecond,
	CommitTTL:      400 * time.Millisecond,
	HomeRefresh:    20 * time.Millisecond,
	// CopyLease: three refresh periods, as on real agents (3 s against a
	// 1 s refresh and a 600 ms dead interval), so that a node down for
	// longer than a lease (most of an outage of half the fabric) meets
	// the lease as it does there (the default's 3 s floor is far beyond
	// any simulated run).
	CopyLease: 3 * 20 * time.Millisecond,
	// The split rule's SplitGrace covers it (an owner in a minority may
	// learn of the split only when a link to a crashed node times out).
	DeadInterval: deadInterval,
	Arbiter:      arbiter.Config{TickLen: time.Microsecond, MaxWait: 4 * time.Millisecond, MaxPin: 500 * time.Millisecond},
}

// linkConfig is the link of every simulated port. Large fabrics get
// smaller windows (the simulator holds every endpoint in memory).
func linkConfig(nodes int) link.Config {
	lc := link.DefaultConfig()
	switch {
	case nodes > 256:
		// Memory: every endpoint is held in one process. LSAs the queue
		// refuses during the start-up flood wait for the next refresh.
		lc.Window, lc.SendQueue, lc.MaxMessage = 16, 128, 8192
	case nodes > 64:
		// The queue holds the start-up flood of every node's LSA.
		lc.Window, lc.SendQueue, lc.MaxMessage = 16, 4*nodes, 8192
	}
	lc.RTO = 500 * time.Microsecond
	lc.MaxRTO = 8 * time.Millisecond
	lc.HeartbeatInterval = 2 * time.Millisecond
	lc.DeadInterval = deadInterval
	return lc
}

// routeConfig is the routing of every simulated node. With the real link
// layer LSAs are refreshed every second (a run lasts about that long, so
// the refresh is exercised). On abstract links, which are for large
// fabrics, every LSA a node floods costs a frame on every link of the
// fabric (about N² × ports / 2 frames for a refresh of all N nodes: six
// million on 1,024 nodes), so they keep the agent's default refresh
// interval, and a node gathers the adjacencies that come up within 50 µs
// (a hello's round trip) into one LSA: the whole fabric boots at once, and
// one LSA per port each flooded everywhere made convergence most of a
// run's cost.
func routeConfig(l Links) route.Config {
	rc := route.Config{HelloInterval: time.Millisecond, RefreshInterval: time.Second, SPFDelay: 200 * time.Microsecond}
	if l == LinksAbstract {
		rc.RefreshInterval = 0 // the default, 10 s
		rc.OriginateDelay = 50 * time.Microsecond
	}
	return rc
}

// World is one simulated fabric: N node cores with their engines, the
// wires between them, virtual time and one seeded random source per
// component.
type World struct {
	cfg   Config
	graph *topo.Graph
	nodes []*simNode
	now   time.Duration
	q     timeq.Queue[event]
	seq   uint64

	faultRNG, workRNG, nodeRNG *rand.Rand

	wires *nodetest.Wires // the virtual wires, with their own source
	buf   []byte          // a datagram on its way to a wire
	trace hash.Hash64
	tbuf  []byte // the trace line being written
	res   Result

	clients     []*client
	flooders    []*flooder       // hostile sessions (flood.go)
	transferers []*transferer    // bulk transfer sessions (transfers.go)
	garblers    []*garbler       // sessions that send garbage (garbage.go)
	garbled     []*garbledExtent // userGarbler's allocations
	faults      []fault

	routeVer  []uint64 // routing table version last examined, per node
	routeOK   []bool   // that table reached every live node
	routeLive int
	reqID     uint64
	closed    []closedSession
	pages     []*simPage
	pageIdx   map[gva.GVA]int // a shared page's index in pages
	reloads   []reload        // host copies' reload attempts to send (views.go)
	guarded   []*simPage      // pages of user 1000, mode 0640 (users.go)
	life      []*lifeExtent   // the allocation lifecycle's extents (lifecycle.go)
	check     *checker
	stopped   bool // workload over
	ending    bool
	script    []scriptedFault // failures and restarts a test places (faults.go)
	outage    outage          // FaultOutage's victims (faults.go)
	shift     shiftState      // the shifting-locality workload (shifting.go)
	// pollEvery is how often runUntil polls its done condition (default
	// 250µs); the scale table polls convergence finer (scale.go).
	pollEvery time.Duration
	scale     *scaleState // the scale table's measurements, when it runs (scale.go)
}

type simNode struct {
	tiers  *tier.Store // its tiered store (Config.Tiers), this run's
	id     noc.NodeID
	core   *node.Core
	hosts  *coherence.Hosts // the host sessions in front of eng
	eng    *coherence.Engine
	alive  bool
	inc    uint64
	epoch  uint32 // allocation epoch of the current run (kept across restarts, as the agent persists it)
	wakeAt time.Duration
	ports  int
	reqs   map[uint64]*pendingOp // host request id -> op
	views  map[int]*simView      // its host's copies of the shared pages its clients map (views.go)
	quota  pageLedger            // the page quota of this run's users
	disk   *pagelog.MemDisk      // Config.Durable: the node's disk, kept across restarts
	// syncFailed: its engine stopped on a torn sync; its crash is queued.
	syncFailed bool
}

// pageLedger is a node's page quota as the simulator keeps it: pages
// charged per user, without limits (the quota package tests those). The
// final checks hold it against what the node's host layer says it has
// allocated and not freed.
type pageLedger map[uint32]int

// Take implements coherence.PageQuota.
func (l pageLedger) Take(uid uint32, n int) error {
	if q := quotaFor(uid); q > 0 && l[uid]+n > q {
		return errGarblerQuota
	}
	l[uid] += n
	return nil
}

// Release implements coherence.PageQuota.
func (l pageLedger) Release(uid uint32, n int) {
	if l[uid] -= n; l[uid] == 0 {
		delete(l, uid)
	}
}

type evKind uint8

const (
	evWake evKind = iota + 1
	evClient
	evAbort
	evFault
	evCheck
	evFlood
	evGarble
	evReload
	evShift
	evTransfer
	evTransferRefill
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	node noc.NodeID // evWake: the node
	n    int        // client index, fault index
	op   *pendingOp // evAbort: the request given up
}

func (w *World) push(ev event) {
	w.seq++
	ev.seq = w.seq
	w.q.Push(timeq.Key{At: ev.at, Seq: ev.seq}, ev)
}

// derive returns a PCG source for one component of the run.
func derive(seed uint64, component uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15*component, component*0xbf58476d1ce4e5b9+seed))
}

// New builds the world of one run: the topology, the cores, engines and
// clients.
func New(cfg Config) (*World, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	g, err := topo.Generate(cfg.Topo, cfg.Nodes, topo.Options{Seed: int64(cfg.Seed)})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	wires, err := nodetest.NewWires(g, wiring(cfg), derive(cfg.Seed, 1))
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	w := &World{
		cfg: cfg, graph: g, wires: wires,
		faultRNG: derive(cfg.Seed, 2), workRNG: derive(cfg.Seed, 3), nodeRNG: derive(cfg.Seed, 4),
		buf: make([]byte, mtu), trace: fnv.New64a(),
	}
	w.res.Seed = cfg.Seed
	wires.ShareSequence(&w.seq)
	wires.ShareClock(&w.now)
	w.check = newChecker(w)
	if cfg.Debug != nil && cfg.DebugPage != "" {
		w.check.debug = func(key gva.GVA, line string) {
			if cfg.DebugPage == "all" || key.IsZero() || key.String() == cfg.DebugPage {
				cfg.Debug(line)
			}
		}
	}
	for i := 0; i < g.N(); i++ {
		w.nodes = append(w.nodes, &simNode{id: noc.NodeID(i), ports: g.Ports(noc.NodeID(i))})
	}
	for _, n := range w.nodes {
		if err := w.boot(n); err != nil {
			return nil, err
		}
	}
	for _, n := range w.nodes {
		w.settle(n)
	}
	return w, nil
}

// boot starts (or restarts) a node as a new incarnation.
func (w *World) boot(n *simNode) error {
	n.inc = w.nodeRNG.Uint64()>>24 | 1
	ec := engineTiming
	ec.Self, ec.Incarnation, ec.Seed, ec.Pages = n.id, n.inc, w.nodeRNG.Uint64(), 256
	n.epoch++
	ec.AllocEpoch = n.epoch
	if w.cfg.SmallCache {
		// Room for fewer entries than the workload has pages, physical
		// pages for fewer still, and idle entries age out: evictions
		// detach subtrees that must re-ref, maps beyond capacity fail.
		ec.Pages = max(4, (w.cfg.HotPages+w.cfg.ColdPages)/2)
		ec.PathCache = pathcache.Config{MaxEntries: ec.Pages + 4, IdleTTL: 15 * time.Millisecond}
	}
	if w.cfg.Tiers {
		const memory = 16
		fast := tier.NewMemFile(fmt.Sprintf("node%d/fast.tier", n.id), int64(ec.Pages-memory+1)*tier.SlotSize, w.nodeRNG.Uint64())
		st, err := tier.New(tier.Config{Memory: memory, Fast: fast, Poison: true})
		if err != nil {
			return fmt.Errorf("sim: node %d: %w", n.id, err)
		}
		ec.Store = st
		n.tiers = st
	}
	ec.Tracer = w.check.tracer()
	ec.Bug = w.cfg.Bug
	ec.Replicas = w.cfg.Replicas
	ec.FabricNodes = w.graph.N()
	ec.NoSplitRule = w.cfg.NoSplitRule
	if w.cfg.Placement {
		ec.Placement = simPlacement
	}
	ec.Unchecked = n.id == intruderNode // the modified node (users.go)
	n.quota = pageLedger{}              // a new run: nothing of it allocated yet
	ec.Quota = n.quota
	if w.cfg.Durable {
		if n.disk == nil {
			n.disk = pagelog.NewMemDisk(fmt.Sprintf("node%d/pages.log", n.id), w.nodeRNG.Uint64())
		}
		n.disk.CrashAtSync = 0
		l, _, err := pagelog.Open(n.disk, pagelog.Identity{Node: n.id, Fabric: w.cfg.Seed})
		if err != nil {
			return fmt.Errorf("sim: node %d: %w", n.id, err)
		}
		ec.Durable = l
	}
	h, err := coherence.NewHosts(ec, nodeSink{w, n})
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	e := h.Engine()
	if err := h.Open(checkSession); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	c, err := node.New(node.Config{Self: n.id, Handler: h, Link: linkConfig(len(w.nodes)), Route: routeConfig(w.cfg.Links), Seed: w.nodeRNG.Uint64()}, w.now)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := nodetest.AddPorts(c, w.wires, w.now, n.ports, mtu); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	n.core, n.hosts, n.eng, n.alive, n.wakeAt, n.syncFailed = c, h, e, true, -1, false
	n.reqs = map[uint64]*pendingOp{}
	n.views = map[int]*simView{} // a new run: its host's copies went with it
	if len(w.nodes) == w.graph.N() && w.nodes[len(w.nodes)-1].core != nil {
		w.settle(n)
	}
	return nil
}

// nodeSink delivers a node's completions to the clients that asked.
type nodeSink struct {
	w *World
	n *simNode
}

func (s nodeSink) Complete(c coherence.Completion) { s.w.completed(s.n, c) }
func (s nodeSink) Event(ev coherence.Event)        { s.w.event(s.n, ev) }

// Run executes the whole run: convergence, workload with faults, quiet
// period, final checks.
func Run(cfg Config) (Result, error) {
	w, err := New(cfg)
	if err != nil {
		return Result{Seed: cfg.Seed}, err
	}
	return w.Run()
}

// errNoConvergence: routing never converged (a harness problem, not a
// protocol violation).
var errNoConvergence = errors.New("sim: routing did not converge")

// Run executes the run.
func (w *World) Run() (Result, error) {
	if err := w.Prepare(); err != nil {
		return w.res, err
	}
	w.RunFor(w.cfg.Workload)
	return w.Finish(), nil
}

// Prepare converges routing, allocates the pages and starts the clients
// and the faults.
func (w *World) Prepare() error {
	if !w.runUntil(w.now+5*time.Second, w.converged) {
		return errNoConvergence
	}
	if err := w.setup(); err != nil {
		return err
	}
	if err := w.setupGuarded(); err != nil {
		return err
	}
	if err := w.setupShifting(); err != nil {
		return err
	}
	w.startClients()
	w.setupFlooders()
	w.setupGarblers()
	if err := w.setupTransfers(); err != nil {
		return err
	}
	w.scheduleFaults(w.now)
	if w.cfg.CheckEvery > 0 {
		w.push(event{at: w.now + w.cfg.CheckEvery, kind: evCheck})
	}
	return nil
}

// RunFor runs the workload for d of virtual time.
func (w *World) RunFor(d time.Duration) { w.runUntil(w.now+d, nil) }

// Finish stops the clients, heals every fault, lets the fabric go quiet
// and runs the final checks.
func (w *World) Finish() Result {
	w.stopped = true
	w.healAll()
	w.runUntil(w.now+w.cfg.Quiesce, nil)
	w.checkSessions()
	w.lifeFinal()
	w.final()
	w.res.Virtual = w.now
	w.res.Frames = w.wires.Sent
	w.res.TraceHash = w.trace.Sum64()
	for _, n := range w.nodes {
		if n.alive {
			st := n.eng.Stats()
			w.res.Swaps += st.SwapsCompleted
			w.res.Evictions += int(st.Evictions)
			if n.tiers != nil {
				ts := n.tiers.Stats()
				w.res.TierSpills += int(ts.Spills)
				w.res.TierReturns += int(ts.Returns)
			}
			ls := n.hosts.LocalLocks()
			w.res.LockWaits += int(ls.Waits)
			w.res.LockHandOffs += int(ls.HandOffs)
			w.res.LockWaitsExpired += int(ls.Expired)
			w.res.LockWaitsLeft += int(ls.Left)
		}
	}
	w.res.Lost = w.check.lostCount()
	w.check.lossesExplained(w.cfg.Replicas)
	w.res.Failovers = w.check.failovers
	w.res.Shift = w.shift.res
	if w.check.debug != nil {
		w.dumpTrees()
	}
	w.res.Violations = w.check.violations
	return w.res
}

// Ops is the number of host requests completed so far.
func (w *World) Ops() int { return w.res.Ops }

// runUntil processes events up to limit or until done reports true (done
// is polled every doneEvery of virtual time).
func (w *World) runUntil(limit time.Duration, done func() bool) bool {
	doneEvery := 250 * time.Microsecond
	if w.pollEvery > 0 {
		doneEvery = w.pollEvery
	}
	next := w.now
	for {
		if done != nil && w.now >= next {
			if done() {
				return true
			}
			next = w.now + doneEvery
		}
		// Deliveries and events share one sequence: what is due at one
		// time runs in the order it was scheduled.
		at, seq, ok := w.wires.NextSeq()
		first, queued := w.q.Min()
		if w.pollEvery > 0 && done != nil {
			// A finer poll (the scale table's) also looks before time
			// jumps past the next poll: what done reads cannot change
			// without an event, so it tells the time within pollEvery.
			nextAt := limit + 1
			if ok {
				nextAt = at
			}
			if queued && first.At < nextAt {
				nextAt = first.At
			}
			if nextAt >= next {
				if done() {
					return true
				}
				next = w.now + doneEvery
			}
		}
		if ok && at <= limit && (!queued || (timeq.Key{At: at, Seq: seq}).Before(first)) {
			w.now = at
			w.deliver()
			continue
		}
		if !queued || first.At > limit {
			break
		}
		_, ev := w.q.Pop()
		w.now = ev.at
		w.handle(ev)
	}
	if done != nil && done() {
		return true
	}
	w.now = max(w.now, limit)
	return false
}

func (w *World) handle(ev event) {
	switch ev.kind {
	case evWake:
		n := w.nodes[ev.node]
		if !n.alive || n.wakeAt != ev.at {
			return
		}
		n.wakeAt = -1
		n.core.Tick(w.now)
		w.settle(n)
	case evClient:
		w.clientStep(w.clients[ev.n])
	case evAbort:
		if c := w.clients[ev.n]; c.pending == ev.op && w.nodes[c.node].alive && !w.stopped {
			if ev.op.req.Op == coherence.HostLock && c.rng.IntN(2) == 0 {
				// The client goes away while its lock waits (or is being
				// granted): the core takes it out of the queue, or gives
				// back what it is granted.
				w.disconnect(c)
				w.push(event{at: w.now + time.Duration(c.rng.Int64N(int64(w.cfg.Think))), kind: evClient, n: c.idx})
				break
			}
			w.abort(c)
		}
	case evFault:
		w.fault(ev.n)
	case evReload:
		w.sendReloads()
	case evFlood:
		w.floodStep(w.flooders[ev.n])
	case evGarble:
		w.garbleStep(w.garblers[ev.n])
	case evShift:
		w.shiftStep(w.shift.shifters[ev.n])
	case evTransfer:
		w.xferStep(w.transferers[ev.n])
	case evTransferRefill:
		w.xferTake(w.transferers[ev.n])
	case evCheck:
		w.check.owners(false)
		if !w.stopped {
			w.push(event{at: w.now + w.cfg.CheckEvery, kind: evCheck})
		}
	}
}

// converged reports whether every live node routes to every other. A
// node's table is re-examined only when its version changed.
func (w *World) converged() bool {
	live := 0
	for _, n := range w.nodes {
		if n.alive {
			live++
		}
	}
	if w.routeVer == nil || len(w.routeVer) != len(w.nodes) || live != w.routeLive {
		w.routeVer = make([]uint64, len(w.nodes))
		w.routeOK = make([]bool, len(w.nodes))
		w.routeLive = live
	}
	all := true
	for i, n := range w.nodes {
		if !n.alive {
			continue
		}
		v := n.core.Routing().Version()
		if v != w.routeVer[i] || v == 0 {
			w.routeVer[i] = v
			ok := true
			for _, m := range w.nodes {
				if m.alive && m != n {
					if _, _, reach := n.core.NextHop(m.id); !reach {
						ok = false
						break
					}
				}
			}
			w.routeOK[i] = ok
		}
		all = all && w.routeOK[i]
	}
	return all
}

func (w *World) tracef(format string, a ...any) {
	w.traceLine(fmt.Appendf(w.traceStart(), format, a...))
}

// traceStart starts a trace line: the time and a space.
func (w *World) traceStart() []byte {
	return append(append(w.tbuf[:0], w.now.String()...), ' ')
}

// traceLine hashes a trace line and hands it to Config.Trace.
func (w *World) traceLine(b []byte) {
	w.tbuf = append(b, '\n')
	w.trace.Write(w.tbuf)
	if w.cfg.Trace != nil {
		w.cfg.Trace(string(b))
	}
}

// traceCompletion is the trace line of a completion, as tracef would
// write it ("n%d %v %v e=%d v=%d x=%d s=%v") without its cost: one a
// request.
func (w *World) traceCompletion(n noc.NodeID, op coherence.HostOp, g gva.GVA, errno syscall.Errno, v gva.Version, x uint64, swapped bool) {
	b := append(w.traceStart(), 'n')
	b = strconv.AppendUint(b, uint64(n), 10)
	b = append(append(b, ' '), op.String()...)
	b = g.AppendText(append(b, ' '))
	b = strconv.AppendUint(append(b, " e="...), uint64(errno), 10)
	b = strconv.AppendUint(append(b, " v="...), uint64(v), 10)
	b = strconv.AppendUint(append(b, " x="...), x, 10)
	b = strconv.AppendBool(append(b, " s="...), swapped)
	w.traceLine(b)
}

// dumpTrees prints the path cache entries of the debugged pages.
func (w *World) dumpTrees() {
	for _, key := range w.check.order {
		if w.cfg.DebugPage != "all" && key.String() != w.cfg.DebugPage {
			continue
		}
		w.cfg.Debug(fmt.Sprintf("tree of %v (applied version %d, lost %v):", key, w.check.ghosts[key].version, w.check.ghosts[key].lost))
		for _, n := range w.nodes {
			if !n.alive {
				continue
			}
			ent, ok := n.eng.Entry(key)
			if !ok {
				continue
			}
			far := func(p noc.PortID) string {
				switch p {
				case noc.NoPort:
					return "-"
				case noc.LocalPort:
					return "host"
				}
				peer, _ := w.graph.Peer(n.id, p)
				return fmt.Sprintf("n%d", peer.Node)
			}
			var down []string
			for p := range ent.Down.All() {
				down = append(down, far(p))
			}
			v, _ := view(n, key)
			w.cfg.Debug(fmt.Sprintf("  n%d up=%s down=%v owner=%v version=%d replica=%v held=%d valid=%v pins=%d fetching=%v",
				n.id, far(ent.Up), down, ent.Owner, ent.Version, ent.Replica, v.Version, v.Valid, ent.Pins, ent.Fetching))
		}
	}
}

// Graph returns the topology of the run.
func (w *World) Graph() *topo.Graph { return w.graph }
