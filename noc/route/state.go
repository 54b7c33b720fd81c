package route

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Errors callers branch on. Errors returned by this package wrap one of them.
var (
	// ErrMalformed: a routing frame's payload does not follow the layout of
	// its op (see the package documentation), or its header is unfit for a
	// link-local routing frame.
	ErrMalformed = errors.New("route: malformed routing frame")
	// ErrNotRouting: the frame is not a Control frame with an op of this
	// package.
	ErrNotRouting = errors.New("route: not a routing frame")
	// ErrPort: the port is outside 0..Config.MaxPorts-1.
	ErrPort = errors.New("route: port out of range")
	// ErrLoop: a hello carries this node's own id (a port cabled to
	// itself, or two nodes configured with one id).
	ErrLoop = errors.New("route: hello from this node's own id")
	// ErrConfig: New was given an unusable Config or node id.
	ErrConfig = errors.New("route: invalid configuration")
)

// Config tunes a State. Zero fields take the defaults shown; every node of
// a fabric must use the same MaxAge.
type Config struct {
	// HelloInterval is how often a hello is repeated on an up port that
	// has not heard its neighbour yet (default 1s).
	HelloInterval time.Duration
	// RefreshInterval is how often a node re-originates its LSA when
	// nothing changed (default 10s).
	RefreshInterval time.Duration
	// MaxAge is the age at which an LSA that was not refreshed is dropped
	// everywhere (default 4 × RefreshInterval; must exceed it).
	MaxAge time.Duration
	// UnreachableHold is how long the LSA of an originator that no path
	// reaches is kept before it is dropped (default RefreshInterval).
	UnreachableHold time.Duration
	// SPFDelay is how long after a change the routing table is recomputed
	// (default 0: at the next Tick).
	SPFDelay time.Duration
	// OriginateDelay is how long after its adjacencies change the node
	// re-originates its LSA (default 0: at the next Tick). The changes
	// within it go out as one LSA: a node whose ports come up one after
	// the other (a whole fabric booting at once) floods one LSA instead
	// of one per port, and every LSA reaches every node.
	OriginateDelay time.Duration
	// Incarnation distinguishes this run of the node from earlier ones
	// (for example a boot counter). Optional: a restarted node also
	// catches up by bumping its sequence number past its old LSAs.
	Incarnation uint32
	// MaxPorts bounds the port ids this node accepts (default 64, at most
	// 4096).
	MaxPorts int
}

const maxPortsLimit = 4096

func (c Config) withDefaults() Config {
	if c.HelloInterval == 0 {
		c.HelloInterval = time.Second
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = 10 * time.Second
	}
	if c.MaxAge == 0 {
		c.MaxAge = 4 * c.RefreshInterval
	}
	if c.UnreachableHold == 0 {
		c.UnreachableHold = c.RefreshInterval
	}
	if c.MaxPorts == 0 {
		c.MaxPorts = 64
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.HelloInterval < 0 || c.RefreshInterval < 0 || c.UnreachableHold < 0 || c.SPFDelay < 0 || c.OriginateDelay < 0:
		return fmt.Errorf("negative interval in %+v: %w", c, ErrConfig)
	case c.MaxAge <= c.RefreshInterval:
		return fmt.Errorf("max age %v not above refresh interval %v: %w", c.MaxAge, c.RefreshInterval, ErrConfig)
	case c.MaxAge > time.Duration(math.MaxUint32)*time.Millisecond:
		return fmt.Errorf("max age %v does not fit the wire's age field: %w", c.MaxAge, ErrConfig)
	case c.MaxPorts < 1 || c.MaxPorts > maxPortsLimit:
		return fmt.Errorf("max ports %d outside 1..%d: %w", c.MaxPorts, maxPortsLimit, ErrConfig)
	}
	return nil
}

// Route is one entry of the routing table: frames for Dst leave on Port
// toward the neighbour NextHop, Hops links away from Dst.
type Route struct {
	Dst     noc.NodeID `json:"dst"`
	Port    noc.PortID `json:"port"`
	NextHop noc.NodeID `json:"next_hop"`
	Hops    int        `json:"hops"`
}

// hop is a routing table entry as NextHop reads it.
type hop struct {
	port noc.PortID
	hops int32
}

// port is the routing view of one local port.
type port struct {
	up        bool // the reliable link is up (PortUp without PortDown)
	heard     bool // a hello arrived since the port last went down
	neighbour noc.NodeID
	peerPort  noc.PortID
	peerInc   uint32
	since     time.Duration // when the adjacency came up
	helloAt   time.Duration // when a hello was last sent
}

func (p *port) adjacent() bool { return p.up && p.heard }

// entry is one LSA of the link-state database.
type entry struct {
	lsa       LSA
	age0      time.Duration // the LSA's age when installed
	installed time.Duration
	reachable bool
	lostAt    time.Duration // when it was last found unreachable
	hops      int32
	slot      int32
}

// expiry is when e reaches MaxAge.
func (e *entry) expiry(maxAge time.Duration) time.Duration { return e.installed + maxAge - e.age0 }

// output is a frame waiting in the out-queue; its payload is
// arena[off:end].
type output struct {
	port     noc.PortID
	op       noc.Op
	off, end int32
}

const never = time.Duration(math.MaxInt64)

// State is the link-state routing of one node: a deterministic state
// machine fed with port events, routing frames and time, producing
// routing frames and a routing table. It is not safe for concurrent use;
// the node core owns it.
type State struct {
	self noc.NodeID
	cfg  Config
	now  time.Duration // the latest time given

	ports []port

	// Link-state database: entries by slot, slots by originator.
	entries []*entry
	free    []int32
	index   slotIndex
	own     *entry
	// ownStale: the own LSA must be (re)originated at the next Tick
	// from staleAt+OriginateDelay on.
	ownStale  bool
	staleAt   time.Duration
	ownAt     time.Duration // last origination
	nextAging time.Duration // earliest expiry or unreachable purge

	// Routing table.
	spfDirty bool
	dirtyAt  time.Duration
	table    []Route // sorted by Dst
	spare    []Route
	hop      map[noc.NodeID]hop
	dense    []hop // the table by node id, when ids are dense (else empty: hop)
	version  uint64

	// Shortest-path scratch.
	dist  []int32
	first []noc.NodeID
	bfs   []int32
	nbrs  []Adjacency // usable first hops, by port

	// Out-queue, double-buffered so Outputs may be re-entered.
	queue, spareQ []output
	arena, spareA []byte
	frame         noc.Frame

	rx      LSA         // decode scratch
	scratch []Adjacency // origination scratch
	stats   Stats
}

// New returns the routing state of node self. It originates its first LSA
// at the first Tick.
func New(self noc.NodeID, cfg Config) (*State, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if self == noc.BroadcastNode {
		return nil, fmt.Errorf("node id %v: %w", self, ErrConfig)
	}
	s := &State{
		self:      self,
		cfg:       cfg,
		hop:       make(map[noc.NodeID]hop),
		ownStale:  true,
		nextAging: never,
	}
	s.own = s.newEntry(self)
	s.own.lsa.Incarnation = cfg.Incarnation
	s.own.reachable = true
	return s, nil
}

// Self is this node's id.
func (s *State) Self() noc.NodeID { return s.self }

// PortUp reports that the reliable link on port p came up. A hello is
// sent on it; the adjacency forms when the neighbour's hello arrives.
func (s *State) PortUp(now time.Duration, p noc.PortID) error {
	if err := s.checkPort(p); err != nil {
		return err
	}
	s.now = now
	pt := s.port(p)
	if pt.up {
		return nil
	}
	pt.up = true
	s.sendHello(now, p, false)
	if pt.heard { // its hello came before the link event
		pt.since = now
		s.adjacencyChanged(now)
		s.syncDatabase(p)
	}
	return nil
}

// PortDown reports that the reliable link on port p went down (or that the
// link layer gave up on the neighbour). Its adjacency ends at once.
func (s *State) PortDown(now time.Duration, p noc.PortID) error {
	if err := s.checkPort(p); err != nil {
		return err
	}
	s.now = now
	if int(p) >= len(s.ports) {
		return nil
	}
	pt := &s.ports[p]
	was := pt.adjacent()
	*pt = port{}
	if was {
		s.adjacencyChanged(now)
	}
	return nil
}

// HandleFrame processes a routing frame that arrived on port in. A frame
// that is not a routing frame, or is malformed, returns an error and
// leaves the routing state unchanged (only Stats.Malformed counts it).
// f and its payload are not kept.
func (s *State) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame) error {
	if err := s.handleFrame(now, in, f); err != nil {
		s.stats.Malformed++
		return err
	}
	return nil
}

func (s *State) handleFrame(now time.Duration, in noc.PortID, f *noc.Frame) error {
	if !f.IsRouting() {
		return fmt.Errorf("%v: %w", f, ErrNotRouting)
	}
	if err := s.checkPort(in); err != nil {
		return err
	}
	switch {
	case f.Src == noc.BroadcastNode:
		return fmt.Errorf("routing frame from the broadcast id: %w", ErrMalformed)
	case f.Dst != noc.BroadcastNode && f.Dst != s.self:
		return fmt.Errorf("routing frame for %v at %v: %w", f.Dst, s.self, ErrMalformed)
	}
	switch f.Op {
	case OpHello:
		h, err := DecodeHello(f.Payload)
		if err != nil {
			return err
		}
		if f.Src == s.self {
			return fmt.Errorf("hello on port %d: %w", in, ErrLoop)
		}
		s.now = now
		s.handleHello(now, in, f.Src, h)
	case OpLSA:
		if err := DecodeLSA(f.Payload, &s.rx); err != nil {
			return err
		}
		s.now = now
		s.handleLSA(now, in, &s.rx)
	default:
		return fmt.Errorf("routing op %d: %w", f.Op, ErrNotRouting)
	}
	return nil
}

func (s *State) handleHello(now time.Duration, in noc.PortID, src noc.NodeID, h Hello) {
	s.stats.HellosReceived++
	pt := s.port(in)
	wasAdjacent := pt.adjacent()
	moved := !pt.heard || pt.neighbour != src || pt.peerPort != h.Port
	restarted := pt.heard && pt.peerInc != h.Incarnation
	pt.heard, pt.neighbour, pt.peerPort, pt.peerInc = true, src, h.Port, h.Incarnation
	if !pt.up {
		return // remembered until PortUp
	}
	if !h.Reply {
		s.sendHello(now, in, true)
	}
	switch {
	case !wasAdjacent || moved:
		pt.since = now
		s.adjacencyChanged(now)
		s.syncDatabase(in)
	case !h.Reply || restarted:
		// The neighbour (re)started its side of the adjacency: it may
		// have lost its database.
		s.syncDatabase(in)
	}
}

func (s *State) handleLSA(now time.Duration, in noc.PortID, rx *LSA) {
	s.stats.LSAsReceived++
	if rx.Age >= s.cfg.MaxAge {
		s.stats.LSAsStale++
		return
	}
	if rx.Origin == s.self {
		s.handleOwnLSA(in, rx)
		return
	}
	slot, known := s.index.get(rx.Origin)
	var e *entry
	if known {
		e = s.entries[slot]
		c := compareLSA(rx, &e.lsa)
		if c == 0 && !slices.Equal(e.lsa.Adjacencies, rx.Adjacencies) {
			// One sequence number with two contents: the originator
			// restarted with its incarnation, caught up on an older LSA
			// of its own and reused a number its earlier run had sent
			// where that older one had not gone. The copy whose
			// adjacencies order higher wins everywhere; the originator,
			// handed a copy of its number that differs from its own,
			// jumps past both (handleOwnLSA). Taking either for a
			// duplicate left the two halves of the fabric with two views
			// of the node until its next refresh.
			c = compareAdjacencies(rx.Adjacencies, e.lsa.Adjacencies)
			s.stats.LSAsConflicting++
		}
		switch {
		case c == 0:
			s.stats.LSAsDuplicate++
			return
		case c < 0:
			// The sender holds an older copy: give it ours.
			s.stats.LSAsStale++
			s.sendLSA(e, in)
			return
		}
		if !slices.Equal(e.lsa.Adjacencies, rx.Adjacencies) {
			s.markDirty(now)
		}
	} else {
		e = s.newEntry(rx.Origin)
		e.lostAt = now
		s.noteAging(now + s.cfg.UnreachableHold)
		s.markDirty(now)
	}
	e.lsa.Incarnation, e.lsa.Seq = rx.Incarnation, rx.Seq
	e.lsa.Adjacencies = append(e.lsa.Adjacencies[:0], rx.Adjacencies...)
	e.age0, e.installed = rx.Age, now
	s.noteAging(e.expiry(s.cfg.MaxAge))
	s.stats.LSAsInstalled++
	s.flood(e, in)
}

// handleOwnLSA handles a copy of this node's own LSA. A copy newer than
// ours (left from before a restart), or as new but different, makes us
// jump past it at the next origination.
func (s *State) handleOwnLSA(in noc.PortID, rx *LSA) {
	own := &s.own.lsa
	switch c := compareLSA(rx, own); {
	case c > 0 || (c == 0 && !slices.Equal(rx.Adjacencies, own.Adjacencies)):
		own.Incarnation, own.Seq = rx.Incarnation, rx.Seq
		s.markStale(s.now)
		s.stats.OwnLSACatchUps++
	case c < 0:
		s.stats.LSAsStale++
		if !s.ownStale {
			s.sendLSA(s.own, in)
		}
	default:
		s.stats.LSAsDuplicate++
	}
}

// compareAdjacencies orders two adjacency lists of one originator's LSAs
// of one sequence number: the longer first, then by neighbour, port and
// neighbour's port.
func compareAdjacencies(a, b []Adjacency) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), slices.CompareFunc(a, b, func(x, y Adjacency) int {
		return cmp.Or(cmp.Compare(x.Neighbour, y.Neighbour), cmp.Compare(x.Port, y.Port), cmp.Compare(x.NeighbourPort, y.NeighbourPort))
	}))
}

// compareLSA orders two LSAs of one originator: by incarnation, then
// sequence number.
func compareLSA(a, b *LSA) int {
	switch {
	case a.Incarnation != b.Incarnation:
		if a.Incarnation < b.Incarnation {
			return -1
		}
		return 1
	case a.Seq != b.Seq:
		if a.Seq < b.Seq {
			return -1
		}
		return 1
	}
	return 0
}

// Tick runs the timers: the own LSA's origination and refresh, hello
// repeats, LSA aging, and the routing table's recomputation.
func (s *State) Tick(now time.Duration) {
	s.now = now
	if (s.ownStale && now >= s.staleAt+s.cfg.OriginateDelay) || now >= s.ownAt+s.cfg.RefreshInterval {
		s.originate(now)
	}
	for p := range s.ports {
		pt := &s.ports[p]
		if pt.up && !pt.heard && now >= pt.helloAt+s.cfg.HelloInterval {
			s.sendHello(now, noc.PortID(p), false)
		}
	}
	if s.spfDue(now) {
		s.computeRoutes(now)
	}
	if now >= s.nextAging {
		s.age(now)
		if s.spfDue(now) {
			s.computeRoutes(now)
		}
	}
}

// NextDeadline is when Tick must next run. It is never later than the own
// LSA's next refresh, so ok is always true.
func (s *State) NextDeadline() (at time.Duration, ok bool) {
	if s.ownStale {
		due := s.staleAt + s.cfg.OriginateDelay
		if due <= s.now {
			return s.now, true
		}
		at = due
	} else {
		at = never
	}
	at = min(at, s.ownAt+s.cfg.RefreshInterval, s.nextAging)
	if s.spfDirty {
		at = min(at, s.dirtyAt+s.cfg.SPFDelay)
	}
	for p := range s.ports {
		if pt := &s.ports[p]; pt.up && !pt.heard {
			at = min(at, pt.helloAt+s.cfg.HelloInterval)
		}
	}
	return at, true
}

// Outputs hands every queued frame to fn, in order, and empties the queue.
// The frame and its payload are valid only during the call (the node core
// encodes them at once). fn may call back into s; frames it causes are
// queued for the next Outputs.
func (s *State) Outputs(fn func(p noc.PortID, f *noc.Frame)) {
	q, a := s.queue, s.arena
	s.queue, s.arena = s.spareQ[:0], s.spareA[:0]
	for _, o := range q {
		s.frame = noc.Frame{
			Version: noc.FrameVersion,
			Class:   noc.ClassControl,
			Op:      o.op,
			Src:     s.self,
			Dst:     noc.BroadcastNode,
			Payload: a[o.off:o.end:o.end],
		}
		fn(o.port, &s.frame)
	}
	s.spareQ, s.spareA = q[:0], a[:0]
}

// Pending is the number of frames waiting for Outputs.
func (s *State) Pending() int { return len(s.queue) }

// adjacencyChanged schedules a new own LSA and a new routing table.
func (s *State) adjacencyChanged(now time.Duration) {
	s.markStale(now)
	s.markDirty(now)
}

// markStale schedules a new own LSA (OriginateDelay after the first change
// it carries).
func (s *State) markStale(now time.Duration) {
	if !s.ownStale {
		s.ownStale, s.staleAt = true, now
	}
}

func (s *State) markDirty(now time.Duration) {
	if !s.spfDirty {
		s.spfDirty, s.dirtyAt = true, now
	}
}

func (s *State) spfDue(now time.Duration) bool {
	return s.spfDirty && now >= s.dirtyAt+s.cfg.SPFDelay
}

// originate makes a new own LSA from the current adjacencies and floods it.
func (s *State) originate(now time.Duration) {
	adj := s.scratch[:0]
	for p := range s.ports {
		if pt := &s.ports[p]; pt.adjacent() {
			adj = append(adj, Adjacency{Port: noc.PortID(p), Neighbour: pt.neighbour, NeighbourPort: pt.peerPort})
		}
	}
	own := &s.own.lsa
	if !slices.Equal(adj, own.Adjacencies) {
		s.markDirty(now)
	}
	s.scratch, own.Adjacencies = own.Adjacencies, adj
	if own.Seq == math.MaxUint32 {
		own.Incarnation, own.Seq = own.Incarnation+1, 0
	}
	own.Seq++
	s.own.installed, s.own.age0 = now, 0
	s.ownAt, s.ownStale = now, false
	s.stats.LSAsOriginated++
	s.flood(s.own, noc.NoPort)
}

// flood queues e on every adjacent port except the one it came from.
func (s *State) flood(e *entry, except noc.PortID) {
	off := -1
	for p := range s.ports {
		if pt := &s.ports[p]; !pt.adjacent() || noc.PortID(p) == except {
			continue
		}
		if off < 0 {
			off = len(s.arena)
			s.appendLSA(e)
		}
		s.queue = append(s.queue, output{port: noc.PortID(p), op: OpLSA, off: int32(off), end: int32(len(s.arena))})
		s.stats.LSAsSent++
	}
}

// sendLSA queues e on port p.
func (s *State) sendLSA(e *entry, p noc.PortID) {
	off := len(s.arena)
	s.appendLSA(e)
	s.queue = append(s.queue, output{port: p, op: OpLSA, off: int32(off), end: int32(len(s.arena))})
	s.stats.LSAsSent++
}

func (s *State) appendLSA(e *entry) {
	e.lsa.Age = e.age0 + (s.now - e.installed)
	s.arena = e.lsa.AppendTo(s.arena)
}

// syncDatabase sends the whole database on port p, for a neighbour that
// just became adjacent. A stale own LSA is left out: the coming
// origination floods it.
func (s *State) syncDatabase(p noc.PortID) {
	for _, e := range s.entries {
		if e == nil || (e == s.own && (s.ownStale || e.lsa.Seq == 0)) {
			continue
		}
		if e != s.own && s.now >= e.expiry(s.cfg.MaxAge) {
			continue
		}
		s.sendLSA(e, p)
	}
}

func (s *State) sendHello(now time.Duration, p noc.PortID, reply bool) {
	off := len(s.arena)
	s.arena = Hello{Port: p, Reply: reply, Incarnation: s.cfg.Incarnation}.AppendTo(s.arena)
	s.queue = append(s.queue, output{port: p, op: OpHello, off: int32(off), end: int32(len(s.arena))})
	s.port(p).helloAt = now
	s.stats.HellosSent++
}

// age drops LSAs that reached MaxAge and, once the table is current, LSAs
// whose originator stayed unreachable for UnreachableHold.
func (s *State) age(now time.Duration) {
	next := never
	for slot, e := range s.entries {
		if e == nil || e == s.own {
			continue
		}
		exp := e.expiry(s.cfg.MaxAge)
		if now >= exp {
			s.remove(int32(slot))
			s.stats.LSAsExpired++
			continue
		}
		next = min(next, exp)
		if e.reachable {
			continue
		}
		purge := e.lostAt + s.cfg.UnreachableHold
		if s.spfDirty { // reachability is about to be recomputed
			next = min(next, max(purge, s.dirtyAt+s.cfg.SPFDelay))
			continue
		}
		if now >= purge {
			s.remove(int32(slot))
			s.stats.LSAsPurged++
			continue
		}
		next = min(next, purge)
	}
	s.nextAging = next
}

func (s *State) noteAging(at time.Duration) { s.nextAging = min(s.nextAging, at) }

func (s *State) newEntry(origin noc.NodeID) *entry {
	e := &entry{lsa: LSA{Origin: origin}, hops: -1}
	if n := len(s.free); n > 0 {
		e.slot = s.free[n-1]
		s.free = s.free[:n-1]
		s.entries[e.slot] = e
	} else {
		e.slot = int32(len(s.entries))
		s.entries = append(s.entries, e)
	}
	s.index.set(origin, e.slot)
	return e
}

func (s *State) remove(slot int32) {
	e := s.entries[slot]
	s.index.del(e.lsa.Origin)
	s.entries[slot] = nil
	s.free = append(s.free, slot)
	s.markDirty(s.now)
}

func (s *State) checkPort(p noc.PortID) error {
	if int(p) >= s.cfg.MaxPorts {
		return fmt.Errorf("port %d of %d: %w", p, s.cfg.MaxPorts, ErrPort)
	}
	return nil
}

// port returns the state of port p, growing the table to hold it.
func (s *State) port(p noc.PortID) *port {
	for int(p) >= len(s.ports) {
		s.ports = append(s.ports, port{})
	}
	return &s.ports[p]
}
