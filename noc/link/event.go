package link

import (
	"fmt"
	"time"
)

// Reason says why the link went up or down.
type Reason uint8

// Reasons for a link transition.
const (
	// ReasonHandshake: both ends heard each other's current identity.
	ReasonHandshake Reason = iota + 1
	// ReasonDead: nothing heard from the peer for DeadInterval.
	ReasonDead
	// ReasonStalled: data in flight made no progress for DeadInterval.
	ReasonStalled
	// ReasonPeerRestart: a datagram came from a new peer session.
	ReasonPeerRestart
	// ReasonPeerReset: the peer (same session) started a new link epoch,
	// because it declared the link down.
	ReasonPeerReset
)

var reasonNames = [...]string{"", "handshake", "dead", "stalled", "peer-restart", "peer-reset"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && r != 0 {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Event is an up or down transition of the link.
type Event struct {
	At     time.Duration
	Up     bool
	Reason Reason
	// PeerSession and PeerEpoch identify the peer the link came up with
	// or went down from.
	PeerSession uint64
	PeerEpoch   uint32
}

func (ev Event) String() string {
	state := "down"
	if ev.Up {
		state = "up"
	}
	return fmt.Sprintf("%v link %s (%v) peer %016x/%d", ev.At, state, ev.Reason, ev.PeerSession, ev.PeerEpoch)
}

// eventQueue bounds the transitions kept for PollEvent; older ones are
// overwritten and counted in Stats.EventsLost.
const eventQueue = 16

// Stats are an Endpoint's counters.
type Stats struct {
	TxDatagrams, TxBytes uint64
	RxDatagrams, RxBytes uint64 // valid datagrams only
	// TxMessages were accepted by Send, RxMessages returned by Receive.
	TxMessages, RxMessages uint64
	// Retransmits counts data datagrams sent again; FastRetransmits the
	// fragments found lost from acks (a later transmission arrived);
	// Timeouts the retransmission timer expiries.
	Retransmits, FastRetransmits, Timeouts uint64
	// Duplicates counts data datagrams that had already arrived;
	// OutOfWindow those beyond the credits this end advertised.
	Duplicates, OutOfWindow uint64
	// CRCErrors and Malformed count datagrams Input refused.
	CRCErrors, Malformed uint64
	// Stale counts datagrams from a retired peer session or an older
	// epoch; Unsynced data addressed to an older epoch of this end.
	Stale, Unsynced uint64
	// WindowStalls counts the times queued data had to wait for the
	// window or the peer's credits.
	WindowStalls uint64
	// Packed counts messages Send put in the datagram of a message
	// queued before them (Config.Pack).
	Packed uint64
	// Backpressure counts Send calls refused because the queue was full.
	Backpressure uint64
	// Abandoned counts messages unacknowledged when the link went down;
	// Discarded complete messages received but not yet delivered then,
	// and messages dropped as too large or ill-formed.
	Abandoned, Discarded uint64
	// ProtocolErrors counts valid datagrams whose contents broke the
	// protocol (an ack beyond what was sent, a fragment too large).
	ProtocolErrors uint64
	Ups, Downs     uint64
	EventsLost     uint64
	// ClockSamples counts clock exchanges completed (Config.ClockStamps);
	// ClockStale answers that matched no request in flight; ClockDropped
	// samples lost because PollClock was not called.
	ClockSamples, ClockStale, ClockDropped uint64
	// Now: fragments in flight and waiting, the smoothed round-trip time
	// and its variance, and the current retransmission timeout.
	InFlight, Queued int
	SRTT, RTTVar     time.Duration
	RTO              time.Duration
}
