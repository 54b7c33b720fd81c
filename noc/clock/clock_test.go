package clock_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/noc/link"
)

// peerClock is a neighbour's clock as seen from this node's: at this
// node's time t it reads t + off + rate·t.
type peerClock struct {
	off  time.Duration
	rate float64
}

func (p peerClock) at(t time.Duration) time.Duration {
	return t + p.off + time.Duration(p.rate*float64(t))
}

// exchange is one sample sent at t with the given one-way delays.
func (p peerClock) exchange(t, d1, d2 time.Duration) link.ClockSample {
	t2 := p.at(t + d1)
	return link.ClockSample{T1: t, T2: t2, T3: t2, T4: t + d1 + d2}
}

// TestNeighbourWithinBound: over a link 10x more delayed one way than the
// other, with jitter, the estimate of a drifting neighbour stays within its
// bound at every sample, and the bound narrows to about the link's
// asymmetry once the window has samples.
func TestNeighbourWithinBound(t *testing.T) {
	for _, pc := range []peerClock{{off: 700 * time.Millisecond, rate: 180e-6}, {off: -time.Second, rate: -200e-6}, {}} {
		c, err := clock.New(clock.Config{Self: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var last clock.Estimate
		for i := range 2000 {
			now := time.Duration(i) * 10 * time.Millisecond
			d1 := 40*time.Microsecond + time.Duration(rng.Int64N(50000))
			d2 := 4*time.Microsecond + time.Duration(rng.Int64N(50000))
			c.Sample(now, 0, 2, pc.exchange(now, d1, d2))
			at := now + d1 + d2 + 3*time.Millisecond
			v := c.View(at)
			e, ok := v.Get(2)
			if !ok {
				t.Fatalf("%+v: no estimate after a sample", pc)
			}
			truth := pc.at(at) - at
			if d := e.Offset - truth; d > e.Bound || -d > e.Bound {
				t.Fatalf("%+v, sample %d: %v ± %v, truth %v", pc, i, e.Offset, e.Bound, truth)
			}
			last = e
		}
		t.Logf("%+v: %+v", pc, last)
		// The asymmetry (36 µs each way's base apart) is half-visible:
		// the bound must come down to about half the base round trip.
		if last.Bound > 40*time.Microsecond || last.Bound < 20*time.Microsecond {
			t.Errorf("%+v: bound %v after 20 s, want about 22 µs", pc, last.Bound)
		}
		if d := last.Rate - pc.rate/(1); d > 5e-6 || d < -5e-6 {
			t.Errorf("%+v: rate %g", pc, last.Rate)
		}
	}
}

// TestBadNeighboursAreExcluded: timestamps that go backwards, a negative
// round trip, a step and an impossible rate each exclude the neighbour
// with its reason, and the excluded neighbour's samples move nothing.
func TestBadNeighboursAreExcluded(t *testing.T) {
	good := peerClock{off: time.Second, rate: 50e-6}
	const d = 20 * time.Microsecond
	for _, tc := range []struct {
		name   string
		bad    func(now time.Duration) link.ClockSample
		reason string
	}{
		{"answer before request", func(now time.Duration) link.ClockSample {
			s := good.exchange(now, d, d)
			s.T3 = s.T2 - time.Microsecond
			return s
		}, "backwards"},
		{"clock back between answers", func(now time.Duration) link.ClockSample {
			s := good.exchange(now, d, d)
			s.T2 -= 100 * time.Millisecond
			s.T3 = s.T2
			return s
		}, "went backwards"},
		{"negative round trip", func(now time.Duration) link.ClockSample {
			s := good.exchange(now, d, d)
			s.T3 += 3 * d
			return s
		}, "negative round trip"},
		{"step", func(now time.Duration) link.ClockSample {
			return peerClock{off: good.off + 5*time.Millisecond, rate: good.rate}.exchange(now, d, d)
		}, "jumped ahead"},
		{"offset beyond any fabric", func(now time.Duration) link.ClockSample {
			s := good.exchange(now, d, d)
			s.T2, s.T3 = s.T2+1<<60, s.T3+1<<60
			return s
		}, "more than"},
		{"impossible rate", func(now time.Duration) link.ClockSample {
			fast := peerClock{off: good.off, rate: 3000e-6}
			return fast.exchange(now, d, d)
		}, "ppm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := clock.New(clock.Config{Self: 1}, 0)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Duration(0)
			for range 300 {
				now += 10 * time.Millisecond
				c.Sample(now, 3, 9, good.exchange(now, d, d))
			}
			before, _ := c.View(now).Get(9)
			for range 50 {
				now += 10 * time.Millisecond
				c.Sample(now, 3, 9, tc.bad(now))
				if len(c.Excluded(now)) > 0 {
					break
				}
			}
			ex := c.Excluded(now)
			if len(ex) != 1 || ex[0].Node != 9 || ex[0].Port != 3 || !strings.Contains(ex[0].Reason, tc.reason) {
				t.Fatalf("excluded %+v, want node 9 on port 3 for %q", ex, tc.reason)
			}
			if taken := c.TakeExclusions(); len(taken) != 1 {
				t.Errorf("TakeExclusions: %+v", taken)
			}
			if _, ok := c.View(now).Get(9); ok {
				t.Error("an excluded neighbour is still estimated")
			}
			// Its samples count for nothing while the exclusion lasts.
			c.Sample(now+time.Millisecond, 3, 9, good.exchange(now+time.Millisecond, d, d))
			if _, ok := c.View(now + time.Millisecond).Get(9); ok || c.Stats().Ignored == 0 {
				t.Error("a sample of an excluded neighbour was taken")
			}
			_ = before
		})
	}
}

// fabric is a few clocks wired by hand: every node measures its
// neighbours with exact (delay-free but for the given asymmetry) samples
// and the reports are handed around until they settle.
type fabric struct {
	clocks []*clock.Clock
	truth  []peerClock // each node's clock against an ideal one
	links  [][2]int
	cut    map[int]bool // links (by index) that carry nothing
	delay  func(a, b int) (time.Duration, time.Duration)
	now    time.Duration // the ideal time run to
}

func (f *fabric) run(t *testing.T, until time.Duration) {
	t.Helper()
	port := func(a, b int) noc.PortID {
		p := 0
		for _, l := range f.links {
			if l[0] == a && l[1] == b || l[1] == a && l[0] == b {
				return noc.PortID(p)
			}
			if l[0] == a || l[1] == a {
				p++
			}
		}
		t.Fatal("no such link")
		return 0
	}
	start := f.now
	f.now += until
	for now := start; now < f.now; now += 20 * time.Millisecond {
		for i, l := range f.links {
			if f.cut[i] {
				continue
			}
			for _, ab := range [][2]int{{l[0], l[1]}, {l[1], l[0]}} {
				a, b := ab[0], ab[1]
				d1, d2 := f.delay(a, b)
				la := f.truth[a].at(now)
				// b's clock as a function of a's: through the ideal time.
				ideal := now + d1
				t2 := f.truth[b].at(ideal)
				s := link.ClockSample{T1: la, T2: t2, T3: t2, T4: f.truth[a].at(now + d1 + d2)}
				f.clocks[a].Sample(la, port(a, b), noc.NodeID(b), s)
			}
		}
		for a, c := range f.clocks {
			c.Tick(f.truth[a].at(now))
		}
		// Flood until quiet.
		for moved := true; moved; {
			moved = false
			for a, c := range f.clocks {
				for _, o := range c.TakeOutputs(nil) {
					for i, l := range f.links {
						if f.cut[i] {
							continue
						}
						var b int
						switch a {
						case l[0]:
							b = l[1]
						case l[1]:
							b = l[0]
						default:
							continue
						}
						if port(a, b) == o.Except {
							continue
						}
						moved = true
						if err := f.clocks[b].HandleReport(f.truth[b].at(now), port(b, a), o.Payload); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
	}
}

// TestLoopsCutTheBound: on a ring of six whose links are measured with
// asymmetric delays, node 0's bound on the node opposite is narrower than
// the sum of the bounds along either half of the ring (the loop
// correction), and every estimate holds the truth.
func TestLoopsCutTheBound(t *testing.T) {
	const n = 6
	f := &fabric{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		c, err := clock.New(clock.Config{Self: noc.NodeID(i), ReportInterval: 200 * time.Millisecond}, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.clocks = append(f.clocks, c)
		f.truth = append(f.truth, peerClock{off: time.Duration(rng.Int64N(int64(2*time.Second))) - time.Second, rate: (rng.Float64()*2 - 1) * 100e-6})
		f.links = append(f.links, [2]int{i, (i + 1) % n})
	}
	f.delay = func(a, b int) (time.Duration, time.Duration) {
		// Every link is 30 µs one way and 10 µs the other.
		if (a+1)%n == b {
			return 30 * time.Microsecond, 10 * time.Microsecond
		}
		return 10 * time.Microsecond, 30 * time.Microsecond
	}
	f.run(t, 6*time.Second)
	at := f.truth[0].at(6 * time.Second)
	v := f.clocks[0].View(at)
	if v.Inconsistent || len(v.Estimates) != n-1 {
		t.Fatalf("view: %+v", v)
	}
	for _, e := range v.Estimates {
		truth := f.truth[e.Node].at(6*time.Second) - at
		if d := e.Offset - truth; d > e.Bound || -d > e.Bound {
			t.Errorf("node %d: %v ± %v, truth %v", e.Node, e.Offset, e.Bound, truth)
		}
	}
	t.Logf("view of node 0: %+v", v.Estimates)
	far, _ := v.Get(3)
	near, _ := v.Get(1)
	if far.Hops != 3 || far.Bound >= 3*near.Bound {
		t.Errorf("node 3 (%d hops): bound %v, one hop's %v: the loop did not narrow it", far.Hops, far.Bound, near.Bound)
	}
	ref := f.clocks[0].Now(at)
	if ref.Ref != 0 || ref.Error != 0 || ref.Time != at+ref.Line.K {
		t.Errorf("node 0's cluster time %+v: it is the reference", ref)
	}
	// Every node is on node 0's timeline, within its bound of node 0's
	// clock plus the timeline's K.
	for i := range n {
		ts := f.clocks[i].Now(f.truth[i].at(6 * time.Second))
		truth := at + ref.Line.K
		if ts.Line != ref.Line || ts.Ref != 0 || (i != 0) != (ts.Error > 0) || ts.Time-truth > ts.Error || truth-ts.Time > ts.Error {
			t.Errorf("node %d's cluster time %+v: want %v within its bound, on %+v", i, ts, truth, ref.Line)
		}
	}
}

// TestTimelineOutlivesItsReference: on a line of four, the cluster time's
// reference (node 0) stops; node 1, now the lowest, takes the timeline
// over where it was, the others follow it, and the time goes on within
// the bounds. When node 0 comes back with a fresh clock it waits for the
// fabric's timeline, takes it over (lower than node 1), and again the
// time does not jump.
func TestTimelineOutlivesItsReference(t *testing.T) {
	const n = 4
	mk := func(i int, now time.Duration) *clock.Clock {
		c, err := clock.New(clock.Config{Self: noc.NodeID(i), ReportInterval: 200 * time.Millisecond}, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	f := &fabric{}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		f.truth = append(f.truth, peerClock{off: time.Duration(rng.Int64N(int64(2*time.Second))) - time.Second, rate: (rng.Float64()*2 - 1) * 100e-6})
		f.clocks = append(f.clocks, mk(i, f.truth[i].at(0)))
	}
	f.links = [][2]int{{0, 1}, {1, 2}, {2, 3}}
	f.delay = func(a, b int) (time.Duration, time.Duration) { return 20 * time.Microsecond, 25 * time.Microsecond }
	f.run(t, 4*time.Second)
	// truth of node i's cluster time at global time g
	truth := func(ts clock.Timestamp, g time.Duration) time.Duration { return f.truth[ts.Ref].at(g) + ts.Line.K }
	check := func(what string, g time.Duration, i int) clock.Timestamp {
		t.Helper()
		ts := f.clocks[i].Now(f.truth[i].at(g))
		if d := ts.Time - truth(ts, g); d > ts.Error || -d > ts.Error {
			t.Fatalf("%s: node %d's cluster time %+v is %v off its truth", what, i, ts, d)
		}
		return ts
	}
	before := check("before", 4*time.Second, 3)
	if before.Ref != 0 {
		t.Fatalf("node 3 follows %+v, want node 0's clock", before)
	}
	// node 0 stops: its link goes, its reports age out
	f.cut = map[int]bool{0: true}
	f.clocks[1].PortDown(0)
	f.run(t, 4*time.Second)
	after := check("after node 0 stopped", 8*time.Second, 3)
	if after.Ref != 1 || after.Line.Origin != before.Line.Origin {
		t.Fatalf("node 3 follows %+v after node 0 stopped, want node 1's clock on timeline %d", after, before.Line.Origin)
	}
	// the timeline went on: the truth moved from node 0's clock to node
	// 1's by no more than node 1's bound on node 0 and the drift since
	if jump := truth(after, 8*time.Second) - (f.truth[0].at(8*time.Second) + before.Line.K); jump > time.Millisecond || jump < -time.Millisecond {
		t.Fatalf("the cluster time jumped by %v when its reference stopped", jump)
	}
	// node 0 comes back, a fresh clock
	f.clocks[0] = mk(0, f.truth[0].at(f.now))
	f.cut = nil
	f.run(t, 4*time.Second)
	back := check("after node 0 came back", 12*time.Second, 3)
	if back.Ref != 0 || back.Line.Origin != before.Line.Origin {
		t.Fatalf("node 3 follows %+v after node 0 came back, want node 0's clock on timeline %d", back, before.Line.Origin)
	}
	if jump := truth(back, 12*time.Second) - truth(after, 12*time.Second); jump > time.Millisecond || jump < -time.Millisecond {
		t.Fatalf("the cluster time jumped by %v when node 0 came back", jump)
	}
}
