package agent

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/host"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/node"
)

// The fabric clock (noc/clock) runs in the core over the links' clock
// timestamps; the agent only reads it, at the core's time.

// clockEpoch is CLOCK_MONOTONIC at the core's time 0: the links stamp
// their clock exchanges with it added, so a node's clock is its monotonic
// clock (which its time namespace offsets), not its agent's uptime, and
// survives a restart of the agent.
func (a *Agent) clockEpoch() time.Duration {
	return epochOf(a.now, func() (time.Duration, error) {
		var ts unix.Timespec
		err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return time.Duration(ts.Nano()), err
	})
}

// epochOf is mono's reading at now's 0. Each sample reads mono between
// two readings of now, and the tightest of a few is taken: a thread
// preempted between two reads (a loaded machine) would otherwise offset
// the node's clock, for its whole run, by as long as it waited, beyond
// every bound the fabric clock states. A mono that fails gives 0 (the
// uptime, which still works).
func epochOf(now func() time.Duration, mono func() (time.Duration, error)) time.Duration {
	var best, gap time.Duration = 0, -1
	for range 16 {
		before := now()
		m, err := mono()
		if err != nil {
			return 0 // cannot fail on Linux
		}
		after := now()
		if g := after - before; gap < 0 || g < gap {
			best, gap = m-(before+after)/2, g
		}
		if gap <= time.Microsecond {
			break
		}
	}
	return best
}

// clusterTimeLocked is the cluster time now, under a.mu.
func (a *Agent) clusterTimeLocked() *ctl.ClusterTime {
	return clusterTime(a.core.ClusterTime(max(a.now(), a.stepAt)))
}

// logExclusionsLocked logs the neighbours the clock excluded since the last
// call (the counters are in dpuctl stats; dpuctl clock show has the rest).
func (a *Agent) logExclusionsLocked() {
	c := a.core.Clock()
	if c == nil {
		return
	}
	for _, e := range c.TakeExclusions() {
		port := ""
		if int(e.Port) < len(a.ports) {
			port = a.ports[e.Port].spec.Name
		}
		a.log.Warn("clock: neighbour excluded", "port", port, "node", e.Node, "reason", e.Reason, "for", e.Until-e.Since)
	}
}

// clockedBackend is the host socket's backend with the cluster clock.
type clockedBackend struct {
	*host.Backend
	a *Agent
}

var _ hostif.ClusterClock = clockedBackend{}

// ClusterTime implements hostif.ClusterClock (CLOCK, dpu_clock,
// client.Clock): a read of the core's clock under the core's mutex, no
// step.
func (b clockedBackend) ClusterTime() wire.ClusterTime {
	a := b.a
	a.mu.Lock()
	t := a.core.ClusterTime(max(a.now(), a.stepAt))
	a.mu.Unlock()
	return wire.ClusterTime{Time: int64(t.Time), Error: int64(t.Error), Ref: uint32(t.Ref)}
}

// ClockEntries implements ctl.ClockSource (dpuctl clock show): this node
// with the cluster time, every node the clock has an estimate of, every
// neighbour it excludes.
func (s source) ClockEntries() []ctl.ClockEntry {
	var out []ctl.ClockEntry
	s.snap(func(c *node.Core) {
		now := max(s.a.now(), s.a.stepAt)
		v := c.ClockView(now)
		out = append(out, ctl.ClockEntry{Node: s.a.cfg.Node, Self: true, Cluster: clusterTime(v.Cluster())})
		for _, e := range v.Estimates {
			out = append(out, ctl.ClockEntry{Node: e.Node, Offset: e.Offset, Bound: e.Bound, Rate: e.Rate, Hops: e.Hops, Port: s.portName(e.Port)})
		}
		for _, x := range v.Excluded {
			out = append(out, ctl.ClockEntry{Node: x.Node, Port: s.portName(x.Port), Excluded: true, Reason: x.Reason, ExcludedFor: x.Until - v.At})
		}
	})
	return out
}

// clockCounters adds the fabric clock's counters to dpuctl stats.
func clockCounters(c *clock.Clock, add func(string, uint64)) {
	if c == nil {
		return
	}
	st := c.Stats()
	add("clock_samples", st.Samples)
	add("clock_samples_skipped", st.Skipped)
	add("clock_exclusions", st.Exclusions)
	add("clock_samples_ignored", st.Ignored)
	add("clock_reports_sent", st.ReportsSent)
	add("clock_reports_heard", st.ReportsHeard)
	add("clock_reports_malformed", st.ReportsMalformed)
	add("clock_inconsistent", st.Inconsistent)
	add("clock_timeline_takeovers", st.TimelineTakeovers)
	add("clock_timeline_changes", st.TimelineChanges)
	add("clock_timeline_conflicts", st.TimelineConflicts)
	add("clock_neighbours", uint64(st.NeighboursMeasured))
}

// clusterTime is the control socket's reading of timestamp t (its
// timeline named once the node follows one).
func clusterTime(t clock.Timestamp) *ctl.ClusterTime {
	ct := &ctl.ClusterTime{Time: t.Time, Error: t.Error, Ref: t.Ref}
	if t.OnLine {
		line := t.Line.Origin
		ct.Line = &line
	}
	return ct
}
