package clock

import (
	"cmp"
	"slices"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Timelines. The cluster time is one node's clock, the reference's, plus
// a constant: Timeline{Origin, Ref, K} reads the clock of node Ref and
// adds K. A timeline starts at the node Origin (its clock, K = 0) and
// outlives it: when its reference leaves the fabric the lowest node still
// on it takes the reference over, with K chosen so that the time goes on
// where it was (its last estimate of the old reference's clock plus the
// old K), and a node lower than the reference that joins the timeline
// (the old reference back from a restart, say) takes it over the same
// way. So the cluster time does not jump when its reference goes or comes
// back: it moves by no more than the new reference's bound on the old at
// the hand-over.
//
// Every report carries the timeline its origin follows. At each report
// interval a node follows the best timeline it hears of among the nodes
// it has an estimate of, whose reference it has an estimate of too (or
// is): the lowest origin; of that origin's references, those that give
// one time (within both bounds) and that most nodes follow (a reference
// whose clock stepped, vouched for again by a node that never saw the
// step, gives another time); of those, the lowest reference. A node that
// hears of none keeps its own while it knows its reference; one whose
// reference is gone keeps it at the reference's last estimate, carried at
// the fastest drift, and takes it over if it is now the lowest node it
// knows. A node follows no timeline in the first ReportTTL after it
// started (it may know too few nodes to choose; its timestamps say they
// are on none: Timestamp.OnLine), and starts one of its own only if it
// then knows no lower node and has none to follow: one that joins a
// fabric (or comes back to it) waits for the fabric's, which it takes
// over if it is lower than the reference; in a fabric that starts at
// once only the lowest node starts one, and until a node follows one its
// timestamps are the lowest known node's clock, which is where that
// timeline begins. Two timelines that meet (the halves of a split join)
// leave one, the lowest origin's: the nodes of the other jump to it.
// The counts are in Stats (TimelineTakeovers, TimelineChanges,
// TimelineConflicts) and dpuctl stats.

// Timeline is the cluster time a node follows: node Ref's clock plus K,
// on the timeline node Origin started.
type Timeline struct {
	Origin, Ref noc.NodeID
	K           time.Duration
}

// better reports whether timeline a is preferred to b.
func (a Timeline) better(b Timeline) bool {
	return a.Origin < b.Origin || a.Origin == b.Origin && a.Ref < b.Ref
}

// Timeline returns the timeline this node follows, if any.
func (c *Clock) Timeline() (Timeline, bool) { return c.tl, c.hasTL }

// steer chooses the timeline to follow at now, from view v (see above).
func (c *Clock) steer(now time.Duration, v View) {
	if now-c.born < c.cfg.ReportTTL {
		// Started lately: it may know too few nodes to tell which of a
		// timeline's references most follow. Its timestamps say so.
		return
	}
	self := c.cfg.Self
	known := func(n noc.NodeID) bool {
		_, ok := v.Get(n)
		return n == self || ok
	}
	// at is the cluster time of timeline t by this node's view, relative
	// to its clock, within bound (ok: its reference is known).
	at := func(t Timeline) (time.Duration, time.Duration, bool) {
		if t.Ref == self {
			return t.K, 0, true
		}
		e, ok := v.Get(t.Ref)
		return e.Offset + t.K, e.Bound, ok
	}
	// The candidates: this node's timeline and those its reports carry,
	// whose references it knows, with how many nodes follow each.
	follows := map[Timeline]int{}
	if c.hasTL && known(c.tl.Ref) {
		follows[c.tl]++
	}
	for id, r := range c.reports {
		if r.HasTimeline && now-r.heard <= c.cfg.ReportTTL && known(id) && known(r.Timeline.Ref) {
			follows[r.Timeline]++
		}
	}
	cands := make([]Timeline, 0, len(follows))
	for t := range follows {
		cands = append(cands, t)
	}
	slices.SortFunc(cands, func(a, b Timeline) int {
		switch {
		case a.better(b):
			return -1
		case b.better(a):
			return 1
		}
		return cmp.Compare(a.K, b.K)
	})
	// The lowest origin's timeline, in its references that agree with
	// each other (give one time within both bounds) and that most nodes
	// follow: a reference whose clock stepped, heard again through a node
	// that never saw the step, gives another time, and is followed by
	// itself and such nodes alone.
	var best Timeline
	found := false
	if len(cands) > 0 {
		origin := cands[0].Origin
		type group struct {
			first Timeline
			n     int
		}
		var groups []group
		for _, t := range cands {
			if t.Origin != origin {
				break
			}
			a, ab, _ := at(t)
			placed := false
			for i := range groups {
				b, bb, _ := at(groups[i].first)
				if abs(a-b) <= ab+bb+time.Microsecond {
					groups[i].n += follows[t]
					placed = true
					break
				}
			}
			if !placed {
				groups = append(groups, group{first: t, n: follows[t]})
			}
		}
		g := groups[0]
		for _, h := range groups[1:] {
			if h.n > g.n {
				g = h
			}
		}
		if len(groups) > 1 {
			c.stats.TimelineConflicts++
		}
		best, found = g.first, true
	}
	lowest := len(v.Estimates) == 0 || v.Estimates[0].Node > self
	switch {
	case found && best.Ref != self && self < best.Ref:
		// Lower than the timeline's reference: this node takes it over.
		e, _ := v.Get(best.Ref)
		c.tl, c.hasTL = Timeline{Origin: best.Origin, Ref: self, K: e.Offset + best.K}, true
		c.stats.TimelineTakeovers++
	case found:
		if c.hasTL && c.tl != best {
			c.stats.TimelineChanges++
		}
		c.tl, c.hasTL = best, true
	case c.hasTL && c.tl.Ref != self && lowest && c.refOK:
		// The reference is gone and this node is the lowest it knows.
		c.tl = Timeline{Origin: c.tl.Origin, Ref: self, K: c.refX + c.tl.K}
		c.stats.TimelineTakeovers++
	case !c.hasTL && lowest:
		// No timeline to follow a ReportTTL after it started, and no
		// lower node known: a fabric of its own (or one starting with
		// it). (A restarted node that started one before its restart
		// starts the same origin again: its references give another time
		// than the fabric's, which more nodes follow.)
		c.tl, c.hasTL = Timeline{Origin: self, Ref: self}, true
	}
	if !c.hasTL {
		return
	}
	if c.tl.Ref == self {
		c.refX, c.refB, c.refAt, c.refOK = 0, 0, now, true
	} else if e, ok := v.Get(c.tl.Ref); ok {
		c.refX, c.refB, c.refAt, c.refOK = e.Offset, e.Bound, now, true
	}
}

// timestamp is the cluster timestamp of view v on this node's timeline.
func (c *Clock) timestamp(v *View) {
	if !c.hasTL {
		return
	}
	tl := c.tl
	v.Timeline, v.HasTimeline = tl, true
	switch e, ok := v.Get(tl.Ref); {
	case tl.Ref == v.Self:
		v.ref = Estimate{Node: v.Self}
	case ok:
		v.ref = e
	case c.refOK:
		// The reference is gone: its last estimate, carried at the
		// fastest drift the clocks may have.
		grow := ceilDur(c.cfg.MaxRate * float64(v.At-c.refAt))
		v.ref = Estimate{Node: tl.Ref, Offset: c.refX, Bound: c.refB + max(grow, 0)}
	default:
		v.HasTimeline = false
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
