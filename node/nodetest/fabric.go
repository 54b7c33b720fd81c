package nodetest

import (
	"container/heap"
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
	wires map[end]end // port end -> far end
	cut   map[end]bool
	down  map[noc.NodeID]bool
	q     events
	seq   uint64
	buf   []byte
	// Datagrams counts datagrams put on wires.
	Datagrams uint64
}

type end struct {
	node noc.NodeID
	port noc.PortID
}

type event struct {
	at   time.Duration
	seq  uint64
	to   end
	data []byte
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// New builds one core per node of g with g's wiring.
func New(g *topo.Graph, cfg Config) (*Fabric, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Delay == 0 {
		cfg.Delay = 10 * time.Microsecond
	}
	f := &Fabric{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6e6f64657465)), wires: map[end]end{},
		cut: map[end]bool{}, down: map[noc.NodeID]bool{}, buf: make([]byte, 1<<16)}
	for i := 0; i < g.N(); i++ {
		c, err := f.newCore(noc.NodeID(i), g.Ports(noc.NodeID(i)))
		if err != nil {
			return nil, err
		}
		f.Cores = append(f.Cores, c)
	}
	for _, l := range g.Links() {
		a, b := end{l.A, l.PortA}, end{l.B, l.PortB}
		f.wires[a], f.wires[b] = b, a
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
	for p := 0; p < ports; p++ {
		if err := c.AddPort(f.now, noc.PortID(p), fmt.Sprintf("p%d", p), f.cfg.MTU); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Now is the fabric's virtual time.
func (f *Fabric) Now() time.Duration { return f.now }

// SetLink cuts (up=false) or restores the wire between a and b.
func (f *Fabric) SetLink(a, b noc.NodeID, up bool) error {
	for e, far := range f.wires {
		if e.node == a && far.node == b {
			f.cut[e], f.cut[far] = !up, !up
			return nil
		}
	}
	return fmt.Errorf("nodetest: no link %v-%v", a, b)
}

// Kill stops node id: it sends and receives nothing until Restart.
func (f *Fabric) Kill(id noc.NodeID) { f.down[id] = true }

// Restart replaces node id with a fresh core (a new incarnation).
func (f *Fabric) Restart(id noc.NodeID) error {
	c, err := f.newCore(id, f.Cores[id].NumPorts())
	if err != nil {
		return err
	}
	f.Cores[id] = c
	delete(f.down, id)
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
			if !f.down[noc.NodeID(i)] {
				next = min(next, c.NextDeadline())
			}
		}
		if len(f.q) > 0 && f.q[0].at < next {
			next = f.q[0].at
		}
		if next >= limit && (len(f.q) == 0 || f.q[0].at >= limit) {
			f.now = limit
			return done != nil && done()
		}
		f.now = max(f.now, next)
		for len(f.q) > 0 && f.q[0].at <= f.now {
			ev := heap.Pop(&f.q).(event)
			if f.down[ev.to.node] {
				continue
			}
			_ = f.Cores[ev.to.node].Input(f.now, ev.to.port, ev.data)
		}
		for i, c := range f.Cores {
			if !f.down[noc.NodeID(i)] && c.NextDeadline() <= f.now {
				c.Tick(f.now)
			}
		}
	}
}

// flushAll moves every core's output datagrams onto the wires.
func (f *Fabric) flushAll() {
	for i, c := range f.Cores {
		id := noc.NodeID(i)
		for p := 0; p < c.NumPorts(); p++ {
			from := end{id, noc.PortID(p)}
			for {
				n, ok := c.Output(f.now, from.port, f.buf[:f.cfg.MTU])
				if !ok {
					break
				}
				if f.down[id] {
					continue
				}
				f.put(from, f.buf[:n])
			}
		}
	}
}

func (f *Fabric) put(from end, b []byte) {
	to, ok := f.wires[from]
	if !ok || f.cut[from] {
		return
	}
	if f.cfg.Drop > 0 && f.rng.Float64() < f.cfg.Drop {
		return
	}
	copies := 1
	if f.cfg.Duplicate > 0 && f.rng.Float64() < f.cfg.Duplicate {
		copies = 2
	}
	for range copies {
		at := f.now + f.cfg.Delay
		if f.cfg.Jitter > 0 {
			at += time.Duration(f.rng.Int64N(int64(f.cfg.Jitter)))
		}
		f.seq++
		f.Datagrams++
		heap.Push(&f.q, event{at: at, seq: f.seq, to: to, data: append([]byte(nil), b...)})
	}
}

// Converged reports whether every live core routes to every other live
// core.
func (f *Fabric) Converged() bool {
	live := 0
	for i := range f.Cores {
		if !f.down[noc.NodeID(i)] {
			live++
		}
	}
	for i, c := range f.Cores {
		if f.down[noc.NodeID(i)] {
			continue
		}
		n := 0
		for _, r := range c.Routing().Routes() {
			if r.Dst != c.Self() && !f.down[r.Dst] {
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
