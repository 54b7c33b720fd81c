package topo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/aitherion/dpu/noc"
)

// checkWiring verifies that g's port table is consistent: every wired port's
// peer points back, ports are dense (no gaps) and no node exceeds maxPorts.
func checkWiring(t *testing.T, g *Graph, maxPorts int) {
	t.Helper()
	links := 0
	for n := 0; n < g.N(); n++ {
		id := noc.NodeID(n)
		if g.Ports(id) > maxPorts {
			t.Fatalf("node %d has %d ports, bound %d", n, g.Ports(id), maxPorts)
		}
		seen := map[noc.NodeID]bool{}
		for p := 0; p < g.Ports(id); p++ {
			pe, ok := g.Peer(id, noc.PortID(p))
			if !ok {
				t.Fatalf("node %d port %d unwired in a generated graph", n, p)
			}
			if pe.Node == id || seen[pe.Node] {
				t.Fatalf("node %d port %d: self-loop or parallel link to %v", n, p, pe.Node)
			}
			seen[pe.Node] = true
			back, ok := g.Peer(pe.Node, pe.Port)
			if !ok || back.Node != id || back.Port != noc.PortID(p) {
				t.Fatalf("node %d port %d -> %v, which points back to %v", n, p, pe, back)
			}
			links++
		}
	}
	if links != 2*g.NumLinks() || len(g.Links()) != g.NumLinks() {
		t.Fatalf("link count: %d port ends, %d links, Links() %d", links, g.NumLinks(), len(g.Links()))
	}
}

func TestGeneratorsKnownDiameters(t *testing.T) {
	cases := []struct {
		kind     string
		n        int
		opts     Options
		maxPorts int
		diameter int
	}{
		{"line", 1, Options{}, 0, 0},
		{"line", 2, Options{Ports: 1}, 1, 1},
		{"line", 17, Options{}, 2, 16},
		{"ring", 3, Options{}, 2, 1},
		{"ring", 10, Options{}, 2, 5},
		{"ring", 11, Options{Ports: 4}, 2, 5},
		{"tree", 4, Options{}, 3, 2},
		{"tree", 10, Options{}, 3, 4},
		{"tree", 22, Options{}, 3, 6},
		{"tree", 23, Options{}, 3, 7},
		{"tree", 5, Options{Ports: 2}, 2, 4},
		{"tree", 5, Options{Ports: 4}, 4, 2},
		{"tree", 17, Options{Ports: 4}, 4, 4},
		{"tree", 21, Options{Ports: 4}, 4, 5},
		{"torus2d", 9, Options{}, 4, 2},
		{"torus2d", 64, Options{}, 4, 8},
		{"torus2d", 60, Options{}, 4, 3 + 5},           // 6 x 10
		{"torus2d", 60, Options{Width: 20}, 4, 1 + 10}, // 3 x 20
		{"torus2d", 35, Options{}, 4, 2 + 3},           // 5 x 7
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%d", c.kind, c.n), func(t *testing.T) {
			g, err := Generate(c.kind, c.n, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if g.Kind() != c.kind || g.N() != c.n {
				t.Fatalf("kind %q n %d", g.Kind(), g.N())
			}
			checkWiring(t, g, c.maxPorts)
			m := g.Metrics()
			if !m.Connected || m.Components != 1 {
				t.Fatalf("not connected: %+v", m)
			}
			if m.Diameter != c.diameter {
				t.Fatalf("diameter %d, want %d", m.Diameter, c.diameter)
			}
		})
	}
}

func TestGeneratorsAllKindsSizes(t *testing.T) {
	for _, kind := range Kinds() {
		if kind == plannedKind {
			continue // TestGeneratePlanned: plans of 300 nodes take seconds
		}
		for _, n := range []int{9, 16, 64, 100, 300} {
			for _, k := range []int{4, 6} {
				g, err := Generate(kind, n, Options{Ports: k, Seed: int64(n)})
				if err != nil {
					t.Fatalf("%s n=%d k=%d: %v", kind, n, k, err)
				}
				checkWiring(t, g, k)
				m := g.Metrics()
				if !m.Connected || m.Diameter < 1 {
					t.Fatalf("%s n=%d k=%d: %+v", kind, n, k, m)
				}
				if lb, _ := MooreDiameter(n, k); m.Diameter < lb {
					t.Fatalf("%s n=%d k=%d: diameter %d below the Moore bound %d", kind, n, k, m.Diameter, lb)
				}
				if kind == "random-regular" {
					for v := 0; v < n; v++ {
						if g.Degree(noc.NodeID(v)) != k {
							t.Fatalf("random-regular node %d degree %d, want %d", v, g.Degree(noc.NodeID(v)), k)
						}
					}
				}
				if kind == "smallworld" {
					for v := 0; v < n; v++ {
						if !g.Adjacent(noc.NodeID(v), noc.NodeID((v+1)%n)) {
							t.Fatalf("smallworld lost ring link %d-%d", v, (v+1)%n)
						}
					}
				}
			}
		}
	}
}

func TestSmallWorldShortensTheRing(t *testing.T) {
	ring, _ := Generate("ring", 256, Options{})
	for _, o := range []Options{
		{Ports: 4, Seed: 1},
		{Ports: 6, Lattice: 4, Rewire: 0.3, Seed: 2},
		{Ports: 8, Lattice: 6, Rewire: 1, Seed: 3},
	} {
		sw, err := Generate("smallworld", 256, o)
		if err != nil {
			t.Fatal(err)
		}
		checkWiring(t, sw, o.Ports)
		r, s := ring.Metrics(), sw.Metrics()
		if !s.Connected || s.Diameter*4 > r.Diameter || s.AvgHops*4 > r.AvgHops {
			t.Fatalf("%+v: small world %+v not much shorter than ring %+v", o, s, r)
		}
	}
}

func TestGeneratorsSeeded(t *testing.T) {
	for _, kind := range []string{"smallworld", "random-regular"} {
		a, _ := Generate(kind, 128, Options{Ports: 5, Seed: 42})
		b, _ := Generate(kind, 128, Options{Ports: 5, Seed: 42})
		c, _ := Generate(kind, 128, Options{Ports: 5, Seed: 43})
		if a == nil || b == nil || c == nil {
			t.Fatalf("%s: generation failed", kind)
		}
		if !slices.Equal(a.Links(), b.Links()) {
			t.Fatalf("%s: same seed, different graphs", kind)
		}
		if slices.Equal(a.Links(), c.Links()) {
			t.Fatalf("%s: different seeds, same graph", kind)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	cases := []struct {
		kind string
		n    int
		opts Options
	}{
		{"line", 0, Options{}},
		{"line", 3, Options{Ports: 1}},
		{"ring", 2, Options{}},
		{"ring", 5, Options{Ports: 1}},
		{"tree", 3, Options{Ports: 1}},
		{"torus2d", 16, Options{Ports: 3}},
		{"torus2d", 13, Options{}},
		{"torus2d", 8, Options{}},
		{"torus2d", 24, Options{Width: 5}},
		{"torus2d", 24, Options{Width: 12}},
		{"smallworld", 2, Options{}},
		{"smallworld", 10, Options{Lattice: 3}},
		{"smallworld", 10, Options{Ports: 4, Lattice: 6}},
		{"smallworld", 5, Options{Ports: 6, Lattice: 6}},
		{"smallworld", 10, Options{Rewire: 1.5}},
		{"random-regular", 5, Options{Ports: 3}},
		{"random-regular", 4, Options{Ports: 4}},
		{"random-regular", 4, Options{Ports: 1}},
		{"random-regular", 10, Options{Ports: -1}},
	}
	for _, c := range cases {
		if _, err := Generate(c.kind, c.n, c.opts); !errors.Is(err, ErrImpossible) {
			t.Errorf("%s n=%d %+v: err %v, want ErrImpossible", c.kind, c.n, c.opts, err)
		}
	}
	if _, err := Generate("hypercube", 8, Options{}); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestGraphConnectDisconnect(t *testing.T) {
	g := New(4)
	for _, e := range [][2]noc.NodeID{{0, 1}, {1, 2}, {2, 3}, {0, 2}} {
		if _, err := g.Connect(e[0], e[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range [][2]noc.NodeID{{0, 0}, {1, 0}, {0, 4}} {
		if _, err := g.Connect(bad[0], bad[1]); !errors.Is(err, ErrWiring) {
			t.Fatalf("connect %v: %v", bad, err)
		}
	}
	l, err := g.Disconnect(1, 1) // node 1 port 1 is the link to 2
	if err != nil || l != (Link{A: 1, PortA: 1, B: 2, PortB: 0}) {
		t.Fatalf("disconnect: %v %v", l, err)
	}
	if _, err := g.Disconnect(1, 1); !errors.Is(err, ErrWiring) {
		t.Fatalf("disconnect twice: %v", err)
	}
	if g.Ports(1) != 2 || g.Degree(1) != 1 || g.NumLinks() != 3 {
		t.Fatalf("ports %d degree %d links %d", g.Ports(1), g.Degree(1), g.NumLinks())
	}
	if d := g.Distances(1); !slices.Equal(d, []int{1, 0, 2, 3}) {
		t.Fatalf("distances %v", d)
	}
	// a new link reuses the gap on both ends
	l, err = g.Connect(3, 1)
	if err != nil || l != (Link{A: 1, PortA: 1, B: 3, PortB: 1}) {
		t.Fatalf("reconnect: %v %v", l, err)
	}
	c := g.Clone()
	c.Disconnect(0, 0)
	if !g.Adjacent(0, 1) || c.Adjacent(0, 1) {
		t.Fatal("clone shares state")
	}
	// the clone is now the path 1-3-2-0
	if m := c.Metrics(); !m.Connected || m.Diameter != 3 || m.Links != 3 || math.Abs(m.AvgHops-20.0/12) > 1e-12 {
		t.Fatalf("%+v", m)
	}
}

func TestAllPairsSymmetric(t *testing.T) {
	g, _ := Generate("smallworld", 50, Options{Seed: 4})
	ap := g.AllPairs()
	for i := range ap {
		for j := range ap {
			if ap[i][j] != ap[j][i] || (ap[i][j] == 0) != (i == j) {
				t.Fatalf("d(%d,%d)=%d d(%d,%d)=%d", i, j, ap[i][j], j, i, ap[j][i])
			}
			if ap[i][j] == 1 && !g.Adjacent(noc.NodeID(i), noc.NodeID(j)) {
				t.Fatalf("%d and %d one hop apart but not linked", i, j)
			}
		}
	}
}

func TestMetricsDisconnected(t *testing.T) {
	g := New(5)
	g.Connect(0, 1)
	g.Connect(2, 3)
	m := g.Metrics()
	if m.Connected || m.Components != 3 || m.Diameter != -1 || m.AvgHops != 1 {
		t.Fatalf("%+v", m)
	}
}

func TestMooreBoundKnownValues(t *testing.T) {
	bounds := []struct{ k, d, want int }{
		{3, 2, 10},    // Petersen
		{7, 2, 50},    // Hoffman–Singleton
		{57, 2, 3250}, // the open case
		{4, 2, 17},
		{3, 3, 22},
		{4, 3, 53},
		{4, 4, 161},
		{2, 5, 11}, // odd cycle
		{1, 7, 2},
		{5, 0, 1},
	}
	for _, b := range bounds {
		if got := MooreBound(b.k, b.d); got != b.want {
			t.Errorf("MooreBound(%d,%d) = %d, want %d", b.k, b.d, got, b.want)
		}
	}
	if MooreBound(1000, 100) != math.MaxInt {
		t.Error("MooreBound does not saturate")
	}
	diams := []struct{ n, k, want int }{
		{1, 0, 0}, {2, 1, 1}, {10, 3, 2}, {11, 3, 3}, {50, 7, 2}, {51, 7, 3},
		{53, 4, 3}, {54, 4, 4}, {64, 4, 4}, {11, 2, 5}, {12, 2, 6}, {1024, 4, 6}, {1458, 4, 7},
	}
	for _, c := range diams {
		if got, ok := MooreDiameter(c.n, c.k); !ok || got != c.want {
			t.Errorf("MooreDiameter(%d,%d) = %d %v, want %d", c.n, c.k, got, ok, c.want)
		}
	}
	if _, ok := MooreDiameter(3, 1); ok {
		t.Error("3 nodes with 1 port cannot be connected")
	}
	avgs := []struct {
		n, k int
		want float64
	}{
		{10, 3, 15.0 / 9},
		{50, 7, (7 + 2*42) / 49.0},
		{64, 4, (4 + 2*12 + 3*36 + 4*11) / 63.0},
		{11, 2, (2 + 4 + 6 + 8 + 10) / 10.0},
		{2, 1, 1},
	}
	for _, c := range avgs {
		if got, ok := MooreAvgHops(c.n, c.k); !ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("MooreAvgHops(%d,%d) = %v, want %v", c.n, c.k, got, c.want)
		}
	}
}

func petersen() *Graph {
	g := New(10)
	for i := 0; i < 5; i++ {
		g.Connect(noc.NodeID(i), noc.NodeID((i+1)%5))     // outer pentagon
		g.Connect(noc.NodeID(i), noc.NodeID(5+i))         // spokes
		g.Connect(noc.NodeID(5+i), noc.NodeID(5+(i+2)%5)) // inner pentagram
	}
	return g
}

// hoffmanSingleton builds the Hoffman–Singleton graph from five pentagons
// P_h and five pentagrams Q_i: P_h[j] ~ Q_i[h·i + j mod 5].
func hoffmanSingleton() *Graph {
	g := New(50)
	p := func(h, j int) noc.NodeID { return noc.NodeID(h*5 + j%5) }
	q := func(i, j int) noc.NodeID { return noc.NodeID(25 + i*5 + j%5) }
	for h := 0; h < 5; h++ {
		for j := 0; j < 5; j++ {
			g.Connect(p(h, j), p(h, j+1))
			g.Connect(q(h, j), q(h, j+2))
			for i := 0; i < 5; i++ {
				g.Connect(p(h, j), q(i, h*i+j))
			}
		}
	}
	return g
}

func TestMooreGraphsMeetTheBound(t *testing.T) {
	for _, c := range []struct {
		g    *Graph
		n, k int
	}{{petersen(), 10, 3}, {hoffmanSingleton(), 50, 7}} {
		m := c.g.Metrics()
		d, _ := MooreDiameter(c.n, c.k)
		avg, _ := MooreAvgHops(c.n, c.k)
		if m.Nodes != c.n || m.MaxDegree != c.k || m.Links != c.n*c.k/2 || m.Diameter != d || math.Abs(m.AvgHops-avg) > 1e-12 {
			t.Fatalf("n=%d k=%d: %+v, Moore diameter %d avg %v", c.n, c.k, m, d, avg)
		}
		if d != 2 {
			t.Fatalf("Moore diameter %d", d)
		}
	}
}

func adjacencyOf(g *Graph) adjacency {
	adj := make(adjacency, g.N())
	for _, l := range g.Links() {
		adj.add(int32(l.A), int32(l.B))
	}
	return adj
}

func TestHopEvaluatorMatchesBFS(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 60; trial++ {
		n := 1 + rng.IntN(150)
		g := New(n)
		for e := rng.IntN(3 * n); e > 0; e-- {
			g.Connect(noc.NodeID(rng.IntN(n)), noc.NodeID(rng.IntN(n))) // errors (loops, repeats) skipped
		}
		m := g.Metrics()
		d, sum, ok := newHopEvaluator(n).eval(adjacencyOf(g), n)
		if ok != m.Connected {
			t.Fatalf("n=%d: evaluator connected=%v, BFS %+v", n, ok, m)
		}
		if !ok {
			continue
		}
		avg := 0.0
		if n > 1 {
			avg = float64(sum) / float64(n*(n-1))
		}
		if d != m.Diameter || math.Abs(avg-m.AvgHops) > 1e-9 {
			t.Fatalf("n=%d: evaluator d=%d avg=%v, BFS %+v", n, d, avg, m)
		}
		if m.Diameter > 1 {
			if _, _, ok := newHopEvaluator(n).eval(adjacencyOf(g), m.Diameter-1); ok {
				t.Fatalf("n=%d: limit %d below the diameter accepted", n, m.Diameter-1)
			}
		}
	}
}

func TestPlan(t *testing.T) {
	p, err := Plan(32, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkWiring(t, p.Graph, 4)
	m := p.Graph.Metrics()
	if !m.Connected || m.Diameter != p.Diameter || math.Abs(m.AvgHops-p.AvgHops) > 1e-9 {
		t.Fatalf("plan says D=%d avg=%v, graph has %+v", p.Diameter, p.AvgHops, m)
	}
	if p.MooreDiameter != 3 || p.Diameter < p.MooreDiameter || p.AvgHops < p.MooreAvgHops ||
		p.DiameterGap != p.Diameter-p.MooreDiameter || p.AvgHopsGap < 0 ||
		math.Abs(p.AvgHopsOver-(p.AvgHops-p.MooreAvgHops)) > 1e-12 {
		t.Fatalf("bounds: %+v", p)
	}
	// the largest known graph of degree 4 and diameter 3 has 41 nodes
	if p.Record == nil || *p.Record != (Record{Ports: 4, Diameter: 3, Nodes: 41}) || p.RecordGap != p.Diameter-3 {
		t.Fatalf("record %+v gap %d", p.Record, p.RecordGap)
	}
	for _, c := range p.Candidates {
		if c.Error == "" && (c.Diameter < p.Diameter || c.Diameter == p.Diameter && c.AvgHops < p.AvgHops) {
			t.Fatalf("candidate %+v beats the plan (D=%d avg=%v)", c, p.Diameter, p.AvgHops)
		}
	}
	// every generator but planned, and each stream's lift
	if len(p.Candidates) != len(generators)+streamsFor(32) || !slices.Equal(p.Links, p.Graph.Links()) {
		t.Fatalf("candidates %d, links %d", len(p.Candidates), len(p.Links))
	}
	// the search must beat a plain random 4-regular sample's diameter (4)
	rr, _ := Generate("random-regular", 32, Options{Ports: 4, Seed: 1})
	if rm := rr.Metrics(); p.Diameter >= rm.Diameter {
		t.Fatalf("plan D=%d avg=%v no better than a random regular graph %+v", p.Diameter, p.AvgHops, rm)
	}

	again, _ := Plan(32, 4, 1)
	if !slices.Equal(p.Links, again.Links) || p.Evaluations != again.Evaluations || p.LiftEvaluations != again.LiftEvaluations {
		t.Fatal("same seed, different plans")
	}
	other, _ := Plan(32, 4, 2)
	if slices.Equal(p.Links, other.Links) {
		t.Fatal("different seeds, same plan")
	}
}

func TestGeneratePlanned(t *testing.T) {
	g, err := Generate("planned", 20, Options{Ports: 3, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Plan(20, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if g.Kind() != "planned" || !slices.Equal(g.Links(), p.Links) {
		t.Fatalf("planned kind %s wired %v, plan %v", g.Kind(), g.Links(), p.Links)
	}
	if _, err := Generate("planned", 3, Options{Ports: 1}); !errors.Is(err, ErrImpossible) {
		t.Fatalf("3 nodes of 1 port: %v", err)
	}
}

func TestPlanFindsMooreGraphs(t *testing.T) {
	// The Petersen graph is the only 10-node cubic graph of diameter 2;
	// the search must find it (or an isomorph).
	p, err := Plan(10, 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	if p.Diameter != 2 || p.DiameterGap != 0 || math.Abs(p.AvgHops-15.0/9) > 1e-12 {
		t.Fatalf("%+v", p)
	}
}

func TestPlanSmallAndOdd(t *testing.T) {
	cases := []struct{ n, k, wantD int }{
		{1, 0, 0}, {2, 1, 1}, {2, 4, 1}, {3, 2, 1}, {5, 4, 1}, {9, 2, 4}, {7, 3, 2}, {21, 5, 2}, {38, 3, 4},
	}
	for _, c := range cases {
		p, err := Plan(c.n, c.k, 3)
		if err != nil {
			t.Fatalf("n=%d k=%d: %v", c.n, c.k, err)
		}
		checkWiring(t, p.Graph, c.k)
		if m := p.Graph.Metrics(); !m.Connected || p.Diameter != c.wantD || m.Diameter != c.wantD {
			t.Fatalf("n=%d k=%d: plan D=%d graph %+v, want D=%d", c.n, c.k, p.Diameter, m, c.wantD)
		}
	}
	for _, c := range [][2]int{{0, 4}, {MaxPlanNodes + 1, 4}, {3, 1}, {2, 0}} {
		if _, err := Plan(c[0], c[1], 1); !errors.Is(err, ErrImpossible) {
			t.Fatalf("Plan%v: %v", c, err)
		}
	}
}

func TestPlanWriteText(t *testing.T) {
	p, _ := Plan(16, 3, 1)
	var b bytes.Buffer
	if err := p.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"16 nodes, 3 ports per node, seed 1",
		fmt.Sprintf("(Moore bound %d, gap %d)", p.MooreDiameter, p.DiameterGap),
		fmt.Sprintf("%.3f", p.MooreAvgHops),
		"torus2d", "needs 4 ports per node",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	wiring := out[strings.Index(out, "\nnode "):]
	if got := strings.Count(wiring, "\n") - 2; got != len(p.Links) {
		t.Fatalf("%d wiring lines for %d links:\n%s", got, len(p.Links), out)
	}
}

func TestWriteDot(t *testing.T) {
	g, _ := Generate("ring", 4, Options{})
	var b bytes.Buffer
	if err := g.WriteDot(&b); err != nil {
		t.Fatal(err)
	}
	want := `graph "ring" {
	// 4 nodes, 4 links
	node [shape=circle];
	0;
	1;
	2;
	3;
	0 -- 1 [taillabel="0", headlabel="0"];
	0 -- 3 [taillabel="1", headlabel="1"];
	1 -- 2 [taillabel="1", headlabel="0"];
	2 -- 3 [taillabel="1", headlabel="0"];
}
`
	if b.String() != want {
		t.Fatalf("dot:\n%s\nwant:\n%s", b.String(), want)
	}
}

func BenchmarkPlan64x4(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Plan(64, 4, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHopEvaluator64x4(b *testing.B) {
	g, _ := Generate("random-regular", 64, Options{Ports: 4, Seed: 1})
	adj := adjacencyOf(g)
	ev := newHopEvaluator(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := ev.eval(adj, 64); !ok {
			b.Fatal("disconnected")
		}
	}
}

func BenchmarkMetrics1024SmallWorld(b *testing.B) {
	g, _ := Generate("smallworld", 1024, Options{Ports: 6, Seed: 1})
	b.ReportAllocs()
	for b.Loop() {
		g.Metrics()
	}
}
