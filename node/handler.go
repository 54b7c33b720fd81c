package node

import (
	"time"

	"github.com/aitherion/dpu/noc"
)

// Handler is the protocol engine plugged into a node core. It is given the
// frames for it and the link changes, with the node's routing to ask
// (noc.Routes, which the core implements); it emits frames into an outbox
// that the core drains after every call (TakeOutgoing) — it never calls back
// into the core.
type Handler interface {
	// HandleFrame is given every frame that arrives for the engine: frames
	// flagged noc.FlagPath at every node they cross, and frames addressed to
	// this node. in is the arrival port (noc.NoPort for a frame this node
	// sent to itself). f and its payload are valid only during the call.
	HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, rt noc.Routes)
	// PortState reports that the link on port p came up (to neighbour) or
	// went down.
	PortState(now time.Duration, p noc.PortID, up bool, neighbour noc.NodeID, rt noc.Routes)
	// Tick runs the engine's timers.
	Tick(now time.Duration, rt noc.Routes)
	// NextDeadline is when the engine next needs a Tick; ok false means
	// never (until new input arrives).
	NextDeadline() (at time.Duration, ok bool)
	// TakeOutgoing appends the frames emitted since the last call to dst
	// and forgets them; their payloads stay valid until the handler's next
	// call. A frame addressed to this node comes back to HandleFrame on a
	// later step. Given an empty dst, a handler may return its own buffer
	// instead and keep dst's room for its next frames: the caller uses only
	// what is returned, and hands it back (emptied) on the next call.
	TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing
}

var _ noc.Routes = (*Core)(nil)
