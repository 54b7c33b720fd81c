package node

import (
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/noc/link"
)

// clockSource is a link that measures its peer's clock (*link.Endpoint
// with Config.ClockStamps).
type clockSource interface {
	PollClock() (link.ClockSample, bool)
}

// Clock returns the node's fabric clock, nil unless the links carry clock
// timestamps (Config.Link.ClockStamps). Its reads (View, Now, Excluded,
// Stats) are the driver's to make between steps, at the clock's time:
// ClockView and ClusterTime take the core's.
func (c *Core) Clock() *clock.Clock { return c.clk }

// clockTime is the fabric clock's reading at the core's time now.
func (c *Core) clockTime(now time.Duration) time.Duration { return now + c.cfg.Link.ClockEpoch }

// ClockView is the fabric clock's view at the core's time now (an empty
// view when the clock does not run).
func (c *Core) ClockView(now time.Duration) clock.View {
	if c.clk == nil {
		return clock.View{At: c.clockTime(now), Self: c.cfg.Self}
	}
	return c.clk.View(c.clockTime(now))
}

// ClusterTime is the cluster timestamp at the core's time now; without the
// clock it is this node's own clock reading.
func (c *Core) ClusterTime(now time.Duration) clock.Timestamp {
	v := c.ClockView(now)
	return v.Cluster()
}

// clockSamples hands the clock the samples port p's link measured, once
// routing knows the neighbour they are of.
func (c *Core) clockSamples(p noc.PortID, pt *port) {
	src, ok := pt.ep.(clockSource)
	if !ok {
		return
	}
	for {
		s, ok := src.PollClock()
		if !ok {
			return
		}
		if c.clk != nil && pt.known {
			c.clk.Sample(c.clockTime(c.now), p, pt.neighbour, s)
		}
	}
}

// flushClock floods the clock's reports to the neighbours. A report a
// link refuses is dropped: the next one supersedes it.
func (c *Core) flushClock() {
	c.cout = c.clk.TakeOutputs(c.cout[:0])
	for i := range c.cout {
		o := &c.cout[i]
		for p, pt := range c.ports {
			if noc.PortID(p) == o.Except || !pt.up || !pt.known {
				continue
			}
			f := noc.Frame{Class: noc.ClassControl, Op: noc.OpClock, Src: c.cfg.Self, Dst: pt.neighbour, Payload: o.Payload}
			_ = c.SendPort(noc.PortID(p), &f) // refusals are counted in SendErrors
		}
		o.Payload = nil
	}
}
