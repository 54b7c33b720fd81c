package link

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Send.
var (
	// ErrDown: the link is down; Send accepts nothing until it is up.
	ErrDown = errors.New("link: down")
	// ErrBackpressure: the send queue has no room for the message.
	ErrBackpressure = errors.New("link: send queue full")
	// ErrTooLarge: the message is longer than Config.MaxMessage.
	ErrTooLarge = errors.New("link: message too large")
)

// retiredSessions is how many earlier peer sessions are remembered so that
// their late datagrams are recognised and dropped.
const retiredSessions = 4

// Endpoint is one end of a reliable link: a deterministic state machine fed
// with datagrams (Input) and time (Tick) that produces datagrams (Output) and
// in-order messages (Receive). It is not safe for concurrent use.
type Endpoint struct {
	cfg     Config
	session uint64
	epoch   uint32
	up      bool

	peerKnown   bool
	peerUnpacks bool // the peer's feature word names FeatureUnpack
	peerSession uint64
	peerEpoch   uint32
	retired     [retiredSessions]uint64
	retiredNext int

	lastRx     time.Duration // last datagram from the current peer
	lastTx     time.Duration // last datagram produced by Output
	ctlPending bool          // a datagram is owed to the peer at once

	snd sender
	rcv receiver
	clk stamper

	events [eventQueue]Event
	evHead int
	evLen  int

	stats Stats
	in    Header // scratch for Input
	out   Header // scratch for Output
}

// NewEndpoint returns an endpoint that is down and will greet its peer on
// the first Output.
func NewEndpoint(cfg Config, now time.Duration) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Endpoint{
		cfg:        cfg,
		session:    cfg.Session,
		lastRx:     now,
		lastTx:     now,
		ctlPending: true,
	}
	e.snd.init(&cfg)
	e.rcv.init(&cfg)
	e.snd.reset(isn(e.session, e.epoch))
	return e, nil
}

// isn is the first sequence number an endpoint uses in a link epoch; both
// ends derive it from the sender's identity.
func isn(session uint64, epoch uint32) uint32 {
	return uint32(session) ^ uint32(session>>32) ^ epoch*0x9E3779B9
}

// seqLess reports a < b in sequence-number (serial) arithmetic.
func seqLess(a, b uint32) bool { return int32(a-b) < 0 }

// Config returns the endpoint's configuration.
func (e *Endpoint) Config() Config { return e.cfg }

// Up reports whether the link is up: both ends know each other's current
// session and epoch, and Send accepts messages.
func (e *Endpoint) Up() bool { return e.up }

// Session returns this end's session and current link epoch.
func (e *Endpoint) Session() (session uint64, epoch uint32) { return e.session, e.epoch }

// Peer returns the peer's session and epoch as last heard; ok is false
// before the peer was heard at all.
func (e *Endpoint) Peer() (session uint64, epoch uint32, ok bool) {
	return e.peerSession, e.peerEpoch, e.peerKnown
}

// Send queues a copy of msg for the peer. It fails with ErrDown while the
// link is down (nothing is queued while down: a message belongs to the
// link epoch it was accepted in), ErrTooLarge beyond MaxMessage and
// ErrBackpressure when the send queue lacks room.
func (e *Endpoint) Send(now time.Duration, msg []byte) error {
	if len(msg) > e.cfg.MaxMessage {
		return fmt.Errorf("%w: %d > %d bytes", ErrTooLarge, len(msg), e.cfg.MaxMessage)
	}
	if !e.up {
		return ErrDown
	}
	if !e.snd.queue(msg, e.cfg.Pack && e.peerUnpacks, &e.stats) {
		e.stats.Backpressure++
		return ErrBackpressure
	}
	e.stats.TxMessages++
	return nil
}

// Input processes one datagram read from the port. A datagram that fails to
// decode returns an error wrapping ErrMalformed, ErrVersion or ErrChecksum
// and changes nothing but the counters. Late datagrams of a retired session
// or epoch are dropped silently (Stats.Stale).
func (e *Endpoint) Input(now time.Duration, d []byte) error {
	h := &e.in
	payload, err := h.Decode(d)
	if err != nil {
		if errors.Is(err, ErrChecksum) {
			e.stats.CRCErrors++
		} else {
			e.stats.Malformed++
		}
		return fmt.Errorf("link: input: %w", err)
	}
	e.stats.RxDatagrams++
	e.stats.RxBytes += uint64(len(d))
	if !e.acceptPeer(now, h) {
		e.stats.Stale++
		return nil
	}
	e.lastRx = now
	if Features(d, h)&FeatureUnpack != 0 {
		e.peerUnpacks = true
	}
	if h.DstSession != e.session || h.DstEpoch != e.epoch {
		// The peer does not know this epoch yet: tell it.
		e.ctlPending = true
		if h.Flags&FlagData != 0 {
			e.stats.Unsynced++
		}
		return nil
	}
	if !e.up {
		e.goUp(now)
	}
	e.snd.onAck(now, h, &e.stats)
	if e.cfg.ClockStamps {
		e.clk.input(now, &e.cfg, h, &e.stats)
	}
	if h.Flags&FlagAckReq != 0 {
		e.ctlPending = true
	}
	if h.Flags&FlagData != 0 {
		e.rcv.onData(now, h.Seq, h.Flags, payload, &e.stats)
	}
	return nil
}

// acceptPeer checks the sender's identity, adopting a new peer session or
// epoch; it reports false for a datagram that must be ignored.
func (e *Endpoint) acceptPeer(now time.Duration, h *Header) bool {
	s, ep := h.SrcSession, h.SrcEpoch
	if s == e.session {
		return false // our own datagram, looped back
	}
	if e.peerKnown && s == e.peerSession {
		if ep == e.peerEpoch {
			return true
		}
		if seqLess(ep, e.peerEpoch) {
			return false
		}
		e.newPeer(now, s, ep, ReasonPeerReset)
		return true
	}
	for _, r := range e.retired {
		if r == s {
			return false
		}
	}
	if e.peerKnown {
		e.retired[e.retiredNext] = e.peerSession
		e.retiredNext = (e.retiredNext + 1) % retiredSessions
	}
	e.newPeer(now, s, ep, ReasonPeerRestart)
	return true
}

// newPeer starts over with a new peer identity: whatever was exchanged with
// the previous one is dropped.
func (e *Endpoint) newPeer(now time.Duration, s uint64, ep uint32, why Reason) {
	if e.up {
		e.goDown(now, why)
	}
	e.peerKnown, e.peerSession, e.peerEpoch = true, s, ep
	e.peerUnpacks = false
	e.stats.Discarded += e.rcv.reset(isn(s, ep))
	e.ctlPending = true
}

func (e *Endpoint) goUp(now time.Duration) {
	e.up = true
	e.stats.Ups++
	e.snd.lastProgress = now
	e.pushEvent(Event{At: now, Up: true, Reason: ReasonHandshake, PeerSession: e.peerSession, PeerEpoch: e.peerEpoch})
}

// goDown ends the link epoch: everything in flight either way is dropped
// and the next epoch starts with fresh sequence numbers.
func (e *Endpoint) goDown(now time.Duration, why Reason) {
	e.up = false
	e.stats.Downs++
	e.pushEvent(Event{At: now, Up: false, Reason: why, PeerSession: e.peerSession, PeerEpoch: e.peerEpoch})
	e.epoch++
	e.clk.reset()
	e.stats.Abandoned += e.snd.reset(isn(e.session, e.epoch))
	e.stats.Discarded += e.rcv.reset(isn(e.peerSession, e.peerEpoch))
	e.ctlPending = true
}

func (e *Endpoint) pushEvent(ev Event) {
	if e.evLen == eventQueue {
		e.evHead = (e.evHead + 1) % eventQueue
		e.evLen--
		e.stats.EventsLost++
	}
	e.events[(e.evHead+e.evLen)%eventQueue] = ev
	e.evLen++
}

// PollEvent returns the oldest up/down transition not yet returned.
func (e *Endpoint) PollEvent() (Event, bool) {
	if e.evLen == 0 {
		return Event{}, false
	}
	ev := e.events[e.evHead]
	e.evHead = (e.evHead + 1) % eventQueue
	e.evLen--
	return ev, true
}

// Receive returns the next in-order message. The slice is valid until the
// next call to Receive (Input and Output do not touch it).
func (e *Endpoint) Receive() ([]byte, bool) {
	msg, ok := e.rcv.next(&e.stats)
	if ok {
		e.stats.RxMessages++
	}
	if e.rcv.windowOpened() {
		e.ctlPending = true
	}
	return msg, ok
}

// Tick runs the timers: dead interval, stalled progress and retransmission.
// Output calls it too; a driver calls it at NextDeadline.
func (e *Endpoint) Tick(now time.Duration) {
	if !e.up {
		return
	}
	if now-e.lastRx >= e.cfg.DeadInterval {
		e.goDown(now, ReasonDead)
		return
	}
	if e.snd.inFlight() && now-e.snd.lastProgress >= e.cfg.DeadInterval {
		e.goDown(now, ReasonStalled)
		return
	}
	e.snd.checkRTO(now, &e.stats)
}

// NextDeadline returns the time by which Tick (or Output) must be called
// again if nothing else happens: the next heartbeat, retransmission or
// dead-interval check.
func (e *Endpoint) NextDeadline() time.Duration {
	d := e.lastTx + e.cfg.HeartbeatInterval
	if !e.up {
		return d
	}
	d = min(d, e.lastRx+e.cfg.DeadInterval)
	if e.cfg.ClockStamps {
		d = min(d, e.clk.lastReq+e.cfg.HeartbeatInterval)
		if e.clk.owe {
			d = min(d, e.lastRx)
		}
	}
	if e.rcv.ackPending && e.cfg.AckDelay > 0 {
		d = min(d, e.rcv.ackSince+e.cfg.AckDelay)
	}
	if e.snd.inFlight() {
		d = min(d, e.snd.lastProgress+e.cfg.DeadInterval, e.snd.rtoFloor+e.snd.rto())
	}
	return d
}

// Output writes the next datagram for the port into buf, which must hold
// Config.MTU bytes, and reports whether there was one. In order: a
// retransmission, new data the window and the peer's credits allow, then an
// ack, greeting or heartbeat when one is owed. A driver calls it until it
// reports false, after every Input, Send, Receive and Tick.
func (e *Endpoint) Output(now time.Duration, buf []byte) (int, bool) {
	e.Tick(now)
	if len(buf) < e.cfg.MTU {
		return 0, false
	}
	h := &e.out
	if e.up {
		if seq, ok := e.snd.nextRetransmit(); ok {
			e.stats.Retransmits++
			return e.emitData(now, buf, seq)
		}
		if seq, ok := e.snd.nextNew(&e.stats); ok {
			return e.emitData(now, buf, seq)
		}
	}
	stamp := e.clk.due(now, &e.cfg, e.up)
	if stamp || e.ctlPending || e.rcv.ackDue(now, e.cfg.AckDelay) || now-e.lastTx >= e.cfg.HeartbeatInterval {
		h.Flags = 0
		if e.up && e.snd.creditStalled() {
			h.Flags = FlagAckReq // ask for fresh credits
		}
		if stamp {
			e.clk.fill(now, &e.cfg, h)
		}
		h.Seq = e.snd.nxt
		e.fillControl(h)
		n, _ := h.Encode(buf, nil)
		return e.sent(now, putFeatures(buf, n, e.cfg.MTU, FeatureUnpack))
	}
	return 0, false
}

func (e *Endpoint) emitData(now time.Duration, buf []byte, seq uint32) (int, bool) {
	h := &e.out
	sl := e.snd.transmit(now, seq)
	h.Flags = FlagData | sl.flags
	h.Seq = seq
	e.fillControl(h)
	n, _ := h.Encode(buf, sl.buf)
	return e.sent(now, putFeatures(buf, n, e.cfg.MTU, FeatureUnpack))
}

// fillControl sets the identity, ack, credit and SACK fields every
// datagram carries.
func (e *Endpoint) fillControl(h *Header) {
	h.SrcSession, h.SrcEpoch = e.session, e.epoch
	if e.peerKnown {
		h.DstSession, h.DstEpoch = e.peerSession, e.peerEpoch
	} else {
		h.DstSession, h.DstEpoch = 0, 0
	}
	e.rcv.fillAck(h)
	e.ctlPending = false
}

func (e *Endpoint) sent(now time.Duration, n int) (int, bool) {
	e.lastTx = now
	e.stats.TxDatagrams++
	e.stats.TxBytes += uint64(n)
	return n, true
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	s := e.stats
	s.InFlight = int(e.snd.nxt - e.snd.una)
	s.Queued = int(e.snd.tail - e.snd.nxt)
	s.SRTT, s.RTTVar, s.RTO = e.snd.srtt, e.snd.rttvar, e.snd.rto()
	return s
}
