package noc

// Ranges of Control-class op values, so that the packages speaking the
// Control class never collide. Load, Store and Atomic ops belong to the
// coherence engine alone.
const (
	// OpRouteFirst..OpRouteLast: link-state routing (hello, LSA).
	OpRouteFirst Op = 1
	OpRouteLast  Op = 15
	// OpCoherenceFirst..OpCoherenceLast: ownership protocol and other
	// coherence control messages.
	OpCoherenceFirst Op = 16
	OpCoherenceLast  Op = 127
	// OpAgentFirst..OpAgentLast: agent-to-agent management (GPU accounting,
	// diagnostics).
	OpAgentFirst Op = 128
	OpAgentLast  Op = 255
)

// IsRouting reports whether f is a routing control frame.
func (f *Frame) IsRouting() bool {
	return f.Class == ClassControl && f.Op >= OpRouteFirst && f.Op <= OpRouteLast
}

// Agent-range ops the node core itself answers.
const (
	// OpEcho asks the destination node to send the frame back (FlagReply
	// set, source and destination swapped, payload unchanged): the NoC's
	// ping, answered by the node core without involving the engine.
	OpEcho Op = OpAgentFirst
	// OpClock carries a fabric clock report (noc/clock) to a neighbour:
	// link-local, flooded hop by hop by the node cores, never routed.
	OpClock Op = OpAgentFirst + 1
)

// IsClock reports whether f is a fabric clock report.
func (f *Frame) IsClock() bool { return f.Class == ClassControl && f.Op == OpClock }

// IsEcho reports whether f is an echo request or reply.
func (f *Frame) IsEcho() bool { return f.Class == ClassControl && f.Op == OpEcho }
