package route

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{RefreshInterval: time.Second, MaxAge: time.Second},
		{HelloInterval: -1},
		{MaxPorts: maxPortsLimit + 1},
		{MaxAge: 100 * 24 * time.Hour},
	}
	for _, c := range bad {
		if _, err := New(1, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := New(noc.BroadcastNode, Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("broadcast id: %v", err)
	}
	s, err := New(1, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.MaxAge != 40*time.Second || s.cfg.UnreachableHold != 10*time.Second || s.cfg.MaxPorts != 64 {
		t.Fatalf("defaults %+v", s.cfg)
	}
	if err := s.PortUp(0, 64); !errors.Is(err, ErrPort) {
		t.Fatalf("port 64: %v", err)
	}
}

// TestConfigValidationAtItsBounds: the largest MaxAge the wire's age
// field holds (2^32-1 ms) and MaxPorts 1 and maxPortsLimit are accepted;
// one past each is refused.
func TestConfigValidationAtItsBounds(t *testing.T) {
	top := time.Duration(math.MaxUint32) * time.Millisecond
	for _, tc := range []struct {
		c  Config
		ok bool
	}{
		{Config{MaxAge: top}, true},
		{Config{MaxAge: top + 1}, false},
		{Config{MaxPorts: 1}, true},
		{Config{MaxPorts: maxPortsLimit}, true},
		{Config{MaxPorts: maxPortsLimit + 1}, false},
	} {
		_, err := New(1, tc.c)
		if tc.ok && err != nil {
			t.Errorf("%+v refused: %v", tc.c, err)
		}
		if !tc.ok && !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", tc.c, err)
		}
	}
}

// TestPortDownOfAPortNeverUp: a link-down report for a valid port this
// node never had up (none, or past the highest one it had) changes
// nothing and is no error.
func TestPortDownOfAPortNeverUp(t *testing.T) {
	s, err := New(1, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PortDown(0, 3); err != nil {
		t.Fatalf("port 3 down before any port was up: %v", err)
	}
	if err := s.PortUp(0, 0); err != nil {
		t.Fatal(err)
	}
	before := s.Topology()
	for _, p := range []noc.PortID{1, 2, 63} {
		if err := s.PortDown(time.Millisecond, p); err != nil {
			t.Fatalf("port %d down, never up: %v", p, err)
		}
	}
	if got := s.Topology(); !reflect.DeepEqual(got, before) {
		t.Fatalf("topology changed by downs of ports never up: %+v, was %+v", got, before)
	}
	if err := s.PortDown(0, 64); !errors.Is(err, ErrPort) {
		t.Fatalf("port 64 down: %v", err)
	}
}

// TestTieBreak checks the documented rule on a square: 10-30-40-20-10.
// From 10 to 40 both neighbours are on a shortest path; 20 has the lower id.
func TestTieBreak(t *testing.T) {
	g := topo.New(4)
	for _, e := range [][2]noc.NodeID{{0, 1}, {1, 3}, {3, 2}, {2, 0}} {
		if _, err := g.Connect(e[0], e[1]); err != nil {
			t.Fatal(err)
		}
	}
	f := newFabricIDs(t, g, Config{}, []noc.NodeID{10, 30, 20, 40})
	f.run()
	f.check()
	p, hops, ok := f.nodes[0].NextHop(40)
	if want, _ := f.nodes[0].Neighbour(p); !ok || hops != 2 || want != 20 {
		t.Fatalf("10 → 40: port %d (neighbour %v), %d hops, %v", p, want, hops, ok)
	}
	if p, hops, ok := f.nodes[0].NextHop(10); !ok || hops != 0 || p != noc.LocalPort {
		t.Fatalf("route to self: %d %d %v", p, hops, ok)
	}
	// renaming 20 to 50 moves the choice to 30
	f = newFabricIDs(t, g, Config{}, []noc.NodeID{10, 30, 50, 40})
	f.run()
	f.check()
	if p, _, _ := f.nodes[0].NextHop(40); p != 0 {
		t.Fatalf("10 → 40 via port %d, want 0 (to 30)", p)
	}
}

// pair is two States wired by hand, so that tests can build what topo
// refuses (parallel links) and watch single frames.
type pair struct {
	t    *testing.T
	a, b *State
	// links[i] joins a's port links[i][0] to b's port links[i][1].
	links [][2]noc.PortID
	down  map[int]bool
	now   time.Duration
}

func newPair(t *testing.T, cfg Config, links ...[2]noc.PortID) *pair {
	a, err := New(1, cfg)
	must(t, err)
	b, err := New(2, cfg)
	must(t, err)
	p := &pair{t: t, a: a, b: b, links: links, down: map[int]bool{}}
	for _, l := range links {
		must(t, a.PortUp(0, l[0]))
		must(t, b.PortUp(0, l[1]))
	}
	p.settle()
	return p
}

// settle delivers frames and runs due timers until quiet.
func (p *pair) settle() {
	for round := 0; round < 1000; round++ {
		moved := p.pump(p.a, p.b, 0) + p.pump(p.b, p.a, 1)
		due := false
		for _, s := range []*State{p.a, p.b} {
			if at, _ := s.NextDeadline(); at <= p.now {
				s.Tick(p.now)
				due = true
			}
		}
		if moved == 0 && !due {
			return
		}
		p.now += time.Millisecond
	}
	p.t.Fatal("pair does not settle")
}

// pump moves from's queued frames to to; side is from's index in links.
func (p *pair) pump(from, to *State, side int) int {
	n := 0
	from.Outputs(func(port noc.PortID, f *noc.Frame) {
		for i, l := range p.links {
			if l[side] == port && !p.down[i] {
				must(p.t, to.HandleFrame(p.now, l[1-side], f))
				n++
			}
		}
	})
	return n
}

func TestParallelLinks(t *testing.T) {
	p := newPair(t, Config{}, [2]noc.PortID{3, 0}, [2]noc.PortID{1, 5})
	if port, hops, ok := p.a.NextHop(2); !ok || hops != 1 || port != 1 {
		t.Fatalf("a → b: port %d, %d hops, %v; want the lower port 1", port, hops, ok)
	}
	if port, _, _ := p.b.NextHop(1); port != 0 {
		t.Fatalf("b → a: port %d, want 0", port)
	}
	v := p.a.Version()
	p.down[1] = true
	must(t, p.a.PortDown(p.now, 1))
	must(t, p.b.PortDown(p.now, 5))
	p.settle()
	if port, _, ok := p.a.NextHop(2); !ok || port != 3 || p.a.Version() == v {
		t.Fatalf("after port 1 fails: port %d %v, version %d→%d", port, ok, v, p.a.Version())
	}
	p.down[0] = true
	must(t, p.a.PortDown(p.now, 3))
	must(t, p.b.PortDown(p.now, 0))
	p.settle()
	if _, _, ok := p.a.NextHop(2); ok || len(p.a.Routes()) != 0 || len(p.a.Neighbours()) != 0 {
		t.Fatalf("route to b with no link: %v %v", p.a.Routes(), p.a.Neighbours())
	}
}

func TestHelloBeforePortUp(t *testing.T) {
	s, _ := New(1, Config{})
	s.Tick(0)
	hello := helloFrame(2, Hello{Port: 4})
	must(t, s.HandleFrame(0, 0, &hello))
	if _, ok := s.Neighbour(0); ok || s.Pending() != 0 {
		t.Fatalf("adjacent on a port that is not up (%d pending)", s.Pending())
	}
	if ns := s.Neighbours(); len(ns) != 1 || ns[0].Up || ns[0].Node != 2 || ns[0].NodePort != 4 {
		t.Fatalf("neighbours %+v", ns)
	}
	must(t, s.PortUp(time.Second, 0))
	if n, ok := s.Neighbour(0); !ok || n != 2 {
		t.Fatalf("no adjacency after PortUp: %v %v", n, ok)
	}
	var ops []noc.Op
	s.Outputs(func(p noc.PortID, f *noc.Frame) { ops = append(ops, f.Op) })
	if len(ops) != 1 || ops[0] != OpHello {
		t.Fatalf("after PortUp sent %v, want one hello", ops)
	}
	if at, _ := s.NextDeadline(); at != time.Second {
		t.Fatalf("next deadline %v, want now (own LSA to originate)", at)
	}
	s.Tick(time.Second)
	ops = ops[:0]
	s.Outputs(func(p noc.PortID, f *noc.Frame) { ops = append(ops, f.Op) })
	if len(ops) != 1 || ops[0] != OpLSA {
		t.Fatalf("after Tick sent %v, want the new own LSA", ops)
	}
}

func TestHelloRepeatsUntilHeard(t *testing.T) {
	s, _ := New(1, Config{HelloInterval: 100 * time.Millisecond})
	s.Tick(0)
	must(t, s.PortUp(0, 2))
	s.Outputs(func(noc.PortID, *noc.Frame) {})
	if at, _ := s.NextDeadline(); at != 100*time.Millisecond {
		t.Fatalf("deadline %v", at)
	}
	s.Tick(100 * time.Millisecond)
	var got []noc.PortID
	s.Outputs(func(p noc.PortID, f *noc.Frame) { got = append(got, p) })
	if len(got) != 1 || got[0] != 2 || s.Stats().HellosSent != 2 {
		t.Fatalf("repeat hello: %v, stats %+v", got, s.Stats())
	}
	hello := helloFrame(9, Hello{Port: 0, Reply: true})
	must(t, s.HandleFrame(150*time.Millisecond, 2, &hello))
	if at, _ := s.NextDeadline(); at != 150*time.Millisecond {
		t.Fatalf("deadline %v", at) // own LSA due
	}
	s.Tick(150 * time.Millisecond)
	if at, _ := s.NextDeadline(); at != 150*time.Millisecond+s.cfg.RefreshInterval {
		t.Fatalf("deadline %v after the neighbour is heard, want the refresh", at)
	}
}

func helloFrame(src noc.NodeID, h Hello) noc.Frame {
	return noc.Frame{Version: noc.FrameVersion, Class: noc.ClassControl, Op: OpHello, Src: src, Dst: noc.BroadcastNode, Payload: h.AppendTo(nil)}
}

func lsaFrame(src noc.NodeID, l LSA) noc.Frame {
	return noc.Frame{Version: noc.FrameVersion, Class: noc.ClassControl, Op: OpLSA, Src: src, Dst: noc.BroadcastNode, Payload: l.AppendTo(nil)}
}

// snapshot is everything a caller can observe of a State's routing state.
type snapshot struct {
	routes     []Route
	topology   Topology
	neighbours []Neighbour
	version    uint64
	pending    int
	deadline   time.Duration
}

func snap(s *State) snapshot {
	at, _ := s.NextDeadline()
	return snapshot{s.Routes(), s.Topology(), s.Neighbours(), s.Version(), s.Pending(), at}
}

// adjacentState is node 1 with node 2 adjacent on port 0 and node 3 on
// port 1, each announcing the other two.
func adjacentState(t testing.TB) *State {
	s, err := New(1, Config{})
	must(t, err)
	for i, n := range []noc.NodeID{2, 3} {
		must(t, s.PortUp(0, noc.PortID(i)))
		h := helloFrame(n, Hello{Port: 0, Reply: true})
		must(t, s.HandleFrame(0, noc.PortID(i), &h))
	}
	for _, l := range []LSA{
		{Origin: 2, Seq: 4, Adjacencies: []Adjacency{{0, 1, 0}, {1, 3, 1}}},
		{Origin: 3, Seq: 9, Adjacencies: []Adjacency{{0, 1, 1}, {1, 2, 1}}},
	} {
		f := lsaFrame(l.Origin, l)
		must(t, s.HandleFrame(0, 0, &f))
	}
	s.Tick(0)
	s.Outputs(func(noc.PortID, *noc.Frame) {})
	if len(s.Routes()) != 2 {
		t.Fatalf("routes %v", s.Routes())
	}
	return s
}

func TestMalformedFramesLeaveStateUnchanged(t *testing.T) {
	good := lsaFrame(2, LSA{Origin: 7, Seq: 1, Adjacencies: []Adjacency{{0, 2, 3}}})
	mut := func(edit func(f *noc.Frame)) noc.Frame {
		f := good
		f.Payload = append([]byte(nil), good.Payload...)
		edit(&f)
		return f
	}
	cases := []struct {
		name string
		in   noc.PortID
		f    noc.Frame
		want error
	}{
		{"load class", 0, mut(func(f *noc.Frame) { f.Class = noc.ClassLoad }), ErrNotRouting},
		{"coherence op", 0, mut(func(f *noc.Frame) { f.Op = noc.OpCoherenceFirst }), ErrNotRouting},
		{"unused routing op", 0, mut(func(f *noc.Frame) { f.Op = noc.OpRouteLast }), ErrNotRouting},
		{"port out of range", 64, good, ErrPort},
		{"broadcast source", 0, mut(func(f *noc.Frame) { f.Src = noc.BroadcastNode }), ErrMalformed},
		{"addressed elsewhere", 0, mut(func(f *noc.Frame) { f.Dst = 5 }), ErrMalformed},
		{"short lsa", 0, mut(func(f *noc.Frame) { f.Payload = f.Payload[:19] }), ErrMalformed},
		{"lsa count too high", 0, mut(func(f *noc.Frame) { f.Payload[17] = 2 }), ErrMalformed},
		{"lsa trailing byte", 0, mut(func(f *noc.Frame) { f.Payload = append(f.Payload, 0) }), ErrMalformed},
		{"lsa reserved", 0, mut(func(f *noc.Frame) { f.Payload[19] = 1 }), ErrMalformed},
		{"lsa origin broadcast", 0, mut(func(f *noc.Frame) { copy(f.Payload, []byte{0xff, 0xff, 0xff, 0xff}) }), ErrMalformed},
		{"lsa adjacency to itself", 0, mut(func(f *noc.Frame) { copy(f.Payload[22:], []byte{0, 0, 0, 7}) }), ErrMalformed},
		{"lsa no-port", 0, mut(func(f *noc.Frame) { copy(f.Payload[20:], []byte{0xff, 0xff}) }), ErrMalformed},
		{"lsa ports out of order", 0, lsaFrame(2, LSA{Origin: 7, Adjacencies: []Adjacency{{1, 2, 0}, {1, 3, 0}}}), ErrMalformed},
		{"hello short", 0, mut(func(f *noc.Frame) { f.Op = OpHello; f.Payload = f.Payload[:7] }), ErrMalformed},
		{"hello flags", 0, helloFrameRaw(2, []byte{0, 1, 2, 0, 0, 0, 0, 0}), ErrMalformed},
		{"hello reserved", 0, helloFrameRaw(2, []byte{0, 1, 0, 1, 0, 0, 0, 0}), ErrMalformed},
		{"hello local port", 0, helloFrameRaw(2, []byte{0xff, 0xfe, 0, 0, 0, 0, 0, 0}), ErrMalformed},
		{"hello from self", 0, helloFrame(1, Hello{Port: 0}), ErrLoop},
	}
	for _, c := range cases {
		s := adjacentState(t)
		before := snap(s)
		err := s.HandleFrame(time.Second, c.in, &c.f)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
			continue
		}
		if after := snap(s); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: state changed:\n%+v\n%+v", c.name, before, after)
		}
		if s.Stats().Malformed != 1 {
			t.Errorf("%s: malformed count %d", c.name, s.Stats().Malformed)
		}
	}
}

func helloFrameRaw(src noc.NodeID, payload []byte) noc.Frame {
	return noc.Frame{Version: noc.FrameVersion, Class: noc.ClassControl, Op: OpHello, Src: src, Dst: noc.BroadcastNode, Payload: payload}
}

func TestLSAAging(t *testing.T) {
	s := adjacentState(t)
	maxAge := s.cfg.MaxAge
	// an LSA 5 ms short of MaxAge is installed and expires 5 ms later
	old := lsaFrame(2, LSA{Origin: 50, Seq: 1, Age: maxAge - 5*time.Millisecond, Adjacencies: []Adjacency{{0, 2, 7}}})
	must(t, s.HandleFrame(time.Second, 0, &old))
	if s.Stats().LSAsInstalled != 3 {
		t.Fatalf("stats %+v", s.Stats())
	}
	var flooded []noc.PortID
	s.Outputs(func(p noc.PortID, f *noc.Frame) { flooded = append(flooded, p) })
	if len(flooded) != 1 || flooded[0] != 1 {
		t.Fatalf("flooded on %v, want port 1 only", flooded)
	}
	if at, _ := s.NextDeadline(); at != time.Second {
		t.Fatalf("deadline %v", at) // routes to recompute
	}
	s.Tick(time.Second)
	if _, _, ok := s.NextHop(50); ok {
		t.Fatal("one-way link carries a route") // 2 lists 50, 50 does not list 2
	}
	if at, _ := s.NextDeadline(); at != time.Second+5*time.Millisecond {
		t.Fatalf("deadline %v, want the expiry", at)
	}
	s.Tick(time.Second + 5*time.Millisecond)
	for _, n := range s.Topology().Nodes {
		if n.ID == 50 {
			t.Fatal("LSA at MaxAge still held")
		}
	}
	if s.Stats().LSAsExpired != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
	// one at MaxAge is refused
	dead := lsaFrame(2, LSA{Origin: 51, Seq: 1, Age: maxAge})
	must(t, s.HandleFrame(2*time.Second, 0, &dead))
	if len(s.Topology().Nodes) != 3 || s.Pending() != 0 {
		t.Fatalf("LSA at MaxAge installed: %+v", s.Topology())
	}
}

// TestExpiredRouteGoesInTheTickThatAgesIt: with SPFDelay 0 (the
// default), the Tick whose aging drops an LSA at MaxAge recomputes the
// routes too: the route through that LSA is gone when the Tick returns,
// not at some later Tick.
func TestExpiredRouteGoesInTheTickThatAgesIt(t *testing.T) {
	s := adjacentState(t)
	maxAge := s.cfg.MaxAge
	// 2 now lists 50 and 50 lists 2, its LSA 5 ms short of MaxAge.
	for _, f := range []noc.Frame{
		lsaFrame(2, LSA{Origin: 2, Seq: 5, Adjacencies: []Adjacency{{0, 1, 0}, {1, 3, 1}, {2, 50, 0}}}),
		lsaFrame(2, LSA{Origin: 50, Seq: 1, Age: maxAge - 5*time.Millisecond, Adjacencies: []Adjacency{{0, 2, 2}}}),
	} {
		must(t, s.HandleFrame(time.Second, 0, &f))
	}
	s.Tick(time.Second)
	s.Outputs(func(noc.PortID, *noc.Frame) {})
	if _, hops, ok := s.NextHop(50); !ok || hops != 2 {
		t.Fatalf("route to 50: %d hops, %v; want 2 hops through 2", hops, ok)
	}
	at, _ := s.NextDeadline()
	if at != time.Second+5*time.Millisecond {
		t.Fatalf("deadline %v, want the expiry", at)
	}
	s.Tick(at)
	if _, _, ok := s.NextHop(50); ok {
		t.Fatal("the route to 50 outlived the Tick that dropped its LSA at MaxAge")
	}
	if s.Stats().LSAsExpired != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
}

// TestDatabaseSyncLeavesOutExpiredLSAs: a neighbour that becomes
// adjacent after an LSA reached MaxAge, before the aging pass dropped it,
// is sent the database without it (it would refuse it).
func TestDatabaseSyncLeavesOutExpiredLSAs(t *testing.T) {
	s := adjacentState(t)
	maxAge := s.cfg.MaxAge
	old := lsaFrame(2, LSA{Origin: 50, Seq: 1, Age: maxAge - 5*time.Millisecond, Adjacencies: []Adjacency{{0, 2, 7}}})
	must(t, s.HandleFrame(time.Second, 0, &old))
	s.Tick(time.Second)
	s.Outputs(func(noc.PortID, *noc.Frame) {})
	now := time.Second + 5*time.Millisecond // 50's LSA is at MaxAge; no Tick since
	must(t, s.PortUp(now, 2))
	h := helloFrame(4, Hello{Port: 0})
	must(t, s.HandleFrame(now, 2, &h))
	var origins []noc.NodeID
	s.Outputs(func(p noc.PortID, f *noc.Frame) {
		if p != 2 || f.Op != OpLSA {
			return
		}
		var l LSA
		must(t, DecodeLSA(f.Payload, &l))
		origins = append(origins, l.Origin)
	})
	if !slices.Contains(origins, 2) || !slices.Contains(origins, 3) {
		t.Fatalf("database sent to the new neighbour: LSAs of %v, want 2's and 3's", origins)
	}
	if slices.Contains(origins, 50) {
		t.Fatalf("database sent to the new neighbour: LSAs of %v, with 50's at MaxAge", origins)
	}
}

func TestOlderLSAAnsweredWithNewer(t *testing.T) {
	s := adjacentState(t)
	stale := lsaFrame(3, LSA{Origin: 2, Seq: 3, Adjacencies: []Adjacency{{0, 1, 0}}})
	must(t, s.HandleFrame(time.Second, 1, &stale))
	var got []LSA
	s.Outputs(func(p noc.PortID, f *noc.Frame) {
		var l LSA
		must(t, DecodeLSA(f.Payload, &l))
		if p != 1 {
			t.Fatalf("answer on port %d", p)
		}
		got = append(got, l)
	})
	if len(got) != 1 || got[0].Origin != 2 || got[0].Seq != 4 || got[0].Age != time.Second {
		t.Fatalf("answer %+v", got)
	}
	dup := lsaFrame(3, LSA{Origin: 2, Seq: 4, Adjacencies: []Adjacency{{0, 1, 0}, {1, 3, 1}}})
	must(t, s.HandleFrame(time.Second, 1, &dup))
	if s.Pending() != 0 || s.Stats().LSAsDuplicate != 1 {
		t.Fatalf("duplicate: %d pending, %+v", s.Pending(), s.Stats())
	}
	// The same sequence number with other adjacencies (its originator
	// restarted and reused it): the copy that orders lower is answered
	// with the one held, a higher one replaces it and is flooded.
	lower := lsaFrame(3, LSA{Origin: 2, Seq: 4, Adjacencies: []Adjacency{{0, 1, 0}}})
	must(t, s.HandleFrame(time.Second, 1, &lower))
	got = got[:0]
	s.Outputs(func(p noc.PortID, f *noc.Frame) {
		var l LSA
		must(t, DecodeLSA(f.Payload, &l))
		got = append(got, l)
	})
	if len(got) != 1 || len(got[0].Adjacencies) != 2 || s.Stats().LSAsConflicting != 1 {
		t.Fatalf("lower copy of seq 4: answered %+v, %+v", got, s.Stats())
	}
	higher := lsaFrame(3, LSA{Origin: 2, Seq: 4, Adjacencies: []Adjacency{{0, 1, 0}, {1, 3, 1}, {2, 4, 0}}})
	must(t, s.HandleFrame(time.Second, 1, &higher))
	for _, n := range s.Topology().Nodes {
		if n.ID == 2 && n.Adjacencies != 3 {
			t.Fatalf("higher copy of seq 4 not installed: node 2 with %d adjacencies", n.Adjacencies)
		}
	}
}

func TestIncarnationSupersedes(t *testing.T) {
	s := adjacentState(t)
	// node 3 restarts with a higher incarnation: sequence 1 wins at once
	l := lsaFrame(3, LSA{Origin: 3, Incarnation: 1, Seq: 1, Adjacencies: []Adjacency{{0, 1, 1}}})
	must(t, s.HandleFrame(time.Second, 1, &l))
	s.Tick(time.Second)
	for _, n := range s.Topology().Nodes {
		if n.ID == 3 && (n.Incarnation != 1 || n.Seq != 1) {
			t.Fatalf("node 3 at %d/%d", n.Incarnation, n.Seq)
		}
	}
	// both neighbours stay one hop away
	if r := s.Routes(); len(r) != 2 || r[0].Hops != 1 || r[1].Hops != 1 {
		t.Fatalf("routes %v", r)
	}
}

func TestOutputsReentrant(t *testing.T) {
	s := adjacentState(t)
	must(t, s.PortUp(time.Second, 5))
	n := 0
	s.Outputs(func(p noc.PortID, f *noc.Frame) {
		n++
		h := helloFrame(9, Hello{Port: 0})
		must(t, s.HandleFrame(time.Second, 5, &h)) // answers with a hello and the database
	})
	if n != 1 || s.Pending() == 0 {
		t.Fatalf("%d frames drained, %d pending", n, s.Pending())
	}
}

func TestSteadyStateAllocations(t *testing.T) {
	p := newPair(t, Config{}, [2]noc.PortID{0, 0})
	cycle := func() {
		p.now += p.a.cfg.RefreshInterval
		p.a.Tick(p.now)
		p.pump(p.a, p.b, 0)
		p.b.Tick(p.now)
		p.pump(p.b, p.a, 1)
		p.a.Tick(p.now)
		p.b.Tick(p.now)
	}
	cycle()
	before := p.a.Stats().LSAsOriginated
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("a refresh cycle allocates %v times", n)
	}
	if p.a.Stats().LSAsOriginated-before < 100 || p.b.Stats().LSAsInstalled < 100 {
		t.Fatalf("cycle did not refresh: %+v", p.a.Stats())
	}
	if n := testing.AllocsPerRun(1000, func() { p.a.NextHop(2) }); n != 0 {
		t.Fatalf("NextHop allocates %v times", n)
	}
}

// TestOwnLSACopies: a copy of this node's own LSA that is as new as its
// own but lists other adjacencies (left from before a restart) is caught
// up with, counted once, and the next origination jumps past it; an older
// copy, even one with other adjacencies, is answered with the current LSA
// and changes nothing; an identical copy is a duplicate.
func TestOwnLSACopies(t *testing.T) {
	s := adjacentState(t)
	own := func() TopoNode {
		t.Helper()
		for _, n := range s.Topology().Nodes {
			if n.ID == 1 {
				return n
			}
		}
		t.Fatal("no own LSA in the topology")
		return TopoNode{}
	}
	o := own()
	ownAdj := []Adjacency{{0, 2, 0}, {1, 3, 0}}
	other := []Adjacency{{0, 9, 0}}
	now := time.Second
	// answers are the LSAs queued, on the ports in want (one each).
	answers := func(want ...noc.PortID) (got []LSA) {
		t.Helper()
		var ports []noc.PortID
		s.Outputs(func(p noc.PortID, f *noc.Frame) {
			if f.Op != OpLSA {
				return
			}
			var l LSA
			must(t, DecodeLSA(f.Payload, &l))
			ports = append(ports, p)
			got = append(got, l)
		})
		if len(got) != 0 && !slices.Equal(ports, want) {
			t.Fatalf("LSAs %+v on ports %v, want ports %v", got, ports, want)
		}
		return got
	}

	older := lsaFrame(2, LSA{Origin: 1, Incarnation: o.Incarnation, Seq: o.Seq - 1, Adjacencies: other})
	stale := s.Stats().LSAsStale
	must(t, s.HandleFrame(now, 0, &older))
	if st := s.Stats(); st.OwnLSACatchUps != 0 || st.LSAsStale != stale+1 {
		t.Fatalf("older own copy with other adjacencies: catch-ups %d, stale %d (was %d)", st.OwnLSACatchUps, st.LSAsStale, stale)
	}
	if got := answers(0); len(got) != 1 || got[0].Origin != 1 || got[0].Seq != o.Seq || !slices.Equal(got[0].Adjacencies, ownAdj) {
		t.Fatalf("answer to an older own copy: %+v, want ours at seq %d", got, o.Seq)
	}
	if n := own(); n.Seq != o.Seq || n.Incarnation != o.Incarnation {
		t.Fatalf("own LSA at %d/%d after an older copy, want %d/%d", n.Incarnation, n.Seq, o.Incarnation, o.Seq)
	}

	dup := lsaFrame(2, LSA{Origin: 1, Incarnation: o.Incarnation, Seq: o.Seq, Adjacencies: ownAdj})
	must(t, s.HandleFrame(now, 0, &dup))
	if st := s.Stats(); st.OwnLSACatchUps != 0 {
		t.Fatalf("identical own copy counted as a catch-up: %+v", st)
	}

	same := lsaFrame(2, LSA{Origin: 1, Incarnation: o.Incarnation, Seq: o.Seq, Adjacencies: other})
	must(t, s.HandleFrame(now, 0, &same))
	if st := s.Stats(); st.OwnLSACatchUps != 1 {
		t.Fatalf("own copy as new as ours with other adjacencies: %d catch-ups, want 1", st.OwnLSACatchUps)
	}
	if got := answers(); len(got) != 0 {
		t.Fatalf("own copy caught up with, yet answered: %+v", got)
	}
	s.Tick(now + s.cfg.OriginateDelay)
	got := answers(0, 1) // flooded on both adjacencies
	for _, l := range got {
		if l.Origin != 1 || l.Seq != o.Seq+1 || !slices.Equal(l.Adjacencies, ownAdj) {
			t.Fatalf("origination after the catch-up: %+v, want ours at seq %d", got, o.Seq+1)
		}
	}
	if len(got) != 2 {
		t.Fatalf("origination after the catch-up: %+v, want ours at seq %d on two ports", got, o.Seq+1)
	}
}

// TestUnreachablePurgeRunsFromTheLoss: the LSA of an originator routing
// lost is purged UnreachableHold after the loss, not at an earlier aging
// pass (another LSA's expiry within the hold keeps it), and a purge due
// while a routing change waits for SPFDelay waits for that recomputation
// without leaving Tick a deadline that is already due.
func TestUnreachablePurgeRunsFromTheLoss(t *testing.T) {
	const spfDelay = 100 * time.Millisecond
	s, err := New(1, Config{SPFDelay: spfDelay})
	must(t, err)
	cfg := s.cfg
	// runTo ticks at every deadline up to end; after each Tick nothing may
	// be due at that time any more.
	runTo := func(end time.Duration) {
		t.Helper()
		for range 1000 {
			at, _ := s.NextDeadline()
			if at > end {
				return
			}
			s.Tick(at)
			s.Outputs(func(noc.PortID, *noc.Frame) {})
			if next, _ := s.NextDeadline(); next <= at {
				t.Fatalf("after Tick(%v) the next deadline is %v: due already", at, next)
			}
		}
		t.Fatalf("more than 1000 deadlines before %v", end)
	}
	lsa := func(now time.Duration, l LSA) {
		t.Helper()
		f := lsaFrame(2, l)
		must(t, s.HandleFrame(now, 0, &f))
	}
	has := func(id noc.NodeID) bool {
		for _, n := range s.Topology().Nodes {
			if n.ID == id {
				return true
			}
		}
		return false
	}
	for i, n := range []noc.NodeID{2, 3} {
		must(t, s.PortUp(0, noc.PortID(i)))
		h := helloFrame(n, Hello{Port: 0, Reply: true})
		must(t, s.HandleFrame(0, noc.PortID(i), &h))
	}
	lsa(0, LSA{Origin: 2, Seq: 4, Adjacencies: []Adjacency{{0, 1, 0}, {1, 3, 1}}})
	lsa(0, LSA{Origin: 3, Seq: 9, Adjacencies: []Adjacency{{0, 1, 1}, {1, 2, 1}, {2, 4, 0}}})
	lsa(0, LSA{Origin: 4, Seq: 1, Adjacencies: []Adjacency{{0, 3, 2}}})
	runTo(spfDelay)
	if _, hops, ok := s.NextHop(4); !ok || hops != 2 {
		t.Fatalf("route to 4: %d hops, %v", hops, ok)
	}
	// Node 3 drops its link to 4: routing loses 4 at the recomputation.
	t0 := time.Second
	lsa(t0, LSA{Origin: 3, Seq: 10, Adjacencies: []Adjacency{{0, 1, 1}, {1, 2, 1}}})
	lost := t0 + spfDelay
	runTo(lost)
	if _, _, ok := s.NextHop(4); ok || !has(4) {
		t.Fatalf("after the cut: route to 4 %v, LSA kept %v; want no route, kept", ok, has(4))
	}
	// An LSA of an unrelated node 5 that expires halfway through the hold
	// makes an aging pass there.
	expires := lost + cfg.UnreachableHold/2
	lsa(lost, LSA{Origin: 5, Seq: 1, Age: cfg.MaxAge - cfg.UnreachableHold/2, Adjacencies: []Adjacency{{0, 6, 0}}})
	runTo(expires)
	if st := s.Stats(); st.LSAsExpired != 1 || has(5) {
		t.Fatalf("node 5's LSA at its expiry: kept %v, %+v", has(5), st)
	}
	if st := s.Stats(); st.LSAsPurged != 0 || !has(4) {
		t.Fatalf("aging pass %v after routing lost 4 (hold %v): kept %v, purged %d", expires-lost, cfg.UnreachableHold, has(4), st.LSAsPurged)
	}
	// Just before the purge, node 2 announces a new neighbour: the
	// recomputation is due spfDelay/2 after the purge time.
	purge := lost + cfg.UnreachableHold
	runTo(purge - spfDelay/2)
	lsa(purge-spfDelay/2, LSA{Origin: 2, Seq: 5, Adjacencies: []Adjacency{{0, 1, 0}, {1, 3, 1}, {2, 7, 0}}})
	runTo(purge)
	if st := s.Stats(); st.LSAsPurged != 0 || !has(4) {
		t.Fatalf("purged at %v with a recomputation pending: kept %v, purged %d", purge, has(4), st.LSAsPurged)
	}
	runTo(purge + spfDelay/2)
	if st := s.Stats(); st.LSAsPurged != 1 || has(4) {
		t.Fatalf("after the recomputation: kept %v, purged %d; want 4 purged", has(4), st.LSAsPurged)
	}
}

// TestOwnSeqWrapsIntoTheNextIncarnation: once the own LSA's sequence
// number has reached its largest value (here by catching up with a copy
// there), the next origination moves to the next incarnation at sequence
// 1, which every other node takes as newer; each origination is counted.
func TestOwnSeqWrapsIntoTheNextIncarnation(t *testing.T) {
	s := adjacentState(t)
	var o TopoNode
	for _, n := range s.Topology().Nodes {
		if n.ID == 1 {
			o = n
		}
	}
	before := s.Stats().LSAsOriginated
	last := lsaFrame(2, LSA{Origin: 1, Incarnation: o.Incarnation, Seq: math.MaxUint32, Adjacencies: []Adjacency{{0, 9, 0}}})
	must(t, s.HandleFrame(time.Second, 0, &last))
	s.Tick(time.Second + s.cfg.OriginateDelay)
	var got []LSA
	s.Outputs(func(_ noc.PortID, f *noc.Frame) {
		if f.Op == OpLSA {
			var l LSA
			must(t, DecodeLSA(f.Payload, &l))
			got = append(got, l)
		}
	})
	if len(got) != 2 {
		t.Fatalf("origination after the catch-up: %+v, want one LSA on each of two ports", got)
	}
	for _, l := range got {
		if l.Origin != 1 || l.Incarnation != o.Incarnation+1 || l.Seq != 1 {
			t.Fatalf("origination past sequence %d: %+v, want incarnation %d, sequence 1", uint32(math.MaxUint32), l, o.Incarnation+1)
		}
		if c := compareLSA(&l, &LSA{Origin: 1, Incarnation: o.Incarnation, Seq: math.MaxUint32}); c <= 0 {
			t.Fatalf("the new LSA %+v does not supersede the one it wrapped past (compare %d)", l, c)
		}
	}
	if n := s.Stats().LSAsOriginated; n != before+1 {
		t.Fatalf("LSAsOriginated %d after one origination, was %d", n, before)
	}
}

// TestHelloFromAMovedPeerPort: a neighbour's hello repeated as before
// changes nothing; one that names another port at its end is a new
// adjacency: the own LSA is originated again listing that port.
func TestHelloFromAMovedPeerPort(t *testing.T) {
	s := adjacentState(t)
	lsas := func() (got []LSA) {
		s.Outputs(func(_ noc.PortID, f *noc.Frame) {
			if f.Op == OpLSA {
				var l LSA
				must(t, DecodeLSA(f.Payload, &l))
				got = append(got, l)
			}
		})
		return got
	}
	orig := s.Stats().LSAsOriginated
	now := time.Second
	same := helloFrame(2, Hello{Port: 0, Reply: true})
	must(t, s.HandleFrame(now, 0, &same))
	s.Tick(now + s.cfg.OriginateDelay)
	if got := lsas(); len(got) != 0 || s.Stats().LSAsOriginated != orig {
		t.Fatalf("a repeated hello: LSAs %+v, %d originations (were %d)", got, s.Stats().LSAsOriginated, orig)
	}
	now += time.Second
	moved := helloFrame(2, Hello{Port: 5, Reply: true})
	must(t, s.HandleFrame(now, 0, &moved))
	s.Tick(now + s.cfg.OriginateDelay)
	want := []Adjacency{{0, 2, 5}, {1, 3, 0}}
	var own []LSA
	for _, l := range lsas() {
		if l.Origin == 1 {
			own = append(own, l)
		}
	}
	if len(own) == 0 || !slices.Equal(own[0].Adjacencies, want) {
		t.Fatalf("own LSAs after node 2's hello from its port 5: %+v, want adjacencies %v", own, want)
	}
}
