package route

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// fabric runs one State per node of a topo.Graph in memory: frames are
// encoded, carried over the graph's links in order, decoded and handed to
// the neighbour's State, as the node core and reliable links would.
type fabric struct {
	t     testing.TB
	g     *topo.Graph
	cfg   Config
	ids   []noc.NodeID // node index → node id (scrambled, so that ids and indices differ)
	index map[noc.NodeID]int
	nodes []*State
	dead  []bool
	cut   map[topo.Link]bool
	now   time.Duration
	wire  []delivery
	buf   []byte
}

type delivery struct {
	to   int
	port noc.PortID
	data []byte
}

func newFabric(t testing.TB, g *topo.Graph, cfg Config, seed uint64) *fabric {
	perm := rand.New(rand.NewPCG(seed, 99)).Perm(g.N())
	ids := make([]noc.NodeID, g.N())
	for i := range ids {
		ids[i] = noc.NodeID(1000 + 3*perm[i])
	}
	return newFabricIDs(t, g, cfg, ids)
}

// newFabricIDs is newFabric with node i named ids[i].
func newFabricIDs(t testing.TB, g *topo.Graph, cfg Config, ids []noc.NodeID) *fabric {
	t.Helper()
	f := &fabric{t: t, g: g, cfg: cfg, ids: ids, index: map[noc.NodeID]int{}, cut: map[topo.Link]bool{}}
	for i, id := range ids {
		f.index[id] = i
	}
	f.dead = make([]bool, g.N())
	for i := range f.ids {
		f.nodes = append(f.nodes, f.newState(i))
	}
	for _, l := range g.Links() {
		f.linkUp(l)
	}
	return f
}

func (f *fabric) newState(i int) *State {
	s, err := New(f.ids[i], f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fabric) linkUp(l topo.Link) {
	delete(f.cut, l)
	if f.dead[l.A] || f.dead[l.B] {
		return
	}
	must(f.t, f.nodes[l.A].PortUp(f.now, l.PortA))
	must(f.t, f.nodes[l.B].PortUp(f.now, l.PortB))
}

func (f *fabric) linkDown(l topo.Link) {
	f.cut[l] = true
	if !f.dead[l.A] {
		must(f.t, f.nodes[l.A].PortDown(f.now, l.PortA))
	}
	if !f.dead[l.B] {
		must(f.t, f.nodes[l.B].PortDown(f.now, l.PortB))
	}
}

// kill stops node i: its links go down at its neighbours and its State is
// dropped.
func (f *fabric) kill(i int) {
	for p := 0; p < f.g.Ports(noc.NodeID(i)); p++ {
		if pe, ok := f.g.Peer(noc.NodeID(i), noc.PortID(p)); ok && !f.dead[pe.Node] {
			must(f.t, f.nodes[pe.Node].PortDown(f.now, pe.Port))
		}
	}
	f.dead[i] = true
	f.nodes[i] = nil
}

// restart brings node i back with a fresh State and its uncut links up.
func (f *fabric) restart(i int, cfg Config) {
	s, err := New(f.ids[i], cfg)
	must(f.t, err)
	f.nodes[i], f.dead[i] = s, false
	for p := 0; p < f.g.Ports(noc.NodeID(i)); p++ {
		pe, ok := f.g.Peer(noc.NodeID(i), noc.PortID(p))
		if !ok || f.dead[pe.Node] || f.cut[linkOf(noc.NodeID(i), noc.PortID(p), pe)] {
			continue
		}
		must(f.t, s.PortUp(f.now, noc.PortID(p)))
		must(f.t, f.nodes[pe.Node].PortUp(f.now, pe.Port))
	}
}

func linkOf(n noc.NodeID, p noc.PortID, pe topo.Peer) topo.Link {
	if n < pe.Node {
		return topo.Link{A: n, PortA: p, B: pe.Node, PortB: pe.Port}
	}
	return topo.Link{A: pe.Node, PortA: pe.Port, B: n, PortB: p}
}

// collect moves every node's queued frames onto the wire.
func (f *fabric) collect() {
	for i, s := range f.nodes {
		if s == nil {
			continue
		}
		s.Outputs(func(p noc.PortID, fr *noc.Frame) {
			pe, ok := f.g.Peer(noc.NodeID(i), p)
			if !ok || f.dead[pe.Node] || f.cut[linkOf(noc.NodeID(i), p, pe)] {
				return // no cable, or the link is down: lost
			}
			b, err := fr.AppendTo(nil)
			must(f.t, err)
			f.wire = append(f.wire, delivery{to: int(pe.Node), port: pe.Port, data: b})
		})
	}
}

// run delivers frames and ticks timers, one millisecond per round, until
// no frame is in flight and no timer is due.
func (f *fabric) run() {
	f.t.Helper()
	for round := 0; ; round++ {
		if round > 20000 {
			f.t.Fatalf("no quiescence after %d rounds", round)
		}
		f.collect()
		if len(f.wire) == 0 && !f.due() {
			return
		}
		batch := f.wire
		f.wire = nil
		for _, d := range batch {
			var fr noc.Frame
			must(f.t, fr.Decode(d.data))
			if err := f.nodes[d.to].HandleFrame(f.now, d.port, &fr); err != nil {
				f.t.Fatalf("node %v port %d: %v", f.ids[d.to], d.port, err)
			}
		}
		f.now += time.Millisecond
		f.tickDue()
	}
}

func (f *fabric) due() bool {
	for _, s := range f.nodes {
		if s == nil {
			continue
		}
		if at, ok := s.NextDeadline(); ok && at <= f.now {
			return true
		}
	}
	return false
}

func (f *fabric) tickDue() {
	for _, s := range f.nodes {
		if s == nil {
			continue
		}
		if at, ok := s.NextDeadline(); ok && at <= f.now {
			s.Tick(f.now)
		}
	}
}

// advance moves virtual time to until, ticking every node at its
// deadlines and delivering what they send.
func (f *fabric) advance(until time.Duration) {
	for {
		f.run()
		next := until
		for _, s := range f.nodes {
			if s != nil {
				if at, ok := s.NextDeadline(); ok && at < next {
					next = at
				}
			}
		}
		if next >= until {
			f.now = until
			f.tickDue()
			f.run()
			return
		}
		f.now = next
		f.tickDue()
	}
}

// live is the graph of working links.
func (f *fabric) live() *topo.Graph {
	g := f.g.Clone()
	for _, l := range f.g.Links() {
		if f.cut[l] || f.dead[l.A] || f.dead[l.B] {
			if _, err := g.Disconnect(l.A, l.PortA); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	return g
}

// check compares every live node's routing table with a breadth-first
// search on the live graph and the documented tie-break (lowest neighbour
// id, then lowest port).
func (f *fabric) check() {
	f.t.Helper()
	g := f.live()
	dist := make([][]int, g.N()) // dist[j][v]: hops from v to j
	for j := range dist {
		dist[j] = g.Distances(noc.NodeID(j))
	}
	for i, s := range f.nodes {
		if s == nil {
			continue
		}
		var want []Route
		for j := range f.nodes {
			if j == i {
				continue
			}
			d := dist[j][i]
			p, hops, ok := s.NextHop(f.ids[j])
			if f.dead[j] || d < 0 {
				if ok {
					f.t.Fatalf("node %v routes to unreachable %v via port %d", f.ids[i], f.ids[j], p)
				}
				continue
			}
			r := Route{Dst: f.ids[j], Port: noc.NoPort, NextHop: noc.BroadcastNode, Hops: d}
			for q := 0; q < g.Ports(noc.NodeID(i)); q++ {
				pe, wired := g.Peer(noc.NodeID(i), noc.PortID(q))
				if !wired || dist[j][pe.Node] != d-1 {
					continue
				}
				if id := f.ids[pe.Node]; id < r.NextHop {
					r.NextHop, r.Port = id, noc.PortID(q)
				}
			}
			if !ok || p != r.Port || hops != d {
				f.t.Fatalf("node %v to %v: NextHop = port %d, %d hops, %v; want port %d (node %v), %d hops",
					f.ids[i], f.ids[j], p, hops, ok, r.Port, r.NextHop, d)
			}
			want = append(want, r)
		}
		slices.SortFunc(want, func(a, b Route) int { return int(a.Dst) - int(b.Dst) })
		if got := s.Routes(); !slices.Equal(got, want) {
			f.t.Fatalf("node %v: Routes()\n got %v\nwant %v", f.ids[i], got, want)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testConfig keeps the timers far from the millisecond rounds of run.
var testConfig = Config{}

func TestFabricConvergesToShortestPaths(t *testing.T) {
	cases := []struct {
		kind string
		n    int
		opts topo.Options
	}{
		{"line", 2, topo.Options{}},
		{"line", 40, topo.Options{}},
		{"ring", 3, topo.Options{}},
		{"ring", 16, topo.Options{}},
		{"ring", 101, topo.Options{}},
		{"tree", 64, topo.Options{}},
		{"tree", 200, topo.Options{Ports: 4}},
		{"torus2d", 64, topo.Options{}},
		{"torus2d", 210, topo.Options{}},
		{"smallworld", 64, topo.Options{Ports: 4, Seed: 1}},
		{"smallworld", 300, topo.Options{Ports: 6, Lattice: 4, Rewire: 0.2, Seed: 2}},
		{"random-regular", 64, topo.Options{Ports: 3, Seed: 3}},
		{"random-regular", 200, topo.Options{Ports: 5, Seed: 4}},
	}
	for _, c := range cases {
		if testing.Short() && c.n > 100 {
			continue
		}
		t.Run(fmt.Sprintf("%s-%d", c.kind, c.n), func(t *testing.T) {
			g, err := topo.Generate(c.kind, c.n, c.opts)
			must(t, err)
			f := newFabric(t, g, testConfig, uint64(c.n))
			f.run()
			f.check()
			for i, s := range f.nodes {
				topo := s.Topology()
				if len(topo.Nodes) != c.n || len(topo.Links) != g.NumLinks() {
					t.Fatalf("node %v: database has %d nodes, %d links; want %d, %d", f.ids[i], len(topo.Nodes), len(topo.Links), c.n, g.NumLinks())
				}
			}
		})
	}
}

func TestFabricLinkFailureAndRestore(t *testing.T) {
	for _, c := range []struct {
		kind string
		n    int
		opts topo.Options
	}{
		{"smallworld", 60, topo.Options{Ports: 4, Seed: 5}},
		{"tree", 40, topo.Options{}}, // every cut partitions a tree
		{"torus2d", 36, topo.Options{}},
		{"random-regular", 80, topo.Options{Ports: 4, Seed: 6}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			g, err := topo.Generate(c.kind, c.n, c.opts)
			must(t, err)
			f := newFabric(t, g, testConfig, 7)
			f.run()
			f.check()
			links := g.Links()
			rng := rand.New(rand.NewPCG(8, 9))
			for trial := 0; trial < 3; trial++ {
				l := links[rng.IntN(len(links))]
				before := f.nodes[l.A].Version()
				f.linkDown(l)
				f.run()
				f.check()
				if f.nodes[l.A].Version() == before {
					t.Fatalf("cutting %v did not change %v's routes", l, f.ids[l.A])
				}
				// a second cut on top of the first
				l2 := links[rng.IntN(len(links))]
				f.linkDown(l2)
				f.run()
				f.check()
				f.linkUp(l2)
				f.linkUp(l)
				f.run()
				f.check()
			}
		})
	}
}

func TestFabricNodeFailure(t *testing.T) {
	for _, c := range []struct {
		kind   string
		n      int
		victim int
	}{
		{"ring", 20, 5},
		{"tree", 40, 1}, // an inner node: its subtree is cut off too
		{"smallworld", 80, 17},
	} {
		t.Run(c.kind, func(t *testing.T) {
			g, err := topo.Generate(c.kind, c.n, topo.Options{Seed: 10})
			must(t, err)
			f := newFabric(t, g, testConfig, 11)
			f.run()
			f.check()
			victim := f.ids[c.victim]
			f.kill(c.victim)
			f.run()
			f.check() // nobody routes to the victim or to what it cut off
			live := f.live()
			reach := live.Distances(0)
			if c.victim == 0 {
				t.Fatal("victim must not be node 0")
			}
			// After UnreachableHold the victim's LSA (and those of nodes
			// cut off with it) is gone from every database.
			f.advance(f.now + f.cfg.withDefaults().UnreachableHold + time.Second)
			f.check()
			for i, s := range f.nodes {
				if s == nil || reach[i] < 0 {
					continue
				}
				for _, n := range s.Topology().Nodes {
					j := f.index[n.ID]
					if n.ID == victim || reach[j] < 0 || !n.Reachable {
						t.Fatalf("node %v still holds %v (reachable %v)", f.ids[i], n.ID, n.Reachable)
					}
				}
			}
		})
	}
}

func TestFabricNodeRestartCatchesUp(t *testing.T) {
	g, err := topo.Generate("smallworld", 50, topo.Options{Ports: 4, Seed: 12})
	must(t, err)
	f := newFabric(t, g, testConfig, 13)
	f.run()
	// churn the victim's sequence number well above 1
	const victim = 7
	for i := 0; i < 5; i++ {
		l := topo.Link{A: victim, PortA: 0}
		pe, _ := g.Peer(victim, 0)
		l = linkOf(victim, 0, pe)
		f.linkDown(l)
		f.run()
		f.linkUp(l)
		f.run()
	}
	seqAt := func(obs int) uint32 {
		for _, n := range f.nodes[obs].Topology().Nodes {
			if n.ID == f.ids[victim] {
				return n.Seq
			}
		}
		return 0
	}
	old := seqAt(0)
	if old < 10 {
		t.Fatalf("victim's sequence only %d", old)
	}
	f.kill(victim)
	f.run()
	f.restart(victim, testConfig) // same id, sequence numbers start over
	f.run()
	f.check()
	if seq := seqAt(0); seq <= old || seq != seqAt(victim) {
		t.Fatalf("restarted node's LSA seq %d at node 0, %d at itself; before the restart %d", seq, seqAt(victim), old)
	}
	if f.nodes[victim].Stats().OwnLSACatchUps == 0 {
		t.Fatal("restarted node did not catch up on its own old LSA")
	}
}

func TestFabricSteadyState(t *testing.T) {
	g, err := topo.Generate("torus2d", 16, topo.Options{})
	must(t, err)
	f := newFabric(t, g, testConfig, 14)
	f.run()
	f.check()
	versions := make([]uint64, len(f.nodes))
	for i, s := range f.nodes {
		versions[i] = s.Version()
	}
	cfg := testConfig.withDefaults()
	f.advance(f.now + 10*cfg.MaxAge)
	f.check()
	for i, s := range f.nodes {
		st := s.Stats()
		if s.Version() != versions[i] || st.LSAsExpired != 0 || st.LSAsPurged != 0 {
			t.Fatalf("node %v: version %d→%d, stats %+v", f.ids[i], versions[i], s.Version(), st)
		}
		if st.LSAsOriginated < 40 {
			t.Fatalf("node %v refreshed only %d times in 10 max ages", f.ids[i], st.LSAsOriginated)
		}
		for _, n := range s.Topology().Nodes {
			if n.Age >= cfg.RefreshInterval+time.Second {
				t.Fatalf("node %v holds %v at age %v", f.ids[i], n.ID, n.Age)
			}
		}
	}
}

func TestFabricPartitionHealsAfterPurge(t *testing.T) {
	g, err := topo.Generate("tree", 40, topo.Options{})
	must(t, err)
	f := newFabric(t, g, testConfig, 15)
	f.run()
	pe, _ := g.Peer(0, 0)
	cut := linkOf(0, 0, pe)
	f.linkDown(cut)
	f.advance(f.now + 2*f.cfg.withDefaults().UnreachableHold)
	f.check()
	live := f.live()
	for i, s := range f.nodes {
		side := live.Distances(noc.NodeID(i))
		want := 0
		for _, d := range side {
			if d >= 0 {
				want++
			}
		}
		if got := len(s.Topology().Nodes); got != want {
			t.Fatalf("node %v holds %d LSAs, its side of the cut has %d nodes", f.ids[i], got, want)
		}
		if s.Stats().LSAsPurged == 0 {
			t.Fatalf("node %v purged nothing", f.ids[i])
		}
	}
	f.linkUp(cut)
	f.run()
	f.check()
	for i, s := range f.nodes {
		if got := len(s.Topology().Nodes); got != g.N() {
			t.Fatalf("after healing node %v holds %d LSAs of %d", f.ids[i], got, g.N())
		}
	}
}

// TestUnreachableLSAsKeptForTheHold: after a cut, the LSAs of the nodes
// beyond it stay (unreachable, not routed to) until UnreachableHold has
// passed since routing lost them; then they are purged.
func TestUnreachableLSAsKeptForTheHold(t *testing.T) {
	g, err := topo.Generate("line", 4, topo.Options{})
	must(t, err)
	f := newFabric(t, g, testConfig, 15)
	f.run()
	pe, _ := g.Peer(0, 0)
	cut := linkOf(0, 0, pe)
	f.linkDown(cut)
	cfg := f.cfg.withDefaults()
	if cfg.UnreachableHold < 4*cfg.SPFDelay {
		t.Fatalf("hold %v too short beside SPFDelay %v for this test", cfg.UnreachableHold, cfg.SPFDelay)
	}
	f.advance(f.now + cfg.UnreachableHold/2)
	for i, s := range f.nodes {
		if got := len(s.Topology().Nodes); got != g.N() || s.Stats().LSAsPurged != 0 {
			t.Fatalf("node %v holds %d LSAs of %d, purged %d, within the hold", f.ids[i], got, g.N(), s.Stats().LSAsPurged)
		}
	}
	f.advance(f.now + 2*cfg.UnreachableHold)
	for i, s := range f.nodes {
		if s.Stats().LSAsPurged == 0 {
			t.Fatalf("node %v purged nothing after the hold", f.ids[i])
		}
	}
}

// TestFabricRestartReusesASequenceNumber: a node restarted with its old
// incarnation catches up on its old LSA from one neighbour and originates
// the next sequence number, one its earlier run already used, with other
// adjacencies, while a node beyond a restarted neighbour still holds that
// earlier LSA. The two copies meet when that link comes back; each node
// must not take the other's for a duplicate of its own (dpu-sim seed 511,
// 13 nodes, line, every fault, R = 2: the far side kept a one-way view of
// the restarted node for a whole refresh interval and could not route to
// the nodes behind it; the page's home among them, its backup took
// nothing over).
func TestFabricRestartReusesASequenceNumber(t *testing.T) {
	g, err := topo.Generate("line", 5, topo.Options{})
	must(t, err)
	f := newFabricIDs(t, g, testConfig, []noc.NodeID{0, 1, 2, 3, 4})
	f.run()
	between := func(a, b noc.NodeID) topo.Link {
		for p := 0; p < g.Ports(a); p++ {
			if pe, ok := g.Peer(a, noc.PortID(p)); ok && pe.Node == b {
				return linkOf(a, noc.PortID(p), pe)
			}
		}
		t.Fatalf("no link %d-%d", a, b)
		return topo.Link{}
	}
	l12, l34 := between(1, 2), between(3, 4)
	f.linkDown(l12)
	f.run()
	f.linkUp(l12) // node 1 holds node 2's LSA of this moment
	f.run()
	f.linkDown(l12) // node 2's next LSA lists 3 only; it reaches 3 and 4
	f.run()
	f.linkDown(l34)
	f.run()
	f.kill(2)
	f.kill(3) // node 4 keeps node 2's last LSA (unreachable, within the hold)
	f.run()
	delete(f.cut, l12)
	f.restart(3, testConfig) // an empty database, no link up yet (the one to 4 is cut)
	f.restart(2, testConfig) // its links to 1 and 3 come up at once
	f.run()
	f.linkUp(l34)
	f.run()
	f.check()
	if f.nodes[4].Stats().LSAsConflicting == 0 && f.nodes[3].Stats().LSAsConflicting == 0 {
		t.Fatal("the two copies of one sequence number never met")
	}
}
