package clock

import (
	"errors"
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
)

// Config shapes a Clock. Zero fields take the defaults named.
type Config struct {
	Self noc.NodeID
	// MaxRate is the fastest two clocks are believed to drift apart
	// (default 500 ppm); a neighbour that needs more is excluded.
	MaxRate float64
	// Window is how far back samples count (default 16 s), in Buckets
	// buckets (default 16) of which each keeps its narrowest sample.
	Window  time.Duration
	Buckets int
	// MaxDelay: a sample whose round trip is longer is skipped (default 10 ms).
	MaxDelay time.Duration
	// Exclude is how long an excluded neighbour stays out (default Window).
	Exclude time.Duration
	// ReportInterval is how often the node floods its measurements
	// (default 1 s); a report not refreshed for ReportTTL (default four
	// intervals) is forgotten.
	ReportInterval, ReportTTL time.Duration
	// Bug plants an estimator bug, for tests of the simulator's checker
	// only (refused unless built with -tags dpubug).
	Bug PlantedBug
}

// PlantedBug names a deliberate estimator bug. Tests plant one to prove
// that the simulator's clock checker can fail.
type PlantedBug uint8

// Planted bugs.
const (
	BugNone PlantedBug = iota
	// BugSymmetric takes a link's two delays for equal to within half the
	// round trip: each sample's bound is half what it must be.
	BugSymmetric
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("clock: invalid config")

func (c *Config) fill() error {
	if c.MaxRate == 0 {
		c.MaxRate = 500e-6
	}
	if c.Window == 0 {
		c.Window = 16 * time.Second
	}
	if c.Buckets == 0 {
		c.Buckets = 16
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 10 * time.Millisecond
	}
	if c.Exclude == 0 {
		c.Exclude = c.Window
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = time.Second
	}
	if c.ReportTTL == 0 {
		c.ReportTTL = 4 * c.ReportInterval
	}
	switch {
	case c.Bug != BugNone && !bugsCompiled:
		return fmt.Errorf("%w: planted bug %d in a build without them (-tags dpubug)", ErrConfig, c.Bug)
	case c.MaxRate <= 0 || c.MaxRate > maxRate:
		return fmt.Errorf("%w: MaxRate %g outside (0, %g]", ErrConfig, c.MaxRate, maxRate)
	case c.Buckets < 2 || c.Buckets > 1024:
		return fmt.Errorf("%w: Buckets %d outside [2, 1024]", ErrConfig, c.Buckets)
	case c.Window < time.Duration(c.Buckets) || c.MaxDelay <= 0 || c.Exclude < 0 || c.ReportInterval <= 0 || c.ReportTTL < c.ReportInterval:
		return fmt.Errorf("%w: Window %v, MaxDelay %v, Exclude %v, ReportInterval %v, ReportTTL %v",
			ErrConfig, c.Window, c.MaxDelay, c.Exclude, c.ReportInterval, c.ReportTTL)
	}
	return nil
}

// Clock is one node's fabric clock: a filter per neighbour, the newest
// report of every other node, and the composition of both. It is a
// deterministic state machine driven by the node core; not safe for
// concurrent use.
type Clock struct {
	cfg        Config
	peers      []*peer // by port
	reports    map[noc.NodeID]*report
	nextReport time.Duration
	out        []Output
	excluded   []Exclusion // since the last TakeExclusions
	stats      Stats
	scratch    []byte

	// The timeline followed (timeline.go), and the last estimate of its
	// reference's clock (refX ± refB at refAt, this clock's time).
	tl                Timeline
	hasTL, refOK      bool
	born              time.Duration
	refX, refB, refAt time.Duration
}

// peer is the neighbour on one port.
type peer struct {
	node     noc.NodeID
	known    bool
	f        filter
	out      bool // excluded
	until    time.Duration
	reason   string
	since    time.Duration
	excluded uint64
}

// report is the newest report of one origin.
type report struct {
	Report
	heard time.Duration // this clock's time it arrived
}

// Output is a report to flood: to every up port but Except (noc.NoPort:
// every up port).
type Output struct {
	Except  noc.PortID
	Payload []byte
}

// Exclusion is a neighbour this node stopped believing.
type Exclusion struct {
	Port   noc.PortID
	Node   noc.NodeID
	Reason string
	Since  time.Duration // this clock's time it was excluded
	Until  time.Duration // when it may be heard again
}

// Stats counts what the clock did.
type Stats struct {
	Samples, Skipped   uint64 // samples taken in; skipped (too slow, or this clock's times out of order)
	Exclusions         uint64 // neighbours excluded
	Ignored            uint64 // samples of excluded neighbours
	ReportsSent        uint64
	ReportsHeard       uint64 // newer reports taken in
	ReportsStale       uint64 // reports no newer than the one held
	ReportsMalformed   uint64
	Inconsistent       uint64 // compositions whose measurements contradicted each other
	ReportsForgotten   uint64
	TimelineTakeovers  uint64 // times this node took its timeline's reference over
	TimelineChanges    uint64 // times it went over to another timeline (or reference)
	TimelineConflicts  uint64 // references of its timeline not followed: their time was another
	NeighboursMeasured int    // neighbours with an estimate now
}

// New returns a clock that knows no neighbour yet.
func New(cfg Config, now time.Duration) (*Clock, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Clock{cfg: cfg, reports: map[noc.NodeID]*report{}, nextReport: now + cfg.ReportInterval, born: now}, nil
}

// Config returns the configuration with its defaults filled in.
func (c *Clock) Config() Config { return c.cfg }

func (c *Clock) peer(p noc.PortID) *peer {
	for int(p) >= len(c.peers) {
		c.peers = append(c.peers, &peer{f: newFilter(&c.cfg)})
	}
	return c.peers[p]
}

// Sample takes one exchange measured on port p with neighbour n.
func (c *Clock) Sample(now time.Duration, p noc.PortID, n noc.NodeID, s link.ClockSample) {
	if p == noc.NoPort || p == noc.LocalPort {
		return
	}
	pr := c.peer(p)
	if !pr.known || pr.node != n {
		pr.node, pr.known = n, true
		pr.f.reset()
		pr.out = false
	}
	if pr.out {
		if now < pr.until {
			c.stats.Ignored++
			return
		}
		pr.out, pr.reason = false, ""
		pr.f.reset()
	}
	skipped := pr.f.skipped
	if why := pr.f.add(s); why != "" {
		pr.f.reset()
		pr.out, pr.reason, pr.since, pr.until = true, why, now, now+c.cfg.Exclude
		pr.excluded++
		c.stats.Exclusions++
		c.excluded = append(c.excluded, Exclusion{Port: p, Node: n, Reason: why, Since: now, Until: pr.until})
		return
	}
	if pr.f.skipped != skipped {
		c.stats.Skipped++
		return
	}
	c.stats.Samples++
}

// PortDown forgets the samples of port p's neighbour (an exclusion stands
// until it ends).
func (c *Clock) PortDown(p noc.PortID) {
	if int(p) < len(c.peers) {
		c.peers[p].f.reset()
	}
}

// TakeExclusions returns the neighbours excluded since the last call, for
// the driver's log.
func (c *Clock) TakeExclusions() []Exclusion {
	e := c.excluded
	c.excluded = nil
	return e
}

// Tick floods this node's report when it is due and forgets stale reports.
func (c *Clock) Tick(now time.Duration) {
	if now < c.nextReport {
		return
	}
	c.nextReport = now + c.cfg.ReportInterval
	for id, r := range c.reports {
		if now-r.heard > c.cfg.ReportTTL {
			delete(c.reports, id)
			c.stats.ReportsForgotten++
		}
	}
	c.steer(now, c.view(now))
	rep := Report{Origin: c.cfg.Self, At: now, Timeline: c.tl, HasTimeline: c.hasTL}
	for _, pr := range c.peers {
		if pr.known && !pr.out && pr.f.valid && len(rep.Links) < MaxLinks {
			l := pr.f.line
			lo, hi := l.Eval(now)
			rep.Links = append(rep.Links, LinkReport{Node: pr.node, Line: Line{At: now, Lo: lo, Hi: hi, RLo: l.RLo, RHi: l.RHi, Rate: l.Rate}})
		}
	}
	c.out = append(c.out, Output{Except: noc.NoPort, Payload: rep.AppendTo(nil)})
	c.stats.ReportsSent++
}

// NextDeadline is when Tick must run next.
func (c *Clock) NextDeadline() time.Duration { return c.nextReport }

// HandleReport takes a report that arrived on port in; a newer one than
// held is kept and flooded on.
func (c *Clock) HandleReport(now time.Duration, in noc.PortID, payload []byte) error {
	var r Report
	if err := r.Decode(payload); err != nil {
		c.stats.ReportsMalformed++
		return err
	}
	if r.Origin == c.cfg.Self {
		return nil
	}
	if old := c.reports[r.Origin]; old != nil && r.At <= old.At && now-old.heard <= c.cfg.ReportTTL {
		c.stats.ReportsStale++
		return nil
	}
	c.reports[r.Origin] = &report{Report: r, heard: now}
	c.stats.ReportsHeard++
	c.out = append(c.out, Output{Except: in, Payload: append([]byte(nil), payload...)})
	return nil
}

// TakeOutputs appends the reports to flood to dst.
func (c *Clock) TakeOutputs(dst []Output) []Output {
	dst = append(dst, c.out...)
	clear(c.out)
	c.out = c.out[:0]
	return dst
}

// Stats returns the counters.
func (c *Clock) Stats() Stats {
	s := c.stats
	for _, pr := range c.peers {
		if pr.known && !pr.out && pr.f.valid {
			s.NeighboursMeasured++
		}
	}
	return s
}

// Excluded lists the neighbours excluded now.
func (c *Clock) Excluded(now time.Duration) []Exclusion {
	var ex []Exclusion
	for i, pr := range c.peers {
		if pr.out && now < pr.until {
			ex = append(ex, Exclusion{Port: noc.PortID(i), Node: pr.node, Reason: pr.reason, Since: pr.since, Until: pr.until})
		}
	}
	return ex
}
