package node

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/route"
)

// Config shapes a Core.
type Config struct {
	Self noc.NodeID
	// Handler is the protocol engine; nil drops (and counts) every frame
	// for it.
	Handler Handler
	// Link is the template of every port's link; MTU and Session are set
	// per port.
	Link link.Config
	// Route configures link-state routing.
	Route route.Config
	// Clock configures the fabric clock, which runs when Link.ClockStamps
	// is set (Self is the core's).
	Clock clock.Config
	// Seed drives the core's random source (link sessions, routing
	// incarnation). The same seed and inputs give the same outputs.
	Seed uint64
	// Boot tells apart runs of a node that share a Seed: it is mixed into
	// the random source, so a restart with the same seed still gets new
	// link sessions and a new routing incarnation (a reused session id
	// reads to the neighbour as the old run and keeps the link down). The
	// agent draws it fresh at every start; zero leaves the seed alone.
	Boot uint64
	// MaxHops drops frames that crossed more routers than this (default 64).
	MaxHops uint8
	// HoldBound bounds how long a frame waits for room on its outgoing
	// link before it is dropped (default 1 s; see Core.forward).
	HoldBound time.Duration
	// AdmitNeighbour, when set, is asked about every hello before routing
	// sees it: false refuses the node claiming id n on port p (the agent
	// refuses an id its link key is not bound to). A port whose hello was
	// refused carries nothing until it is admitted or its link goes down:
	// its frames are dropped and counted (Stats.NeighboursRefused).
	AdmitNeighbour func(p noc.PortID, n noc.NodeID) bool
}

// Errors of the core.
var (
	ErrNoPort  = errors.New("node: no such port")
	ErrNoRoute = errors.New("node: no route to node")
	ErrPortUp  = errors.New("node: port already added")
)

// localQueueMax bounds frames a node sends to itself within one step.
const localQueueMax = 1024

// routingBacklogMax bounds the routing frames waiting for one port's link.
const routingBacklogMax = 4096

// ownBacklogMax bounds the frames of this node's own (the Handler's)
// waiting for one port's link.
const ownBacklogMax = 8192

// Core is the deterministic state machine of one DPU. It is not safe for
// concurrent use: one driver goroutine owns it.
type Core struct {
	cfg   Config
	rng   *rand.Rand
	ports []*port
	rt    *route.State
	clk   *clock.Clock // nil without Link.ClockStamps
	cout  []clock.Output
	now   time.Duration

	frame noc.Frame      // decode scratch
	enc   []byte         // encode scratch
	local [][]byte       // frames to self, delivered after the current step
	ev    []Event        // events since the last TakeEvents
	hout  []noc.Outgoing // the handler's frames being moved onto links
	rtVer uint64         // routing table version last reported
	// rtDirty: routing ran (a routing frame, a port going up or down, its
	// timers) since its output was last sent and its deadline last read;
	// until it runs again rtNext is its deadline. Most frames are not
	// routing's, and leave it alone.
	rtDirty bool
	rtNext  time.Duration
	// waiting: some port may hold a frame or routing backlog (release has
	// work).
	waiting bool
	stats   Stats
}

type port struct {
	name      string
	ep        Link
	up        bool
	neighbour noc.NodeID
	known     bool          // neighbour learned from routing
	refused   bool          // its last hello was refused (Config.AdmitNeighbour)
	lastRx    time.Duration // when the port last delivered a datagram

	// held is a received frame waiting for room on its outgoing link
	// (heldOut); while it waits, nothing more is taken from this port, so
	// the port's receive window fills and its neighbour stops sending.
	held      []byte
	heldOut   noc.PortID
	heldSince time.Duration

	// routing holds routing frames this port's link refused (a flood
	// larger than the send queue); they go out, in order, as the link
	// drains. Bounded by routingBacklogMax: a flood beyond it loses its
	// oldest frames, which later LSAs and refreshes supersede.
	routing [][]byte

	// own holds frames this node sent (the Handler's) that the port's
	// link refused for want of room; they go out, in order and before
	// any later one, as the link drains. An update or invalidation a
	// full link dropped would leave the replicas below it valid at an
	// old version for ever (dpu-sim seed 22, 8 nodes, every fault, R = 2,
	// a flooder). Bounded by ownBacklogMax; emptied when the link goes
	// down (the protocol recovers what a lost link carried).
	own [][]byte
}

// Stats counts what the core did with frames.
type Stats struct {
	Delivered  uint64 // frames handed to the Handler
	Forwarded  uint64 // frames forwarded by the routing table
	Originated uint64 // frames sent by this node
	Routing    uint64 // routing frames received
	NoRoute    uint64 // frames dropped: no route to Dst
	HopLimit   uint64 // frames dropped: hop count past MaxHops
	Malformed  uint64 // messages that are not frames
	NoHandler  uint64 // frames for the engine with no engine plugged in
	SendErrors uint64 // frames a link refused (backpressure, down)
	LocalDrops uint64 // frames to self dropped because the local queue was full
	Held       uint64 // frames that waited for room on their outgoing link
	HeldDrops  uint64 // frames dropped after waiting HoldBound
	// RoutingDrops counts routing frames dropped because a port's routing
	// backlog was full.
	RoutingDrops uint64
	// OwnQueued counts this node's frames that waited for room on their
	// link (the port's own backlog); OwnDrops those dropped because that
	// backlog was full.
	OwnQueued, OwnDrops uint64
	Echoes              uint64 // echo requests answered
	// ClockReports counts clock reports received (dropped when the clock
	// does not run).
	ClockReports uint64
	// NeighboursRefused counts frames dropped on a port whose neighbour
	// Config.AdmitNeighbour refused, its hellos included.
	NeighboursRefused uint64
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	EventLinkUp EventKind = iota + 1
	EventLinkDown
	EventNeighbour // routing learned the node on a port
	EventRoutes    // the routing table changed
)

// Event is a state change the driver may publish (dpuctl monitor).
type Event struct {
	At        time.Duration
	Kind      EventKind
	Port      noc.PortID
	Neighbour noc.NodeID
	Reason    string
}

// New returns a core with no ports.
func New(cfg Config, now time.Duration) (*Core, error) {
	if cfg.Self == noc.BroadcastNode {
		return nil, fmt.Errorf("node: self id %v is reserved", cfg.Self)
	}
	if cfg.MaxHops == 0 {
		cfg.MaxHops = 64
	}
	if cfg.HoldBound == 0 {
		cfg.HoldBound = time.Second
	}
	c := &Core{cfg: cfg, now: now, enc: make([]byte, 0, noc.HeaderLen+noc.MaxPayload)}
	c.rng = rand.New(rand.NewPCG(cfg.Seed^cfg.Boot, cfg.Seed^0x9e3779b97f4a7c15))
	rcfg := cfg.Route
	if rcfg.Incarnation == 0 {
		rcfg.Incarnation = c.rng.Uint32() | 1
	}
	rt, err := route.New(cfg.Self, rcfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	c.rt, c.rtDirty = rt, true
	if cfg.Link.ClockStamps {
		cc := cfg.Clock
		cc.Self = cfg.Self
		if c.clk, err = clock.New(cc, c.clockTime(now)); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	return c, nil
}

// AddPort adds port p (ids are dense: p must equal the number of ports
// added so far) with the given name and datagram MTU.
func (c *Core) AddPort(now time.Duration, p noc.PortID, name string, mtu int) error {
	if int(p) != len(c.ports) {
		return fmt.Errorf("%w: port %d added out of order (next is %d)", ErrPortUp, p, len(c.ports))
	}
	lc := c.cfg.Link
	lc.MTU = mtu
	lc.Session = c.rng.Uint64() | 1
	ep, err := link.NewEndpoint(lc, now)
	if err != nil {
		return fmt.Errorf("node: port %s: %w", name, err)
	}
	c.ports = append(c.ports, &port{name: name, ep: ep})
	return nil
}

// Self is this node's id.
func (c *Core) Self() noc.NodeID { return c.cfg.Self }

// NumPorts is the number of ports added.
func (c *Core) NumPorts() int { return len(c.ports) }

// Input hands the core one datagram that arrived on port p.
func (c *Core) Input(now time.Duration, p noc.PortID, datagram []byte) error {
	c.now = now
	c.takeHandler()
	pt, err := c.port(p)
	if err != nil {
		return err
	}
	pt.lastRx = now
	ierr := pt.ep.Input(now, datagram)
	c.linkEvents(p, pt)
	c.clockSamples(p, pt)
	c.release() // the input may have acked room for held frames
	c.drain(p, pt)
	c.flushRouting()
	c.drainLocal()
	if ierr != nil {
		return fmt.Errorf("node: port %s: %w", pt.name, ierr)
	}
	return nil
}

// Output fills buf with the next datagram to write to port p.
func (c *Core) Output(now time.Duration, p noc.PortID, buf []byte) (int, bool) {
	c.takeHandler()
	if int(p) >= len(c.ports) {
		return 0, false
	}
	return c.ports[p].ep.Output(now, buf)
}

// Tick runs every timer that is due: links, routing, the engine.
func (c *Core) Tick(now time.Duration) {
	c.now = now
	c.takeHandler()
	for i, pt := range c.ports {
		pt.ep.Tick(now)
		c.linkEvents(noc.PortID(i), pt)
	}
	c.release()
	for i, pt := range c.ports {
		if pt.held != nil && now-pt.heldSince >= c.cfg.HoldBound {
			pt.held = nil
			c.stats.HeldDrops++
		}
		c.drain(noc.PortID(i), pt)
	}
	c.rt.Tick(now)
	c.rtDirty = true
	c.flushRouting()
	if c.clk != nil {
		c.clk.Tick(c.clockTime(now))
		c.flushClock()
	}
	if c.cfg.Handler != nil {
		c.cfg.Handler.Tick(now, c)
		c.takeHandler()
	}
	c.drainLocal()
}

// NextDeadline is the earliest time Tick must run.
func (c *Core) NextDeadline() time.Duration {
	c.takeHandler()
	d := time.Duration(1<<63 - 1)
	if c.rtDirty {
		if at, ok := c.rt.NextDeadline(); ok {
			d = at
		}
	} else {
		d = c.rtNext
	}
	if c.clk != nil {
		d = min(d, c.clk.NextDeadline()-c.cfg.Link.ClockEpoch)
	}
	for _, pt := range c.ports {
		d = min(d, pt.ep.NextDeadline())
		if pt.held != nil {
			d = min(d, pt.heldSince+c.cfg.HoldBound)
		}
	}
	if c.cfg.Handler != nil {
		if h, ok := c.cfg.Handler.NextDeadline(); ok {
			d = min(d, h)
		}
	}
	return d
}

// drain dispatches the messages port p has received, until one has to be
// held.
func (c *Core) drain(p noc.PortID, pt *port) {
	for pt.held == nil {
		msg, ok := pt.ep.Receive()
		if !ok {
			return
		}
		c.dispatch(p, msg)
	}
}

// sendBacklog sends the frames of a port's backlog q in order while its
// link takes them; it reports whether the link refused one for another
// reason than back-pressure (it went down).
func (c *Core) sendBacklog(pt *port, q *[][]byte) (down bool) {
	for len(*q) > 0 {
		if err := pt.ep.Send(c.now, (*q)[0]); err != nil {
			return !errors.Is(err, link.ErrBackpressure)
		}
		c.stats.Originated++
		(*q)[0] = nil
		*q = (*q)[1:]
	}
	return false
}

// dropOwn empties the port's own backlog (its link went down), counting
// the frames in SendErrors.
func (pt *port) dropOwn(st *Stats) {
	st.SendErrors += uint64(len(pt.own))
	clear(pt.own)
	pt.own = pt.own[:0]
}

// release sends the held frames whose outgoing link has room again and
// resumes taking input from their ports.
func (c *Core) release() {
	if !c.waiting {
		return
	}
	for _, pt := range c.ports {
		if c.sendBacklog(pt, &pt.own) {
			pt.dropOwn(&c.stats) // the protocol recovers what the link carried
		}
		if c.sendBacklog(pt, &pt.routing) {
			pt.routing = nil // routing resyncs on up
		}
	}
	for i, pt := range c.ports {
		if pt.held == nil {
			continue
		}
		out := c.ports[pt.heldOut]
		if err := out.ep.Send(c.now, pt.held); err != nil {
			if errors.Is(err, link.ErrBackpressure) {
				continue
			}
			c.stats.SendErrors++ // the link went down: drop it
		} else {
			c.stats.Forwarded++
		}
		pt.held = nil
		c.drain(noc.PortID(i), pt)
	}
	c.waiting = false
	for _, pt := range c.ports {
		if pt.held != nil || len(pt.routing) > 0 || len(pt.own) > 0 {
			c.waiting = true
		}
	}
}

// dispatch decides what to do with one message received on port in.
func (c *Core) dispatch(in noc.PortID, msg []byte) {
	f := &c.frame
	if err := f.Decode(msg); err != nil {
		c.stats.Malformed++
		return
	}
	if c.cfg.AdmitNeighbour != nil && int(in) < len(c.ports) {
		pt := c.ports[in]
		if f.IsRouting() && f.Op == route.OpHello {
			pt.refused = !c.cfg.AdmitNeighbour(in, f.Src)
		}
		if pt.refused {
			c.stats.NeighboursRefused++
			return
		}
	}
	switch {
	case f.IsRouting():
		c.stats.Routing++
		c.rtDirty = true
		_ = c.rt.HandleFrame(c.now, in, f)
		c.learnNeighbour(in)
	case f.IsClock():
		c.stats.ClockReports++
		if c.clk != nil {
			_ = c.clk.HandleReport(c.clockTime(c.now), in, f.Payload) // counted by the clock
			c.flushClock()
		}
	case f.IsEcho() && f.Flags&noc.FlagReply == 0 && f.Dst == c.cfg.Self:
		c.echo(msg, f)
	case f.Flags&noc.FlagPath != 0 || f.Dst == c.cfg.Self || f.Dst == noc.BroadcastNode:
		c.deliver(in, f)
	default:
		c.forward(in, msg, f)
	}
}

func (c *Core) deliver(in noc.PortID, f *noc.Frame) {
	if c.cfg.Handler == nil {
		c.stats.NoHandler++
		return
	}
	c.stats.Delivered++
	c.cfg.Handler.HandleFrame(c.now, in, f, c)
	c.takeHandler()
}

// takeHandler moves the frames the handler emitted onto their links: by
// port, or by the routing table toward their destination. A driver that
// calls the handler directly (a host request) leaves frames that the
// core's next Input, Output, Tick or NextDeadline takes.
func (c *Core) takeHandler() {
	if c.cfg.Handler == nil {
		return
	}
	c.hout = c.cfg.Handler.TakeOutgoing(c.hout[:0])
	for i := range c.hout {
		o := &c.hout[i]
		if o.Port == noc.NoPort {
			_ = c.SendNode(&o.Frame) // refusals are counted in SendErrors
		} else {
			_ = c.SendPort(o.Port, &o.Frame)
		}
		o.Frame = noc.Frame{}
	}
}

// forward sends a frame received on port in toward its Dst, bumping its hop
// count in place: no decode beyond the header, no allocation. When the
// outgoing link has no room the frame is held (copied once) and port in
// stops being drained until it leaves; the back-pressure travels upstream
// hop by hop through the links' credits. A frame held longer than
// HoldBound is dropped, which bounds the wait and breaks credit cycles.
func (c *Core) forward(in noc.PortID, msg []byte, f *noc.Frame) {
	if f.Hops >= c.cfg.MaxHops {
		c.stats.HopLimit++
		return
	}
	p, _, ok := c.rt.NextHop(f.Dst)
	if !ok || int(p) >= len(c.ports) {
		c.stats.NoRoute++
		return
	}
	msg[12] = f.Hops + 1 // header offset of the hop count
	err := c.ports[p].ep.Send(c.now, msg)
	switch {
	case err == nil:
		c.stats.Forwarded++
	case errors.Is(err, link.ErrBackpressure) && int(in) < len(c.ports):
		pt := c.ports[in]
		pt.held = append(make([]byte, 0, len(msg)), msg...)
		pt.heldOut, pt.heldSince = p, c.now
		c.waiting = true
		c.stats.Held++
	default:
		c.stats.SendErrors++
	}
}

// echo answers an echo request in place: swap source and destination, set
// FlagReply, reset the hop count, send it back by the routing table.
func (c *Core) echo(msg []byte, f *noc.Frame) {
	p, _, ok := c.rt.NextHop(f.Src)
	if !ok || int(p) >= len(c.ports) {
		c.stats.NoRoute++
		return
	}
	f.Dst, f.Src = f.Src, c.cfg.Self
	f.Flags |= noc.FlagReply
	f.Hops = 0
	f.PutHeader(msg, len(f.Payload))
	if err := c.ports[p].ep.Send(c.now, msg); err != nil {
		c.stats.SendErrors++
		return
	}
	c.stats.Echoes++
}

// linkEvents turns the endpoint's up/down transitions into routing input.
func (c *Core) linkEvents(p noc.PortID, pt *port) {
	for {
		ev, ok := pt.ep.PollEvent()
		if !ok {
			return
		}
		if ev.Up {
			pt.up = true
			c.ev = append(c.ev, Event{At: ev.At, Kind: EventLinkUp, Port: p, Reason: ev.Reason.String()})
			c.rtDirty = true
			_ = c.rt.PortUp(c.now, p) // p was added: cannot fail
		} else {
			pt.up = false
			pt.dropOwn(&c.stats) // for the session that ended: the protocol recovers what it carried
			was, known := pt.neighbour, pt.known
			pt.known, pt.refused = false, false
			c.ev = append(c.ev, Event{At: ev.At, Kind: EventLinkDown, Port: p, Neighbour: was, Reason: ev.Reason.String()})
			c.rtDirty = true
			_ = c.rt.PortDown(c.now, p)
			if c.clk != nil {
				c.clk.PortDown(p)
			}
			if known && c.cfg.Handler != nil {
				c.cfg.Handler.PortState(c.now, p, false, was, c)
				c.takeHandler()
			}
		}
	}
}

// learnNeighbour tells the engine when routing learned who is on port p.
func (c *Core) learnNeighbour(p noc.PortID) {
	if int(p) >= len(c.ports) {
		return
	}
	pt := c.ports[p]
	n, ok := c.rt.Neighbour(p)
	if !ok || !pt.up || (pt.known && pt.neighbour == n) {
		return
	}
	pt.neighbour, pt.known = n, true
	c.ev = append(c.ev, Event{At: c.now, Kind: EventNeighbour, Port: p, Neighbour: n})
	if c.cfg.Handler != nil {
		c.cfg.Handler.PortState(c.now, p, true, n, c)
		c.takeHandler()
	}
}

// flushRouting sends what routing queued, and notes its next deadline.
func (c *Core) flushRouting() {
	if !c.rtDirty {
		return
	}
	c.rt.Outputs(func(p noc.PortID, f *noc.Frame) {
		if int(p) >= len(c.ports) {
			return
		}
		pt := c.ports[p]
		if len(pt.routing) == 0 {
			err := c.SendPort(p, f)
			if err == nil || !errors.Is(err, link.ErrBackpressure) {
				return
			}
		}
		if len(pt.routing) >= routingBacklogMax {
			pt.routing = pt.routing[1:]
			c.stats.RoutingDrops++
		}
		if f.Version == 0 {
			f.Version = noc.FrameVersion
		}
		b, err := f.AppendTo(nil)
		if err == nil {
			pt.routing = append(pt.routing, b)
			c.waiting = true
		}
	})
	if v := c.rt.Version(); v != c.rtVer {
		c.rtVer = v
		c.ev = append(c.ev, Event{At: c.now, Kind: EventRoutes})
	}
	c.rtNext = time.Duration(1<<63 - 1)
	if at, ok := c.rt.NextDeadline(); ok {
		c.rtNext = at
	}
	c.rtDirty = false
}

// drainLocal delivers frames this node sent to itself.
func (c *Core) drainLocal() {
	for i := 0; i < len(c.local); i++ {
		f := &c.frame
		if err := f.Decode(c.local[i]); err != nil {
			c.stats.Malformed++
			continue
		}
		c.deliver(noc.NoPort, f)
	}
	c.local = c.local[:0]
}

// SendPort implements Sender.
func (c *Core) SendPort(p noc.PortID, f *noc.Frame) error {
	pt, err := c.port(p)
	if err != nil {
		return err
	}
	if f.Version == 0 {
		f.Version = noc.FrameVersion
	}
	b, err := f.AppendTo(c.enc[:0])
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	c.enc = b[:0]
	if len(pt.own) == 0 {
		err := pt.ep.Send(c.now, b)
		if err == nil {
			c.stats.Originated++
			return nil
		}
		if !errors.Is(err, link.ErrBackpressure) {
			c.stats.SendErrors++
			return fmt.Errorf("node: port %s: %w", pt.name, err)
		}
	}
	if len(pt.own) >= ownBacklogMax {
		c.stats.SendErrors++
		c.stats.OwnDrops++
		return fmt.Errorf("node: port %s: %w (and %d frames waiting)", pt.name, link.ErrBackpressure, len(pt.own))
	}
	pt.own = append(pt.own, append([]byte(nil), b...))
	c.stats.OwnQueued++
	c.waiting = true
	return nil
}

// SendNode implements Sender.
func (c *Core) SendNode(f *noc.Frame) error {
	if f.Dst == c.cfg.Self {
		if len(c.local) >= localQueueMax {
			c.stats.LocalDrops++
			return fmt.Errorf("node: local queue full")
		}
		if f.Version == 0 {
			f.Version = noc.FrameVersion
		}
		b, err := f.AppendTo(nil)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		c.local = append(c.local, b)
		return nil
	}
	p, _, ok := c.rt.NextHop(f.Dst)
	if !ok {
		c.stats.NoRoute++
		return fmt.Errorf("%w %v", ErrNoRoute, f.Dst)
	}
	return c.SendPort(p, f)
}

// RoutesVersion is a number that changes whenever the routing table does
// (engines re-send what a lost link may have dropped).
func (c *Core) RoutesVersion() uint64 { return c.rt.Version() }

// NextHop implements Sender.
func (c *Core) NextHop(dst noc.NodeID) (noc.PortID, int, bool) {
	return c.rt.NextHop(dst)
}

// Neighbour implements Sender.
func (c *Core) Neighbour(p noc.PortID) (noc.NodeID, bool) {
	if int(p) >= len(c.ports) {
		return 0, false
	}
	pt := c.ports[p]
	return pt.neighbour, pt.up && pt.known
}

func (c *Core) port(p noc.PortID) (*port, error) {
	if int(p) >= len(c.ports) {
		return nil, fmt.Errorf("%w %d", ErrNoPort, p)
	}
	return c.ports[p], nil
}

// TakeEvents returns the events since the last call and forgets them.
func (c *Core) TakeEvents() []Event {
	ev := c.ev
	c.ev = nil
	return ev
}

// Stats returns the core's frame counters.
func (c *Core) Stats() Stats { return c.stats }

// Routing is the core's routing state, for snapshots.
func (c *Core) Routing() *route.State { return c.rt }

// PortInfo is a snapshot of one port.
type PortInfo struct {
	ID        noc.PortID
	Name      string
	Up        bool
	Neighbour noc.NodeID
	Known     bool
	MTU       int
	Session   uint64
	LastHeard time.Duration // since the last datagram arrived
	Link      link.Stats
}

// Ports returns a snapshot of every port.
func (c *Core) Ports() []PortInfo {
	out := make([]PortInfo, len(c.ports))
	for i, pt := range c.ports {
		s, _ := pt.ep.Session()
		out[i] = PortInfo{ID: noc.PortID(i), Name: pt.name, Up: pt.up, Neighbour: pt.neighbour, Known: pt.known,
			MTU: pt.ep.Config().MTU, Session: s, LastHeard: c.now - pt.lastRx, Link: pt.ep.Stats()}
	}
	return out
}
