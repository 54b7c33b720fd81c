package coherence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// Config shapes an Engine. Zero fields take the defaults below.
type Config struct {
	// Self is this node's id (= its machine index).
	Self noc.NodeID
	// Incarnation identifies this run of the engine; it must change at
	// every restart (the driver draws it from its seeded source). Zero
	// means 1.
	Incarnation uint64
	// AllocEpoch is this run's allocation epoch (at most MaxAllocEpoch):
	// it must exceed the epoch of every earlier run of this node, so that
	// no GVA is ever handed out twice (see space.go). Zero is allowed
	// only where the node never restarts.
	AllocEpoch uint32
	// Pages is the physical capacity in 4 KiB pages (default 4096); Store,
	// if set, overrides it.
	Pages int
	Store PageStore
	// Quota, if set, is the page ledger of the node's users: the host
	// layer charges every page an Alloc makes to the allocating user
	// (Request.Attr.UID) before it is made, and gives it back when the
	// page is freed (or the Alloc fails, or its caller gave up on it and
	// the pages were freed again).
	Quota PageQuota
	// AttrCache is how many attributes of pages homed elsewhere the host
	// layer remembers for its permission check (default
	// DefaultAttrCache; admit.go). Attributes never change while a page
	// lives, so a remembered one is exact.
	AttrCache int
	// Unchecked makes the host layer vouch for its users without checking
	// them against the pages' attributes: a modified node, which the
	// simulator runs to prove that the nodes serving its requests refuse
	// what its users may not do. The agent never sets it.
	Unchecked bool
	// PathCache sizes the path cache (default 65536 entries, no idle TTL).
	PathCache pathcache.Config
	// Arbiter configures the ownership arbiter.
	Arbiter arbiter.Config
	// UpdateThreshold: writes up to this many bytes propagate as
	// write-update (data + version), larger ones as write-invalidate
	// (default 256).
	UpdateThreshold int
	// RequestTimeout bounds every host request (default 100ms).
	RequestTimeout time.Duration
	// RetryInterval paces re-sent refs, acquire retries and swap
	// confirmations (default 2ms); retries back off up to 8 times it.
	RetryInterval time.Duration
	// ResendInterval: a write or atomic not answered within it is sent
	// again (same request id, doubling up to 16 times it, jittered), and
	// at once when the node's routing changes, until RequestTimeout after
	// it started (default the larger of 4 × RetryInterval and half the
	// DeadInterval: a link that lost it is declared down within the dead
	// interval).
	ResendInterval time.Duration
	// ReplyTTL is how long an owner keeps its answer to a write or atomic
	// from another node, to answer a re-sent copy with it instead of
	// applying it again (default 2 × RequestTimeout; it must exceed the
	// RequestTimeout of every node of the fabric).
	ReplyTTL time.Duration
	// MaxReplies bounds the owner's reply records (default 65536). An
	// owner that forgot a record for room answers re-sent requests it has
	// no record of "outcome unknown" (ETIMEDOUT) for ReplyTTL.
	MaxReplies int
	// PageReplies bounds the reply records of one page that travel with
	// it, to the new owner of a swap (OpData) and to its backups
	// (OpReplicate), which answer re-sent copies from them after a
	// takeover (default DefaultPageReplies, at most MaxPageReplies). A
	// page that answered more requests within ReplyTTL hands over its
	// newest: its next owner answers a re-sent copy it has no record of
	// "outcome unknown" (ETIMEDOUT) until ReplyTTL after the newest record
	// left behind (resend.go).
	PageReplies int
	// MergeTTL bounds how long after the last ref a node sent up for a
	// page it merges later refs into that fetch (default RetryInterval);
	// the ports waiting below it are kept until the answer passes, for
	// at most RequestTimeout.
	MergeTTL time.Duration
	// SwapTimeout bounds how long the old owner waits for the content
	// confirmation of a swap before it calls the swap off (default 10ms).
	SwapTimeout time.Duration
	// SwapGiveUp bounds how long an acquirer that confirmed the content
	// keeps asking the old owner for the outcome (default 1s).
	SwapGiveUp time.Duration
	// CommitTTL is how long the old owner remembers a committed swap to
	// answer re-sent confirmations (default 2 × SwapGiveUp).
	CommitTTL time.Duration
	// TimerGranularity is the resolution of the engine's timer wheel
	// (default 10µs).
	TimerGranularity time.Duration
	// HomeRefresh is how often an owner tells the homes of the pages it
	// owns (homed elsewhere) that it owns them, so that a home that
	// restarted learns its records again (default 1s). A restarted home
	// answers "retry" for pages it has no record of during two refresh
	// periods, "host down" after.
	HomeRefresh time.Duration
	// Replicas is the replication factor R (default 1: a page lives only
	// at its owner). With R > 1 every owned page has R−1 backups among the
	// owner's neighbours; a write, atomic or swap is answered only once
	// they hold it, and a backup takes a dead owner's page over (see
	// docs/replication.md). At most MaxReplicas.
	Replicas int
	// FailoverGrace is how long routing must have lost a page's owner
	// before its backup takes the page over, and a backup before its owner
	// replaces it (default 4 × RetryInterval).
	FailoverGrace time.Duration
	// FabricNodes is the number of nodes in the fabric, for the split rule
	// (Replicas > 1, docs/replication.md "Partitions"): a node decides a
	// takeover, gives up a lost backup, or acts as an owner only while
	// routing shows it among a strict majority of them. 0: the number of
	// nodes routing ever reached (this incarnation), which never shrinks
	// when nodes become unreachable but starts small after a restart.
	FabricNodes int
	// SplitGrace is how much longer than FailoverGrace a backup waits
	// before it takes a page over under the split rule: an owner cut off
	// in a minority must have seen it and fenced itself by then (default
	// the larger of FailoverGrace and DeadInterval).
	SplitGrace time.Duration
	// DeadInterval is the link layer's dead interval: how long a link to
	// a silent neighbour (crashed, or cut) still counts as up. An owner
	// learns that it is in a minority from routing, and routing can be
	// that much late: a node of the minority that crashes before the news
	// of the split passed it leaves the owner with the old, whole fabric
	// until the owner's own link to it (or its neighbour's) is declared
	// dead. So the split rule's SplitGrace is at least this (0: unknown,
	// SplitGrace alone).
	DeadInterval time.Duration
	// NoSplitRule turns the split rule off (tests of the rule, and
	// comparisons): a node unreachable by routing is taken for dead, as
	// before it.
	NoSplitRule bool
	// CopyLease: a backup copy its owner had not confirmed for this long
	// before routing lost the owner is dropped, never promoted (the owner
	// had stopped counting on it), unless the owner was seen restarted
	// (default the larger of 3 × HomeRefresh and DefaultCopyLease; owners
	// confirm their copies every HomeRefresh). A copy whose owner is
	// still reached is never dropped for want of confirmations alone: it
	// asks the owner (a probe), and goes only on the answer of the same
	// run of the owner. CopyLease must exceed the links' dead interval
	// plus HomeRefresh, or a dead owner's copies expire before routing
	// declares it dead.
	CopyLease time.Duration
	// PinBound bounds a lock's pin (0: the arbiter's MaxPin).
	PinBound time.Duration
	// MaxHops drops page-keyed messages that crossed more nodes (default
	// 255, the most a frame's hop count holds: one that reached it is
	// dropped whatever MaxHops says). It bounds a
	// frame caught in a loop; it must not bound a path: a request without
	// a path goes to the owner its node last heard of, on to the page's
	// home, then up the tree from the first node on it, and a tree that
	// followed its owner around a large fabric is deeper than the
	// fabric's diameter (on a 1,024-node torus, refs crossed 64 nodes).
	MaxHops uint8
	// Sink receives completions and events. Required.
	Sink Sink
	// Seed drives the retry jitter.
	Seed uint64
	// Bug plants a protocol bug, for tests of the checkers only.
	Bug PlantedBug
	// Tracer, if set, observes writes and replica versions (checkers).
	Tracer Tracer
	// Placement shapes the page traits and the placement policy
	// (placement.go, docs/placement.md): off by default.
	Placement PlacementConfig
	// Durable, if set, keeps the pages owned here and the backup copies
	// kept here on stable storage: the changes of every step are synced
	// before anything of the step leaves the node, and New reloads the
	// log's pages as backup copies whose owner is gone (durable.go).
	Durable *pagelog.Log
}

// Tracer observes protocol steps for checkers such as the simulator's.
// Calls are synchronous, with values; a Tracer must not call back into the
// engine and must copy data it keeps.
type Tracer interface {
	// Applied: the owner applied a write (store or atomic) of data at off,
	// producing version v.
	Applied(self noc.NodeID, key gva.GVA, v gva.Version, off int, data []byte)
	// ReplicaAdvanced: the content of a replica held here went from
	// version from (had: there was content) to version to.
	ReplicaAdvanced(self noc.NodeID, key gva.GVA, had bool, from, to gva.Version)
}

// PlantedBug names a deliberate protocol bug. Tests plant one to prove that
// the simulator's checkers catch it. The bugs' code exists only in builds
// with -tags dpubug; any other build refuses a Config that names one.
type PlantedBug uint8

// Planted bugs.
const (
	BugNone PlantedBug = iota
	// BugStaleCAS evaluates a remote CAS against the requester's own
	// replica and writes the new value through as a plain store: the
	// compare and the swap are no longer one atomic step at the owner.
	BugStaleCAS
	// BugEarlyAck answers a replicated write (replicas > 1) as soon as it
	// is sent to the backups, without waiting for them to hold it: an
	// owner that fails can take acknowledged writes with it.
	BugEarlyAck
	// BugTrustVouched serves every request another node vouches for
	// without checking its user against the page's attributes (cred.go).
	BugTrustVouched
	// BugFreeHere frees only the pages of an extent owned at its
	// allocator: a page that moved away (a lock or an acquire elsewhere)
	// is not taken back, and the free fails (hosts.go, startFree).
	BugFreeHere
	// BugQuotaLeak keeps a freed page charged to its allocator's quota
	// (hosts.go, freeStep): the ledger drifts from what users hold.
	BugQuotaLeak
	// BugAdmitNoGroups makes the host layer's admission check a user's
	// primary group only, not its supplementary groups (admit.go): a
	// member of a page's group through them is refused what the page's
	// mode allows it.
	BugAdmitNoGroups
	// BugSwapStaleContent makes a node that takes ownership keep the
	// content of the replica it held, taking only the version the old
	// owner sent (swap.go): the new owner serves stale content.
	BugSwapStaleContent
	// BugPlaceNoDwell lets placement move a page without its dwell
	// (placement.go): a page whose dominant writer keeps changing moves
	// more often than its limit per window.
	BugPlaceNoDwell
)

// Defaults.
const (
	DefaultPages            = 4096
	DefaultPathCacheEntries = 1 << 16
	DefaultUpdateThreshold  = 256
	DefaultRequestTimeout   = 100 * time.Millisecond
	DefaultRetryInterval    = 2 * time.Millisecond
	DefaultSwapTimeout      = 10 * time.Millisecond
	DefaultSwapGiveUp       = time.Second
	DefaultTimerGranularity = 10 * time.Microsecond
	DefaultMaxHops          = 255
	DefaultCopyLease        = 3 * time.Second
	DefaultMaxReplies       = 1 << 16
	DefaultPageReplies      = 256
	DefaultAttrCache        = 1 << 16
	// MaxPageReplies is the most reply records one frame carries.
	MaxPageReplies = 1024
)

func (c Config) withDefaults() (Config, error) {
	if c.Sink == nil {
		return c, errors.New("coherence: Config.Sink is required")
	}
	if c.Self == noc.BroadcastNode {
		return c, fmt.Errorf("coherence: self id %v is reserved", c.Self)
	}
	if c.AllocEpoch > MaxAllocEpoch {
		return c, fmt.Errorf("coherence: AllocEpoch %d above %d", c.AllocEpoch, MaxAllocEpoch)
	}
	if c.Bug != BugNone && !bugsCompiled {
		return c, errors.New("coherence: planted bugs exist only in builds with -tags dpubug")
	}
	c.Incarnation &^= prefixRouted // incarnations travel in 63 bits
	if c.Incarnation == 0 {
		c.Incarnation = 1
	}
	if c.Pages <= 0 {
		c.Pages = DefaultPages
	}
	if c.Store != nil {
		c.Pages = c.Store.Cap()
	}
	if c.PathCache.MaxEntries == 0 {
		c.PathCache.MaxEntries = max(DefaultPathCacheEntries, 2*c.Pages)
	}
	if c.PathCache.MaxEntries <= c.Pages {
		// Owner entries never age out and a node may own every page it
		// has: the cache must keep room beyond them.
		return c, fmt.Errorf("coherence: path cache of %d entries must hold more than the %d pages of the node", c.PathCache.MaxEntries, c.Pages)
	}
	if c.UpdateThreshold <= 0 {
		c.UpdateThreshold = DefaultUpdateThreshold
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.MergeTTL <= 0 {
		c.MergeTTL = c.RetryInterval
	}
	if c.ResendInterval <= 0 {
		c.ResendInterval = max(4*c.RetryInterval, c.DeadInterval/2)
	}
	if c.ReplyTTL <= 0 {
		c.ReplyTTL = 2 * c.RequestTimeout
	}
	if c.AttrCache <= 0 {
		c.AttrCache = DefaultAttrCache
	}
	if c.MaxReplies <= 0 {
		c.MaxReplies = DefaultMaxReplies
	}
	if c.PageReplies <= 0 {
		c.PageReplies = DefaultPageReplies
	}
	c.PageReplies = min(c.PageReplies, MaxPageReplies)
	if c.SwapTimeout <= 0 {
		c.SwapTimeout = DefaultSwapTimeout
	}
	if c.SwapGiveUp <= 0 {
		c.SwapGiveUp = DefaultSwapGiveUp
	}
	if c.CommitTTL <= 0 {
		c.CommitTTL = 2 * c.SwapGiveUp
	}
	if c.TimerGranularity <= 0 {
		c.TimerGranularity = DefaultTimerGranularity
	}
	if c.HomeRefresh <= 0 {
		c.HomeRefresh = time.Second
	}
	if c.MaxHops == 0 {
		c.MaxHops = DefaultMaxHops
	}
	if c.Replicas < 0 || c.Replicas > MaxReplicas {
		return c, fmt.Errorf("coherence: replicas %d outside 1..%d", c.Replicas, MaxReplicas)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.FailoverGrace <= 0 {
		c.FailoverGrace = 4 * c.RetryInterval
	}
	if c.CopyLease <= 0 {
		c.CopyLease = max(3*c.HomeRefresh, DefaultCopyLease)
	}
	if c.FabricNodes < 0 {
		return c, fmt.Errorf("coherence: fabric of %d nodes", c.FabricNodes)
	}
	if c.SplitGrace <= 0 {
		c.SplitGrace = max(c.FailoverGrace, c.DeadInterval)
	}
	var err error
	if c.Placement, err = c.Placement.withDefaults(); err != nil {
		return c, err
	}
	return c, nil
}

// Engine is the coherence engine of one node: both protocols as one
// deterministic state machine (see the package documentation). It
// implements node.Handler. It is not safe for concurrent use: the node's
// driver owns it.
type Engine struct {
	cfg   Config
	self  noc.NodeID
	inc   uint64
	cache *pathcache.Cache
	store PageStore
	arb   *arbiter.Arbiter
	wheel *arbiter.Wheel[timer]
	sink  Sink
	rng   *rand.Rand

	pages    map[gva.GVA]*page
	fetches  map[gva.GVA]*fetch
	home     map[gva.GVA]*homeRecord
	reqs     map[uint64]*request
	ownerOps map[opKey]*ownerOp
	commits  map[opKey]*commitRecord
	handed   map[gva.GVA]*commitRecord // the latest commit per page: where it went
	// copyAsked: pages homed here of an earlier run, without a record,
	// that a backup's copy asked about before taking them over, and when
	// (stale.go, copyAskedLately); at most copyAskedMax.
	copyAsked map[gva.GVA]time.Duration
	unrefd    map[gva.GVA]unrefMark // the last unref sent per page (see OpAttach)
	notices   map[gva.GVA]*notice

	// replication (replica.go)
	copies    map[gva.GVA]*backupCopy
	copiesBy  map[noc.NodeID]map[gva.GVA]bool // copies by owner node
	hints     map[gva.GVA]ownerHint
	hintOrder []gva.GVA
	replTimer arbiter.TimerID
	// owner side: owned pages by backup node, when routing first lost
	// each backup node, pages the replication timer must look at
	backedBy      map[noc.NodeID]map[gva.GVA]bool
	backupUnreach map[noc.NodeID]time.Duration
	attention     map[gva.GVA]bool
	probing       map[gva.GVA]bool          // copies with a probe due or an owner found restarted
	far           []noc.NodeID              // nodes beyond the neighbours, nearest first (farNodes)
	farVersion    uint64                    // the routing version far was listed at
	attrAsks      map[gva.GVA]time.Duration // pages whose attributes were asked of their home, and when (cred.go)
	split         splitView                 // the split rule's view of the fabric (split.go)
	replies       replies                   // the owner's answers to writes and atomics (resend.go)
	rtVersion     uint64                    // the routing version re-sends last looked at

	nextReq  uint64
	swapSeq  uint64
	nextPage gva.PageNumber

	// scratch, reused across calls
	rt         noc.Routes     // the node's routing, as given to the step that runs
	outbox     []noc.Outgoing // frames emitted since the node last drained them
	arena      []byte         // their payloads
	pay        []byte         // payloads of frames this node builds
	repBuf     []byte         // reply records an OpReplicate carries
	recBuf     []carriedReply // reply records an OpReplicate brought
	hostPay    []byte         // payloads of frames built for host requests
	fired      []arbiter.Fired[timer]
	answers    []arbiter.Answer
	evicts     []pathcache.Eviction
	opFree     []*ownerOp
	answering  bool
	rerouting  bool      // handleUp is re-sending a request that waited here
	drops      []gva.GVA // replicas left unmapped, dropped at the end of the step
	storeDrops []gva.GVA // the slices the store's last Balance invalidated (store.go)

	stats Counters
	dbg   debugTracer

	started bool
	born    time.Duration // the now of the first call
	// durDirty: pages whose state the durable log must take before the
	// step ends (durable.go); durErr: the sync that failed and stopped
	// the engine; restoring: reloaded copies wait for the first step.
	durDirty  map[gva.GVA]uint64 // page -> the newest epoch of the step
	durHomes  map[gva.GVA]bool
	durGone   map[gva.GVA]uint64 // the log's tombstones at start
	durErr    error
	restoring bool
	now       time.Duration // the now of the current call
}

// debugTracer is implemented by tracers that want a line for every
// protocol step (the simulator's replay of one failing seed).
type debugTracer interface {
	Debugf(self noc.NodeID, key gva.GVA, format string, args ...any)
}

func (e *Engine) debugf(key gva.GVA, format string, args ...any) {
	if e.dbg != nil {
		e.dbg.Debugf(e.self, key, format, args...)
	}
}

// page is a page whose content this node holds: a primary it owns or a
// replica its host maps.
type page struct {
	key       gva.GVA
	huge      bool
	content   []byte
	has       bool        // content holds version `version`
	version   gva.Version // version of content
	owner     bool
	epoch     uint64 // ownership epoch (transfers so far)
	ownerNode noc.NodeID
	maps      int         // host mappings
	seen      gva.Version // newest version this host was told of (session floor)
	waiters   []*request  // loads and refs waiting for content
	swap      *swapState
	doneSwap  opKey  // the swap that made this node the owner
	doneSeq   uint64 // and its attempt
	// settleUntil: the page became ours by a re-sent done; its route's done
	// may still come: no swap before then.
	settleUntil time.Duration
	rep         *ownerRep // replication at the owner (Replicas > 1)
	// attr: the page's attributes, as learned with its content (cred.go).
	attr    Attr
	hasAttr bool
	// recFrom: since when this node's reply records of the page (owned
	// here in ownership epoch recEpoch; recSet: noted) are complete
	// (resend.go).
	recFrom  time.Duration
	recEpoch uint64
	recSet   bool
	// recKeys: the page's reply records (owned here), oldest first, at
	// most Config.PageReplies: those that travel with it. recCut: the
	// newest time of a record left out for room (haveCut: there was one).
	recKeys []opKey
	recCut  time.Duration
	haveCut bool
	// tr: the page's traits here (traits.go).
	tr traits
}

// fetch is an open (merged) fetch: a ref forwarded upstream on behalf of
// the ports waiting below (noc.LocalPort: this node's host).
type fetch struct {
	min    gva.Version
	ports  pathcache.PortSet
	grafts []graftWaiter
	timer  arbiter.TimerID
	pinned bool
	// merging: the merge window is open (Config.MergeTTL since the last
	// ref this node sent up for it): refs asking for no more than min
	// merge into the fetch. After the window the fetch only keeps its
	// waiters, for at most RequestTimeout, to pass the answer on to them:
	// on a deep tree the answer comes back later than the window.
	merging bool
}

// homeRecord is what a page's home machine (where it was created) knows of
// it: who owns it now.
type homeRecord struct {
	owner    noc.NodeID
	ownerInc uint64
	epoch    uint64
	freed    bool
	attr     Attr // the page's attributes, fixed at alloc (attrs.go)
	hasAttr  bool
}

// unrefMark remembers an unref this node sent up port for a page.
type unrefMark struct {
	port noc.PortID
	at   time.Duration
}

// opKey names a request across the fabric: requester node + request id.
type opKey struct {
	node noc.NodeID
	id   uint64
}

// commitRecord remembers a committed swap at the old owner.
type commitRecord struct {
	key   gva.GVA
	peer  noc.NodeID // the new owner
	inc   uint64     // and its incarnation
	seq   uint64
	route []byte
	ver   gva.Version
	epoch uint64 // the epoch the new owner took the page at
	timer arbiter.TimerID
}

// notice is an OpOwnerMoved being sent to a page's home until acknowledged.
type notice struct {
	owner    noc.NodeID // noc.BroadcastNode: freed
	ownerInc uint64
	epoch    uint64
	tries    int
	timer    arbiter.TimerID
}

type timerKind uint8

const (
	tDeadline timerKind = iota + 1 // a host request's bound
	tRetry                         // a host request's next attempt
	tMerge                         // a merged fetch's bound
	tSwapOut                       // the old owner's bound on a swap
	tSwapIn                        // the acquirer's re-sent confirmation
	tCommit                        // forget a committed swap
	tNotice                        // re-send OpOwnerMoved
	tRefresh                       // tell the homes of the pages owned here who owns them
	tRepl                          // replication: re-send, replace backups, promote copies
)

type timer struct {
	kind timerKind
	id   uint64
	node noc.NodeID
	key  gva.GVA
}

// New returns an engine for one node.
func New(cfg Config) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cache, err := pathcache.New(cfg.PathCache)
	if err != nil {
		return nil, fmt.Errorf("coherence: %w", err)
	}
	arb, err := arbiter.New(cfg.Arbiter)
	if err != nil {
		return nil, fmt.Errorf("coherence: %w", err)
	}
	store := cfg.Store
	if store == nil {
		store = NewMemStore(cfg.Pages)
	}
	e := &Engine{
		cfg:       cfg,
		self:      cfg.Self,
		inc:       cfg.Incarnation,
		nextPage:  firstPage(cfg.AllocEpoch),
		cache:     cache,
		store:     store,
		arb:       arb,
		wheel:     arbiter.NewWheel[timer](cfg.TimerGranularity, 0),
		sink:      cfg.Sink,
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^uint64(cfg.Self)<<32^cfg.Incarnation)),
		pages:     make(map[gva.GVA]*page),
		fetches:   make(map[gva.GVA]*fetch),
		home:      make(map[gva.GVA]*homeRecord),
		reqs:      make(map[uint64]*request),
		ownerOps:  make(map[opKey]*ownerOp),
		commits:   make(map[opKey]*commitRecord),
		handed:    make(map[gva.GVA]*commitRecord),
		copyAsked: make(map[gva.GVA]time.Duration),
		unrefd:    make(map[gva.GVA]unrefMark),
		notices:   make(map[gva.GVA]*notice),
		copies:    make(map[gva.GVA]*backupCopy),
		copiesBy:  make(map[noc.NodeID]map[gva.GVA]bool),
		hints:     make(map[gva.GVA]ownerHint),
		replies:   replies{recs: make(map[opKey]replyRecord)},

		backedBy:      make(map[noc.NodeID]map[gva.GVA]bool),
		backupUnreach: make(map[noc.NodeID]time.Duration),
		attention:     make(map[gva.GVA]bool),
		probing:       make(map[gva.GVA]bool),
		attrAsks:      make(map[gva.GVA]time.Duration),
		pay:           make([]byte, 0, noc.HeaderLen+gva.PageSize+256+repliesHead+replyLen*cfg.PageReplies),
		hostPay:       make([]byte, 0, gva.PageSize+256),
	}
	e.dbg, _ = cfg.Tracer.(debugTracer)
	if cfg.Durable != nil {
		if err := e.restore(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Self returns the node id.
func (e *Engine) Self() noc.NodeID { return e.self }

// Incarnation returns this run's incarnation.
func (e *Engine) Incarnation() uint64 { return e.inc }

// Config returns the effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// HandleFrame implements node.Handler: one frame for the engine.
func (e *Engine) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes) {
	e.rt = rt
	e.begin(now)
	e.stats.count(&e.stats.Received, f.Class, f.Op)
	e.dispatch(now, in, f)
	e.endStep(now)
	if e.dbg != nil {
		if ent, ok := e.cache.Peek(f.GVA.Key()); ok && !ent.Owner && ent.Down.Has(ent.Up) {
			e.debugf(f.GVA.Key(), "inconsistent entry: up port %d among the down ports %v after %v/%d from port %d", ent.Up, ent.Down, f.Class, f.Op, in)
		}
	}
}

// begin notes the time of the engine's first call and starts its periodic
// work.
func (e *Engine) begin(now time.Duration) {
	e.now = now
	e.observeSplit(now)
	if e.started {
		return
	}
	e.started, e.born = true, now
	e.schedule(now+e.jitter(e.cfg.HomeRefresh), timer{kind: tRefresh})
	if e.restoring {
		e.restoring = false
		e.armRepl(now)
	}
}

// refreshHomes tells the home of every page owned here (and homed
// elsewhere) who owns it.
func (e *Engine) refreshHomes(now time.Duration) {
	e.schedule(now+e.cfg.HomeRefresh, timer{kind: tRefresh})
	keys := make([]gva.GVA, 0, 8)
	for key, pg := range e.pages {
		if pg.owner && (homeOf(key) != e.self || pg.rep != nil) {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, gva.Compare)
	e.touchBackups(keys)
	e.expireCopies(now)
	for _, key := range keys {
		if homeOf(key) == e.self {
			continue
		}
		pg := e.pages[key]
		var b [movedLen + attrLen]byte
		// The page's attributes go with the record: a home that restarted
		// learns them again (cred.go).
		p := appendMoved(b[:0], movedMsg{owner: e.self, ownerInc: e.inc, epoch: pg.epoch, attr: pg.attr, hasAttr: pg.hasAttr})
		f := newFrame(noc.ClassControl, OpOwnerMoved, 0, e.self, homeOf(key), 0, key, 0, p)
		e.sendNode(&f)
		e.stats.Refreshes++
	}
}

// endStep finishes what a step left for later: evictions found without a
// Sender at hand, replicas whose last mapping failed.
func (e *Engine) endStep(now time.Duration) {
	e.routesChanged(now)
	if len(e.evicts) > 0 {
		e.evicted(now, nil)
	}
	for len(e.drops) > 0 {
		key := e.drops[0]
		e.drops = e.drops[1:]
		if pg := e.pages[key]; pg != nil && !pg.owner && pg.maps == 0 && pg.swap == nil {
			for len(pg.waiters) > 0 {
				e.completeErr(now, pg.waiters[0], syscall.EINVAL, "page unmapped")
			}
			e.dropReplica(now, pg)
		}
	}
	e.drops = e.drops[:0]
	e.persist()
	e.balance() // store.go
}

func (e *Engine) dispatch(now time.Duration, in noc.PortID, f *noc.Frame) {
	reply := f.Flags&noc.FlagReply != 0
	path := f.Flags&noc.FlagPath != 0
	switch f.Class {
	case noc.ClassLoad:
		switch {
		case f.Op == OpRef && reply && path:
			e.handleRefReply(now, in, f)
		case reply:
			e.handleReply(now, f)
		case f.Op == OpRef:
			e.handleUp(now, in, f)
		case f.Op == OpUnref:
			e.handleUnref(now, in, f)
		case f.Op == OpDetach:
			e.handleDetach(now, in, f)
		case f.Op == OpAttach:
			e.handleAttach(now, in, f)
		default:
			e.malformed()
		}
	case noc.ClassStore:
		switch {
		case reply:
			e.handleReply(now, f)
		case f.Op == OpStore:
			e.handleUp(now, in, f)
		case f.Op == OpUpdate || f.Op == OpInvalidate:
			e.handleDown(now, in, f)
		default:
			e.malformed()
		}
	case noc.ClassAtomic:
		switch {
		case reply:
			e.handleReply(now, f)
		case f.Op == OpCAS || f.Op == OpFetchAdd:
			e.handleUp(now, in, f)
		default:
			e.malformed()
		}
	case noc.ClassControl:
		switch f.Op {
		case OpAcquire:
			if reply {
				e.handleReply(now, f)
			} else {
				e.handleUp(now, in, f)
			}
		case OpGrant:
			e.handleGrant(now, f)
		case OpDeny:
			e.handleDeny(now, f)
		case OpData:
			e.handleData(now, f)
		case OpDataAck:
			e.handleDataAck(now, f)
		case OpDone:
			e.handleDone(now, in, f)
		case OpAbort:
			e.handleAbort(now, f)
		case OpOwnerMoved:
			e.handleOwnerMoved(now, f)
		case OpOwnerMovedAck:
			e.handleOwnerMovedAck(f)
		case OpOwnerQuery:
			e.handleOwnerQuery(now, f)
		case OpAttrQuery:
			e.handleAttrQuery(now, f)
		case OpReplicate:
			e.handleReplicate(now, f)
			e.armRepl(now)
		case OpReplicateAck:
			e.handleReplicateAck(now, f)
		case OpReplicaDrop:
			e.handleReplicaDrop(now, f)
		case OpFailover:
			e.handleFailover(now, in, f)
		case OpPlace:
			e.handlePlace(now, f)
		default:
			e.malformed()
		}
	default:
		e.malformed()
	}
}

func (e *Engine) malformed() { e.stats.Malformed++ }

// PortState implements node.Handler. A port going down cuts every tree
// branch through it: entries whose up port it was are reset (their subtree
// is detached and re-refs), and it leaves every down set.
func (e *Engine) PortState(now time.Duration, p noc.PortID, up bool, nb noc.NodeID, rt noc.Routes) {
	e.rt = rt
	if e.dbg != nil {
		e.debugf(gva.GVA{}, "port %d up=%v", p, up)
	}
	e.neighbourChanged(now, nb)
	if up {
		return
	}
	defer e.endStep(now)
	e.begin(now)
	e.stats.PortsDown++
	for _, snap := range e.cache.Snapshot() {
		ent, ok := e.cache.Peek(snap.Key)
		if !ok {
			continue
		}
		switch {
		case ent.Up == p && !ent.Owner:
			e.resetEntry(now, ent)
		case ent.Down.Has(p):
			ent.Down = ent.Down.Remove(p)
			if fe := e.fetches[ent.Key]; fe != nil {
				fe.ports = fe.ports.Remove(p)
			}
			e.prune(now, ent)
		}
	}
}

// Tick implements node.Handler: it runs the engine's timers, the arbiter's
// tick decisions and pin bounds, and the path cache's idle aging.
func (e *Engine) Tick(now time.Duration, rt noc.Routes) {
	e.rt = rt
	e.begin(now)
	e.fired = e.wheel.Advance(now, e.fired[:0])
	if len(e.fired) > 0 {
		fired := slices.Clone(e.fired)
		for _, t := range fired {
			e.fire(now, t)
		}
	}
	e.advanceArbiter(now)
	if evs := e.cache.Sweep(now); len(evs) > 0 {
		e.evicted(now, evs)
	}
	e.endStep(now)
}

// NextDeadline implements node.Handler.
func (e *Engine) NextDeadline() (time.Duration, bool) {
	at, ok := e.wheel.NextDeadline()
	if a, aok := e.arb.NextDeadline(); aok && (!ok || a < at) {
		at, ok = a, true
	}
	if c, cok := e.cache.NextExpiry(); cok && (!ok || c < at) {
		at, ok = c, true
	}
	return at, ok
}

func (e *Engine) fire(now time.Duration, f arbiter.Fired[timer]) {
	t := f.Value
	switch t.kind {
	case tDeadline:
		if r := e.reqs[t.id]; r != nil && r.deadline == f.ID {
			r.deadline = 0
			e.expire(now, r)
		}
	case tRetry:
		if r := e.reqs[t.id]; r != nil && r.retry == f.ID {
			r.retry = 0
			e.retry(now, r)
		}
	case tMerge:
		if fe := e.fetches[t.key]; fe != nil && fe.timer == f.ID {
			e.mergeEnded(now, t.key, fe)
		}
	case tSwapOut:
		if pg := e.pages[t.key]; pg != nil && pg.swap != nil && pg.swap.out && pg.swap.timer == f.ID {
			e.abortOut(now, pg)
		}
	case tSwapIn:
		if pg := e.pages[t.key]; pg != nil && pg.swap != nil && !pg.swap.out && pg.swap.timer == f.ID {
			e.swapInTimer(now, pg)
		}
	case tCommit:
		k := opKey{t.node, t.id}
		if c := e.commits[k]; c != nil && c.timer == f.ID {
			delete(e.commits, k)
			if e.handed[c.key] == c {
				delete(e.handed, c.key)
			}
		}
	case tRefresh:
		e.refreshHomes(now)
	case tRepl:
		if e.replTimer == f.ID {
			e.replTick(now)
		}
	case tNotice:
		if n := e.notices[t.key]; n != nil && n.timer == f.ID {
			e.sendNotice(now, t.key, n)
		}
	}
}

func (e *Engine) schedule(at time.Duration, t timer) arbiter.TimerID {
	return e.wheel.Schedule(at, t)
}

func (e *Engine) cancel(id arbiter.TimerID) {
	if id != 0 {
		e.wheel.Cancel(id)
	}
}

// newFrame returns a frame of the current version.
func newFrame(c noc.Class, op noc.Op, flags noc.Flags, src, dst noc.NodeID, id uint64, g gva.GVA, v gva.Version, payload []byte) noc.Frame {
	return noc.Frame{Version: noc.FrameVersion, Class: c, Op: op, Flags: flags, Src: src, Dst: dst,
		RequestID: id, GVA: g, PageVersion: v, Payload: payload}
}

// sendPort queues f for the link of port p and counts it.
func (e *Engine) sendPort(p noc.PortID, f *noc.Frame) {
	e.stats.count(&e.stats.Sent, f.Class, f.Op)
	e.emit(p, f)
}

// sendNode queues f to go toward f.Dst by routing and counts it.
func (e *Engine) sendNode(f *noc.Frame) {
	e.stats.count(&e.stats.Sent, f.Class, f.Op)
	e.emit(noc.NoPort, f)
}

// emit appends f to the outbox: the frame by value, its payload copied into
// the outbox's arena (the caller's frame and payload stay the caller's).
func (e *Engine) emit(p noc.PortID, f *noc.Frame) {
	o := noc.Outgoing{Port: p, Frame: *f}
	o.Frame.Contents = nil
	if len(f.Payload) > 0 {
		start := len(e.arena)
		e.arena = append(e.arena, f.Payload...)
		o.Frame.Payload = e.arena[start:len(e.arena):len(e.arena)]
	}
	e.outbox = append(e.outbox, o)
}

// TakeOutgoing appends the frames the engine emitted since the last call
// to dst and forgets them (implements node.Handler). Their payloads stay
// valid until the engine's next step. Given an empty dst it hands over the
// outbox itself and keeps dst's room for the frames to come (no copy).
func (e *Engine) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing {
	e.arena = e.arena[:0]
	if e.durErr != nil {
		e.outbox = e.outbox[:0] // stopped: nothing leaves (durable.go)
	}
	if len(e.outbox) == 0 {
		return dst
	}
	if len(dst) == 0 {
		out := e.outbox
		e.outbox = dst
		return out
	}
	dst = append(dst, e.outbox...)
	clear(e.outbox)
	e.outbox = e.outbox[:0]
	return dst
}

// reply answers request id of node src: locally when src is this node,
// otherwise routed.
func (e *Engine) reply(now time.Duration, src noc.NodeID, id uint64, c noc.Class, op noc.Op, flags noc.Flags, g gva.GVA, v gva.Version, payload []byte) {
	f := newFrame(c, op, flags|noc.FlagReply, e.self, src, id, g, v, payload)
	if src == e.self {
		e.handleReply(now, &f)
		return
	}
	e.sendNode(&f)
}

// fail answers request f with errno.
func (e *Engine) fail(now time.Duration, f *noc.Frame, errno syscall.Errno) {
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "fail %v/%d to %v: %v", f.Class, f.Op, f.Src, errno)
	}
	var b [errnoLen]byte
	binary.BigEndian.PutUint32(b[:], uint32(errno))
	e.reply(now, f.Src, f.RequestID, f.Class, f.Op, noc.FlagError, f.GVA, f.PageVersion, b[:])
}

// home returns the home machine (creator) of a page.
func homeOf(key gva.GVA) noc.NodeID { return noc.NodeID(key.Machine()) }

// jitter returns d scaled by a factor in [1, 2).
func (e *Engine) jitter(d time.Duration) time.Duration {
	return d + time.Duration(e.rng.Int64N(int64(d)+1))
}
