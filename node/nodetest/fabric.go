package nodetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
)

// Config shapes a Fabric.
type Config struct {
	Seed uint64
	MTU  int // datagram MTU of every link (default 1500)
	// Delay and Jitter: every datagram takes Delay plus a uniform share of
	// Jitter to cross a wire.
	Delay, Jitter time.Duration
	// Drop and Duplicate are per-datagram probabilities.
	Drop, Duplicate float64
	// Abstract gives every port an AbstractLink over abstract wires (see
	// Wiring.Abstract) instead of a link endpoint; Drop and Duplicate must
	// be zero.
	Abstract bool
	// Link is the link template (default link.DefaultConfig()).
	Link *link.Config
	// Handler, if set, makes the engine of each node.
	Handler func(id noc.NodeID) node.Handler
}

// Fabric is a set of cores joined by virtual wires.
type Fabric struct {
	cfg   Config
	rng   *rand.Rand
	now   time.Duration
	Cores []*node.Core
	wires *Wires
	buf   []byte
	// Datagrams counts datagrams (frames, on abstract wires) written to
	// the wires.
	Datagrams uint64
}

// New builds one core per node of g with g's wiring.
func New(g *topo.Graph, cfg Config) (*Fabric, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Delay == 0 {
		cfg.Delay = 10 * time.Microsecond
	}
	f := &Fabric{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6e6f64657465)), buf: make([]byte, max(cfg.MTU, abstractMTU))}
	w, err := NewWires(g, Wiring{Delay: cfg.Delay, Jitter: cfg.Jitter, Drop: cfg.Drop, Duplicate: cfg.Duplicate, Abstract: cfg.Abstract}, f.rng)
	if err != nil {
		return nil, err
	}
	f.wires = w
	w.ShareClock(&f.now)
	for i := 0; i < g.N(); i++ {
		c, err := f.newCore(noc.NodeID(i), g.Ports(noc.NodeID(i)))
		if err != nil {
			return nil, err
		}
		f.Cores = append(f.Cores, c)
	}
	return f, nil
}

func (f *Fabric) newCore(id noc.NodeID, ports int) (*node.Core, error) {
	lc := link.DefaultConfig()
	if f.cfg.Link != nil {
		lc = *f.cfg.Link
	}
	var h node.Handler
	if f.cfg.Handler != nil {
		h = f.cfg.Handler(id)
	}
	c, err := node.New(node.Config{Self: id, Handler: h, Link: lc, Seed: f.rng.Uint64()}, f.now)
	if err != nil {
		return nil, err
	}
	if err := AddPorts(c, f.wires, f.now, ports, f.cfg.MTU); err != nil {
		return nil, err
	}
	return c, nil
}

// AddPorts adds ports 0..ports-1 to core c: link endpoints with the given
// datagram MTU, or the wires' abstract links.
func AddPorts(c *node.Core, w *Wires, now time.Duration, ports, mtu int) error {
	for p := 0; p < ports; p++ {
		name := fmt.Sprintf("p%d", p)
		var err error
		if w.Abstract() {
			err = c.AddLink(noc.PortID(p), name, w.Link(End{c.Self(), noc.PortID(p)}))
		} else {
			err = c.AddPort(now, noc.PortID(p), name, mtu)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Now is the fabric's virtual time.
func (f *Fabric) Now() time.Duration { return f.now }

// Wires are the fabric's wires.
func (f *Fabric) Wires() *Wires { return f.wires }

// SetLink cuts (up=false) or restores the wire between a and b.
func (f *Fabric) SetLink(a, b noc.NodeID, up bool) error {
	i, ok := f.wires.Wire(a, b)
	if !ok {
		return fmt.Errorf("nodetest: no link %v-%v", a, b)
	}
	f.wires.SetWire(f.now, i, up)
	return nil
}

// Kill stops node id: it sends and receives nothing until Restart.
func (f *Fabric) Kill(id noc.NodeID) { f.wires.Kill(f.now, id) }

// Restart replaces node id with a fresh core (a new incarnation).
func (f *Fabric) Restart(id noc.NodeID) error {
	f.wires.Revive(f.now, id)
	c, err := f.newCore(id, f.Cores[id].NumPorts())
	if err != nil {
		return err
	}
	f.Cores[id] = c
	return nil
}

// Run advances virtual time by d, delivering datagrams and running timers.
func (f *Fabric) Run(d time.Duration) {
	f.RunUntil(f.now+d, nil)
}

// RunUntil advances virtual time until limit or until done returns true
// (checked after every step); it reports whether done became true.
func (f *Fabric) RunUntil(limit time.Duration, done func() bool) bool {
	for {
		f.flushAll()
		if done != nil && done() {
			return true
		}
		next := limit
		for i, c := range f.Cores {
			if !f.wires.Down(noc.NodeID(i)) {
				next = min(next, c.NextDeadline())
			}
		}
		at, inFlight := f.wires.Next()
		if inFlight && at < next {
			next = at
		}
		if next >= limit && (!inFlight || at >= limit) {
			f.now = limit
			return done != nil && done()
		}
		f.now = max(f.now, next)
		for {
			d, ok := f.wires.Pop(f.now)
			if !ok {
				break
			}
			_ = f.Cores[d.To.Node].Input(f.now, d.To.Port, d.Data)
		}
		for i, c := range f.Cores {
			if !f.wires.Down(noc.NodeID(i)) && c.NextDeadline() <= f.now {
				c.Tick(f.now)
			}
		}
	}
}

// Next is the virtual time of the fabric's next event: a datagram's
// arrival or a live core's deadline.
func (f *Fabric) Next() time.Duration {
	next := time.Duration(1<<63 - 1)
	for i, c := range f.Cores {
		if !f.wires.Down(noc.NodeID(i)) {
			next = min(next, c.NextDeadline())
		}
	}
	if at, inFlight := f.wires.Next(); inFlight {
		next = min(next, at)
	}
	return next
}

// flushAll moves every core's output datagrams onto the wires.
func (f *Fabric) flushAll() {
	buf := f.buf
	if !f.cfg.Abstract {
		buf = buf[:f.cfg.MTU]
	}
	for i, c := range f.Cores {
		id := noc.NodeID(i)
		for p := 0; p < c.NumPorts(); p++ {
			from := End{id, noc.PortID(p)}
			for {
				n, ok := c.Output(f.now, from.Port, buf)
				if !ok {
					break
				}
				f.wires.Put(f.now, from, buf[:n])
			}
		}
	}
	f.Datagrams = f.wires.Sent // abstract links put their frames on at once
}

// Converged reports whether every live core routes to every other live
// core.
func (f *Fabric) Converged() bool {
	live := 0
	for i := range f.Cores {
		if !f.wires.Down(noc.NodeID(i)) {
			live++
		}
	}
	for i, c := range f.Cores {
		if f.wires.Down(noc.NodeID(i)) {
			continue
		}
		n := 0
		for _, r := range c.Routing().Routes() {
			if r.Dst != c.Self() && !f.wires.Down(r.Dst) {
				n++
			} else if r.Dst != c.Self() {
				return false // still routes to a dead node
			}
		}
		if n != live-1 {
			return false
		}
	}
	return true
}
