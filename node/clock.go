package node

import (
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
// Stats) are the driver's to make between steps.
func (c *Core) Clock() *clock.Clock { return c.clk }

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
			c.clk.Sample(c.now, p, pt.neighbour, s)
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
