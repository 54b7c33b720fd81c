package node

import (
	"time"

	"github.com/aitherion/dpu/noc"
)

// Sender is what a Handler uses to emit frames. The node core implements it.
// Frames are encoded before the call returns; the caller keeps ownership of f
// and its payload.
type Sender interface {
	// Self is this node's id.
	Self() noc.NodeID
	// SendPort queues f on the reliable link of port p.
	SendPort(p noc.PortID, f *noc.Frame) error
	// SendNode sends f toward f.Dst by the routing table. A frame addressed
	// to this node is handed back to the Handler on a later step.
	SendNode(f *noc.Frame) error
	// NextHop returns the port toward dst and the number of hops to it.
	NextHop(dst noc.NodeID) (p noc.PortID, hops int, ok bool)
	// Neighbour returns the node at the other end of port p, if the link is up.
	Neighbour(p noc.PortID) (noc.NodeID, bool)
}

// Handler is the protocol engine plugged into a node core.
type Handler interface {
	// HandleFrame is given every frame that arrives for the engine: frames
	// flagged noc.FlagPath at every node they cross, and frames addressed to
	// this node. in is the arrival port (noc.NoPort for a frame this node
	// sent to itself). f and its payload are valid only during the call.
	HandleFrame(now time.Duration, in noc.PortID, f *noc.Frame, out Sender)
	// PortState reports that the link on port p came up (to neighbour) or
	// went down.
	PortState(now time.Duration, p noc.PortID, up bool, neighbour noc.NodeID, out Sender)
	// Tick runs the engine's timers.
	Tick(now time.Duration, out Sender)
	// NextDeadline is when the engine next needs a Tick; ok false means
	// never (until new input arrives).
	NextDeadline() (at time.Duration, ok bool)
}
