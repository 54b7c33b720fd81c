package coherence

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// recordSink keeps completions and events.
type recordSink struct {
	done   map[uint64]Completion
	events []Event
}

func (s *recordSink) Complete(c Completion) {
	c.Data = append([]byte(nil), c.Data...)
	s.done[c.ID] = c
}
func (s *recordSink) Event(ev Event) { s.events = append(s.events, ev) }

// fab is a fabric of real node cores (links, routing) with one engine each.
type fab struct {
	t     *testing.T
	f     *nodetest.Fabric
	g     *topo.Graph
	eng   []*Engine
	sinks []*recordSink
	next  uint64
}

func newFab(t *testing.T, g *topo.Graph, tune func(*Config)) *fab {
	t.Helper()
	return newFabLinks(t, g, nil, tune)
}

// newFabLinks is newFab with the link template lc (nil: the default).
func newFabLinks(t *testing.T, g *topo.Graph, lc *link.Config, tune func(*Config)) *fab {
	t.Helper()
	return newFabFilter(t, g, lc, tune, nil)
}

// lossFilter is a test double between a node core and its engine: the
// frames it reports true for are lost on their way to the engine.
type lossFilter struct {
	*Engine
	lose func(self noc.NodeID, f *noc.Frame) bool
}

func (l lossFilter) HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes) {
	if l.lose(l.self, f) {
		return
	}
	l.Engine.HandleFrame(now, in, f, rt)
}

// newFabFilter is newFabLinks with the frames lose reports true for lost
// before they reach their engine (nil: none).
func newFabFilter(t *testing.T, g *topo.Graph, lc *link.Config, tune func(*Config), lose func(self noc.NodeID, f *noc.Frame) bool) *fab {
	t.Helper()
	var wrap func(*Engine) node.Handler
	if lose != nil {
		wrap = func(e *Engine) node.Handler { return lossFilter{e, lose} }
	}
	return newFabWrap(t, g, lc, tune, wrap)
}

// newFabWrap is newFabLinks with every engine behind the handler wrap
// returns (nil: none), a test double between the node core and the engine.
func newFabWrap(t *testing.T, g *topo.Graph, lc *link.Config, tune func(*Config), wrap func(*Engine) node.Handler) *fab {
	t.Helper()
	x := &fab{t: t, g: g, eng: make([]*Engine, g.N()), sinks: make([]*recordSink, g.N())}
	runs := make([]uint64, g.N()) // a restarted node is a new incarnation
	mk := func(id noc.NodeID) node.Handler {
		s := &recordSink{done: map[uint64]Completion{}}
		cfg := Config{Self: id, Incarnation: uint64(id) + 100 + 1000*runs[id], Sink: s, Pages: 64, Seed: 7}
		runs[id]++
		if tune != nil {
			tune(&cfg)
		}
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		x.eng[id], x.sinks[id] = e, s
		if wrap != nil {
			return wrap(e)
		}
		return e
	}
	f, err := nodetest.New(g, nodetest.Config{Seed: 1, Handler: mk, Link: lc})
	if err != nil {
		t.Fatal(err)
	}
	x.f = f
	if !f.RunUntil(10*time.Second, f.Converged) {
		t.Fatal("routing did not converge")
	}
	f.Run(50 * time.Millisecond)
	return x
}

func ringGraph(t *testing.T, n int) *topo.Graph {
	g, err := topo.Generate("ring", n, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func treeGraph(t *testing.T, n int) *topo.Graph {
	g, err := topo.Generate("tree", n, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func lineGraph(t *testing.T, n int) *topo.Graph {
	g, err := topo.Generate("line", n, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// do submits a request at node n and runs until it completes.
func (x *fab) do(n int, r Request) Completion {
	x.t.Helper()
	x.next++
	r.ID = x.next
	x.eng[n].Submit(x.f.Now(), r, x.f.Cores[n])
	s := x.sinks[n]
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := s.done[r.ID]; return ok })
	c, ok := s.done[r.ID]
	if !ok {
		x.t.Fatalf("node %d %v %v: no completion", n, r.Op, r.GVA)
	}
	return c
}

// submit submits without running.
func (x *fab) submit(n int, r Request) uint64 {
	x.next++
	r.ID = x.next
	x.eng[n].Submit(x.f.Now(), r, x.f.Cores[n])
	return r.ID
}

func (x *fab) result(n int, id uint64) Completion {
	x.t.Helper()
	c, ok := x.sinks[n].done[id]
	if !ok {
		x.t.Fatalf("node %d request %d: no completion", n, id)
	}
	return c
}

func (x *fab) ok(n int, r Request) Completion {
	x.t.Helper()
	c := x.do(n, r)
	if c.Err != nil {
		x.t.Fatalf("node %d %v %v: %v", n, r.Op, r.GVA, c.Err)
	}
	return c
}

func (x *fab) settle() { x.f.Run(20 * time.Millisecond) }

func (x *fab) alloc(n int) gva.GVA {
	x.t.Helper()
	return x.ok(n, Request{Op: HostAlloc}).GVA
}

func (x *fab) load(n int, g gva.GVA, size int) []byte {
	x.t.Helper()
	return x.ok(n, Request{Op: HostLoad, GVA: g, Len: size}).Data
}

func (x *fab) sent() Counters {
	var c Counters
	for _, e := range x.eng {
		s := e.Stats()
		for i := range c.Sent {
			for j := range c.Sent[i] {
				c.Sent[i][j] += s.Sent[i][j]
			}
		}
		c.UpdatesSent += s.UpdatesSent
		c.InvalidatesSent += s.InvalidatesSent
		c.Merges += s.Merges
		c.AnsweredByReplica += s.AnsweredByReplica
		c.Grafts += s.Grafts
	}
	return c
}

// branches counts the live down branches of key over all nodes (tree
// edges).
func (x *fab) branches(key gva.GVA) int {
	n := 0
	for _, e := range x.eng {
		if ent, ok := e.Entry(key); ok {
			n += ent.Down.Without(noc.LocalPort).Len()
		}
	}
	return n
}

func errno(c Completion) syscall.Errno { return c.Errno() }

func (c Completion) String() string {
	return fmt.Sprintf("{id=%d %v err=%v v=%d val=%d swapped=%v}", c.ID, c.Op, c.Err, c.Version, c.Value, c.Swapped)
}

// fastLinks is a link whose failures are found within milliseconds: a
// 12 ms dead interval, 2 ms heartbeats and a short retransmission timer.
func fastLinks() link.Config {
	lc := link.DefaultConfig()
	lc.RTO, lc.MaxRTO = 500*time.Microsecond, 8*time.Millisecond
	lc.HeartbeatInterval, lc.DeadInterval = 2*time.Millisecond, 12*time.Millisecond
	return lc
}

// fetchAdds adds 1 to the word at p n times from node's host, each
// acknowledged, and returns n.
func (x *fab) fetchAdds(node int, p gva.GVA, n int) uint64 {
	x.t.Helper()
	for range n {
		x.ok(node, Request{Op: HostFetchAdd, GVA: p, Operand: 1})
	}
	return uint64(n)
}
