package rdma

// Action is what the bootstrap asks its driver to do to the queue pair.
type Action uint8

// Bootstrap actions.
const (
	// None: nothing to do.
	None Action = iota
	// Connect: move the QP to RTR and RTS toward Peer(), then call
	// Connected.
	Connect
	// Reset: move the QP to RESET and INIT, repost its receives, then
	// call Reset.
	Reset
)

// Bootstrap decides, from the handles heard over the bootstrap path, when
// one end's queue pair connects to which peer and when it starts over. It
// is a deterministic state machine; the port drives it.
//
// Each end names, in every handle it sends, the latest peer identity it
// heard. An end connects to the peer only once the peer's handle names the
// end's current identity (so both ends have each other's handles: a
// three-way greeting). A QP that fails, or a peer identity that changes
// under a connected QP (the peer restarted or reset its QP), resets the
// QP with a new generation, and the greeting starts over.
type Bootstrap struct {
	self      Identity
	peer      Handle // latest peer handle heard
	known     bool
	connected bool
	conn      Identity  // the peer identity the QP is connected to
	retired   [4]uint64 // earlier peer sessions, whose late handles are ignored
	nretired  int
}

// NewBootstrap returns the bootstrap of a port incarnation (session,
// never 0) whose QP is in INIT.
func NewBootstrap(session uint64) *Bootstrap {
	return &Bootstrap{self: Identity{Session: session}}
}

// Self is this end's current identity.
func (b *Bootstrap) Self() Identity { return b.self }

// Connected reports whether the QP is connected, and to whom.
func (b *Bootstrap) Connected() (Identity, bool) { return b.conn, b.connected }

// Peer is the latest peer handle heard.
func (b *Bootstrap) Peer() (Handle, bool) { return b.peer, b.known }

// Fill sets the identity fields of the handle this end sends.
func (b *Bootstrap) Fill(h *Handle) {
	h.Self = b.self
	h.Peer = Identity{}
	if b.known {
		h.Peer = b.peer.Self
	}
}

// Hear processes a peer handle and returns what to do.
func (b *Bootstrap) Hear(h *Handle) Action {
	if h.Self.Session == b.self.Session {
		return None // our own, looped back
	}
	if b.connected && h.Self == b.conn {
		return None
	}
	if !b.known || h.Self != b.peer.Self {
		if b.known && h.Self.Session == b.peer.Self.Session && int32(h.Self.Gen-b.peer.Self.Gen) < 0 {
			return None // an older generation, late
		}
		for _, r := range b.retired {
			if r == h.Self.Session {
				return None // a restarted peer's former incarnation
			}
		}
		if b.known && h.Self.Session != b.peer.Self.Session {
			b.retired[b.nretired%len(b.retired)] = b.peer.Self.Session
			b.nretired++
		}
		b.peer, b.known = *h, true
		if b.connected {
			return Reset
		}
	}
	if !b.connected && h.Peer == b.self {
		return Connect
	}
	return None
}

// DidConnect records that the QP is connected to the peer's handle last
// heard.
func (b *Bootstrap) DidConnect() {
	b.connected, b.conn = true, b.peer.Self
}

// DidReset records that the QP was reset: a new generation, not connected.
func (b *Bootstrap) DidReset() {
	b.self.Gen++
	b.connected, b.conn = false, Identity{}
}

// Failed is called when the QP reported an error; it returns Reset.
func (b *Bootstrap) Failed() Action { return Reset }
