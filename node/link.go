package node

import (
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
)

// Link is what a port of the core talks through: a reliable, ordered
// message link over the port's datagrams. *link.Endpoint is the link of
// every real port (AddPort); the simulator may plug in another
// implementation (AddLink) that carries whole frames over virtual wires.
type Link interface {
	// Send queues a message for the peer (link.ErrDown while down,
	// link.ErrBackpressure when there is no room).
	Send(now time.Duration, msg []byte) error
	// Input processes one datagram that arrived on the port.
	Input(now time.Duration, datagram []byte) error
	// Output writes the next datagram for the port into buf.
	Output(now time.Duration, buf []byte) (int, bool)
	// Receive returns the next in-order message, valid until the next
	// Receive.
	Receive() ([]byte, bool)
	// Tick runs the link's timers; NextDeadline is when it must run next.
	Tick(now time.Duration)
	NextDeadline() time.Duration
	// PollEvent returns the oldest up/down transition not yet returned.
	PollEvent() (link.Event, bool)
	Session() (session uint64, epoch uint32)
	Config() link.Config
	Stats() link.Stats
}

var _ Link = (*link.Endpoint)(nil)

// AddLink adds port p (ids are dense, as for AddPort) served by l instead
// of a link endpoint the core makes itself.
func (c *Core) AddLink(p noc.PortID, name string, l Link) error {
	if int(p) != len(c.ports) {
		return fmt.Errorf("%w: port %d added out of order (next is %d)", ErrPortUp, p, len(c.ports))
	}
	c.ports = append(c.ports, &port{name: name, ep: l})
	return nil
}
