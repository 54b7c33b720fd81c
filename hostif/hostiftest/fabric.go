package hostiftest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// Config shapes a Fabric. The zero value is eight nodes with the core's
// defaults.
type Config struct {
	// Nodes is the number of nodes, machines 0 to Nodes-1 (default 8),
	// wired as a full mesh.
	Nodes int
	// Pages is every node's page capacity (default coherence.DefaultPages).
	Pages int
	// PinBound bounds how long a lock may stay pinned before the core
	// revokes it (default 5 s, the agent's).
	PinBound time.Duration
	// Replicas is the number of copies of every page (default 1: none
	// beyond the owner's).
	Replicas int
	// RequestTimeout bounds a request that names no Timeout, and the
	// core's own requests (default 2 s, the agent's).
	RequestTimeout time.Duration
}

// Fabric is a set of real node cores (node.Core with the coherence core
// and its host sessions, as the agent runs them) joined by nodetest's
// virtual wires, each with the host package's Backend in front of it. One
// mutex guards the whole fabric; a driver goroutine runs it on wall-clock
// time (its virtual time follows the wall clock, and runs ahead of it by a
// few microseconds to carry a step's frames across the fabric at once).
// Two servers in front of two Nodes of one Fabric are two hosts sharing
// memory.
type Fabric struct {
	cfg   Config
	mu    sync.Mutex
	nf    *nodetest.Fabric
	nodes []*Node
	start time.Time // wall-clock time of virtual time zero

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Node is one machine's Backend on a Fabric: the host package's Backend
// over the node's core, with the driver as its host.Stepper.
type Node struct {
	*host.Backend
	f     *Fabric
	id    noc.NodeID
	hosts *coherence.Hosts
	calls atomic.Int64
}

var (
	_ hostif.Backend  = (*Node)(nil)
	_ hostif.Pipeline = (*Node)(nil)
)

// settle is how far a step runs the fabric's virtual time past the wall
// clock to carry its frames to their destinations (wires take a
// nanosecond, so a chain of a few thousand hops completes within it).
const settle = 5 * time.Microsecond

// NewFabric returns a fabric of eight nodes with the core's defaults; its
// routes have converged. It runs until Close (tests: Cleanup).
func NewFabric() *Fabric {
	f, err := New(Config{})
	if err != nil {
		panic(fmt.Sprintf("hostiftest: %v", err))
	}
	return f
}

// New returns a fabric shaped by cfg, its routes converged.
func New(cfg Config) (*Fabric, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 8
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 2 * time.Second // the agent's default
	}
	if cfg.PinBound <= 0 {
		cfg.PinBound = 5 * time.Second // the agent's default
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	f := &Fabric{cfg: cfg, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	g := topo.New(cfg.Nodes)
	for a := range cfg.Nodes {
		for b := a + 1; b < cfg.Nodes; b++ {
			if _, err := g.Connect(noc.NodeID(a), noc.NodeID(b)); err != nil {
				return nil, fmt.Errorf("hostiftest: %w", err)
			}
		}
	}
	lc := link.DefaultConfig()
	// a wire that is cut (Partition) loses its datagrams: the link keeps
	// resending, and its peer is not declared dead while a test looks
	lc.DeadInterval = time.Minute
	f.nodes = make([]*Node, cfg.Nodes)
	var herr error
	nf, err := nodetest.New(g, nodetest.Config{Seed: rand.Uint64(), Delay: time.Nanosecond, MTU: 9000, Link: &lc,
		Handler: func(id noc.NodeID) node.Handler {
			n, err := f.newNode(id)
			if err != nil {
				herr = err
				return nil
			}
			return n.hosts
		}})
	if err == nil {
		err = herr
	}
	if err != nil {
		return nil, fmt.Errorf("hostiftest: %w", err)
	}
	f.nf = nf
	if !nf.RunUntil(nf.Now()+time.Minute, nf.Converged) {
		return nil, fmt.Errorf("hostiftest: the fabric's routes did not converge")
	}
	f.start = time.Now().Add(-nf.Now())
	go f.drive()
	return f, nil
}

func (f *Fabric) newNode(id noc.NodeID) (*Node, error) {
	n := &Node{f: f, id: id}
	n.Backend = host.New(host.Config{Machine: gva.MachineIndex(id)})
	h, err := coherence.NewHosts(coherence.Config{Self: id, Incarnation: rand.Uint64() | 1, AllocEpoch: 1, Pages: f.cfg.Pages,
		Seed: rand.Uint64(), RequestTimeout: f.cfg.RequestTimeout, PinBound: f.cfg.PinBound, Replicas: f.cfg.Replicas,
		FabricNodes: f.cfg.Nodes, Arbiter: arbiter.Config{MaxPin: f.cfg.PinBound}, TimerGranularity: time.Microsecond}, n.Backend)
	if err != nil {
		return nil, err
	}
	n.hosts = h
	n.Backend.Bind(h, n)
	f.nodes[id] = n
	return n, nil
}

// Node returns the Backend of machine m.
func (f *Fabric) Node(m gva.MachineIndex) *Node {
	if int(m) >= len(f.nodes) {
		panic(fmt.Sprintf("hostiftest: machine %d: the fabric has %d nodes", m, len(f.nodes)))
	}
	return f.nodes[m]
}

// Close stops the fabric's driver. Requests in flight complete no more.
func (f *Fabric) Close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

// now is the fabric's virtual time: the wall clock, or a little past it
// (under mu).
func (f *Fabric) now() time.Duration { return max(time.Since(f.start), f.nf.Now()) }

// deliver hands each node's completions (collect's) to its server,
// outside the fabric's lock.
func (f *Fabric) deliver(done [][]coherence.Completion) {
	for i, d := range done {
		if d != nil {
			f.nodes[i].Deliver(d)
		}
	}
}

// collect takes the pipelined completions of the steps just run, indexed
// by node (nil: none); under mu.
func (f *Fabric) collect() [][]coherence.Completion {
	var done [][]coherence.Completion
	for i, n := range f.nodes {
		if d := n.TakeDone(); d != nil {
			if done == nil {
				done = make([][]coherence.Completion, len(f.nodes))
			}
			done[i] = d
		}
	}
	return done
}

// drive runs the fabric's timers and in-flight frames on the wall clock.
func (f *Fabric) drive() {
	defer close(f.done)
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	for {
		f.mu.Lock()
		f.nf.RunUntil(f.now()+settle, nil)
		done := f.collect()
		wait := f.nf.Next() - time.Since(f.start)
		f.mu.Unlock()
		f.deliver(done)
		t.Reset(min(max(wait, 50*time.Microsecond), 10*time.Millisecond))
		select {
		case <-f.stop:
			return
		case <-f.kick:
		case <-t.C:
		}
	}
}

// Step implements host.Stepper: fn runs as one step of the node's core,
// and the fabric carries what it sent.
func (n *Node) Step(fn func(c *node.Core, now time.Duration)) {
	f := n.f
	f.mu.Lock()
	now := f.now()
	f.nf.RunUntil(now, nil)
	fn(f.nf.Cores[n.id], f.nf.Now())
	f.nf.RunUntil(f.nf.Now()+settle, nil)
	done := f.collect()
	f.mu.Unlock()
	f.deliver(done)
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Do implements hostif.Backend, counting the call.
func (n *Node) Do(ctx context.Context, c *hostif.Call) error {
	n.calls.Add(1)
	return n.Backend.Do(ctx, c)
}

// Submit implements hostif.Pipeline, counting the requests.
func (n *Node) Submit(s hostif.Session, rs []coherence.Request) {
	n.calls.Add(int64(len(rs)))
	n.Backend.Submit(s, rs)
}

// Calls returns how many requests the node's backend was handed (calls of
// Do and requests submitted).
func (n *Node) Calls() int64 { return n.calls.Load() }

// Alloc allocates pages on the node as root, in the server's session, and
// returns the first page.
func (n *Node) Alloc(ctx context.Context, pages int, attr hostif.Attr) (gva.GVA, error) {
	c, err := n.serverCall(ctx, coherence.Request{Op: coherence.HostAlloc, Pages: pages, Attr: attr})
	return c.GVA, err
}

// openServerSession opens the server's session on the node if no server
// did (a test that uses the backend without one).
func (n *Node) openServerSession(ctx context.Context) error {
	var known bool
	n.f.mu.Lock()
	known = n.hosts.Known(coherence.SessionID(hostif.ServerSession))
	n.f.mu.Unlock()
	if known {
		return nil
	}
	return n.Do(ctx, &hostif.Call{Verb: hostif.VerbOpen, Session: hostif.ServerSession})
}

// Partition cuts (true) or mends (false) every wire of machine m: what it
// sends and what is sent to it is lost meanwhile (its links resend when
// the wires are mended), as if its cables were pulled.
func (f *Fabric) Partition(m gva.MachineIndex, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for o := range f.nodes {
		if o != int(m) {
			if err := f.nf.SetLink(noc.NodeID(m), noc.NodeID(o), !cut); err != nil {
				panic(fmt.Sprintf("hostiftest: %v", err))
			}
		}
	}
}

// Refs returns how many refs the sessions of machine m hold on page.
func (f *Fabric) Refs(pg gva.GVA, m gva.MachineIndex) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	refs, _, _ := f.nodes[m].hosts.PageHeld(pg)
	return refs
}

// Acquired reports whether a session of machine m holds an acquisition of
// page.
func (f *Fabric) Acquired(pg gva.GVA, m gva.MachineIndex) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, acq, _ := f.nodes[m].hosts.PageHeld(pg)
	return acq
}

// LockedBy returns the machine a session of which holds page's lock.
func (f *Fabric) LockedBy(pg gva.GVA) (gva.MachineIndex, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range f.nodes {
		if _, _, locked := n.hosts.PageHeld(pg); locked {
			return gva.MachineIndex(i), true
		}
	}
	return 0, false
}

// ReplicaValid reports whether machine m holds a valid replica of page (a
// copy it may serve reads from without the owner).
func (f *Fabric) ReplicaValid(pg gva.GVA, m gva.MachineIndex) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	valid := false
	f.nodes[m].hosts.Engine().Pages(func(v coherence.PageView) {
		if v.Key == pg.Key() && !v.Owner && v.Valid {
			valid = true
		}
	})
	return valid
}

// Owner returns the machine that owns page.
func (f *Fabric) Owner(pg gva.GVA) (gva.MachineIndex, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range f.nodes {
		if owner, _ := n.hosts.Engine().Holding(pg.Key()); owner {
			return gva.MachineIndex(i), true
		}
	}
	return 0, false
}

// Close stops the node's fabric (every node of it).
func (n *Node) Close() { n.f.Close() }

// Start returns a fabric shaped by cfg that stops when the test ends.
func Start(tb testing.TB, cfg Config) *Fabric {
	tb.Helper()
	f, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(f.Close)
	return f
}

// Store writes data at addr through the node as root, in the server's
// session (a write no host connection of the node made).
func (n *Node) Store(ctx context.Context, addr gva.GVA, data []byte) (gva.Version, error) {
	c, err := n.serverCall(ctx, coherence.Request{Op: coherence.HostStore, GVA: addr, Data: data})
	return c.Version, err
}

// Load reads len(dst) bytes at addr through the node as root, in the
// server's session.
func (n *Node) Load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error) {
	c, err := n.serverCall(ctx, coherence.Request{Op: coherence.HostLoad, GVA: addr, Len: len(dst)})
	copy(dst, c.Data)
	return c.Version, err
}

// serverCall runs r in the server's session, opening it first if no
// server did.
func (n *Node) serverCall(ctx context.Context, r coherence.Request) (coherence.Completion, error) {
	if err := n.openServerSession(ctx); err != nil {
		return coherence.Completion{}, err
	}
	return n.Backend.Call(ctx, coherence.SessionID(hostif.ServerSession), r)
}
