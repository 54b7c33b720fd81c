package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Wire constants of a channel datagram (see "Channels" in the package
// documentation).
const (
	// ChannelVersion is the first byte of every channel datagram. It
	// differs from Version, so a link datagram sent by a peer without
	// channels is refused as ErrVersion instead of misread.
	ChannelVersion = 0xC1
	// ChannelHeaderLen is the length of the channel header.
	ChannelHeaderLen = 36
	// ChannelOverhead is what a channel adds to each link datagram.
	ChannelOverhead = ChannelHeaderLen + TrailerLen
	// MaxChannels is the most channels one link stripes over.
	MaxChannels = 64
)

// channelData marks a channel datagram that carries a link datagram.
const channelData = 0x01

// ChannelHeader is a decoded channel header.
type ChannelHeader struct {
	Data bool
	// Channel is the index of the channel the datagram was sent on;
	// Offered how many channels its sender has.
	Channel, Offered uint8
	// SrcSession is the sender's stripe session; DstSession the
	// receiver's as the sender last heard it (0: not yet).
	SrcSession, DstSession uint64
	// Seq is the datagram's sequence number on its channel (the next one
	// when it carries no data); Ack the receiver's next expected one.
	Seq, Ack uint32
	// Stripe is the datagram's place in the sender's stripe order (the
	// next place when it carries no data).
	Stripe uint32
	// Credits is how many datagrams past Ack the sender of this header
	// accepts on the channel.
	Credits uint16
	Length  uint16
}

// Encode writes h, payload and a CRC32C trailer into b and returns the
// length. b must hold ChannelOverhead+len(payload) bytes.
func (h *ChannelHeader) Encode(b, payload []byte) (int, error) {
	n := ChannelOverhead + len(payload)
	if len(payload) > 0xFFFF || len(b) < n {
		return 0, fmt.Errorf("link: channel encode: %w: payload %d, buffer %d", ErrMalformed, len(payload), len(b))
	}
	h.Length = uint16(len(payload))
	b[0] = ChannelVersion
	b[1] = 0
	if h.Data {
		b[1] = channelData
	}
	b[2], b[3] = h.Channel, h.Offered
	binary.BigEndian.PutUint64(b[4:], h.SrcSession)
	binary.BigEndian.PutUint64(b[12:], h.DstSession)
	binary.BigEndian.PutUint32(b[20:], h.Seq)
	binary.BigEndian.PutUint32(b[24:], h.Ack)
	binary.BigEndian.PutUint32(b[28:], h.Stripe)
	binary.BigEndian.PutUint16(b[32:], h.Credits)
	binary.BigEndian.PutUint16(b[34:], h.Length)
	o := ChannelHeaderLen + copy(b[ChannelHeaderLen:], payload)
	binary.BigEndian.PutUint32(b[o:], crc32.Checksum(b[:o], castagnoli))
	return n, nil
}

// Decode fills h from b and returns the payload, which aliases b. It never
// panics and allocates nothing.
func (h *ChannelHeader) Decode(b []byte) ([]byte, error) {
	if len(b) < ChannelOverhead {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if b[0] != ChannelVersion {
		return nil, fmt.Errorf("%w: channel datagram version %#x", ErrVersion, b[0])
	}
	if b[1]&^channelData != 0 {
		return nil, fmt.Errorf("%w: reserved channel flags", ErrMalformed)
	}
	h.Length = binary.BigEndian.Uint16(b[34:])
	end := ChannelHeaderLen + int(h.Length)
	if end+TrailerLen > len(b) {
		return nil, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	if crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:]) {
		return nil, ErrChecksum
	}
	h.Data = b[1]&channelData != 0
	h.Channel, h.Offered = b[2], b[3]
	h.SrcSession = binary.BigEndian.Uint64(b[4:])
	h.DstSession = binary.BigEndian.Uint64(b[12:])
	h.Seq = binary.BigEndian.Uint32(b[20:])
	h.Ack = binary.BigEndian.Uint32(b[24:])
	h.Stripe = binary.BigEndian.Uint32(b[28:])
	h.Credits = binary.BigEndian.Uint16(b[32:])
	switch {
	case h.SrcSession == 0:
		return nil, fmt.Errorf("%w: zero session", ErrMalformed)
	case h.Offered == 0 || h.Offered > MaxChannels || h.Channel >= h.Offered:
		return nil, fmt.Errorf("%w: channel %d of %d", ErrMalformed, h.Channel, h.Offered)
	case h.Data != (h.Length > 0):
		return nil, fmt.Errorf("%w: data flag and length %d disagree", ErrMalformed, h.Length)
	}
	return b[ChannelHeaderLen:end:end], nil
}

// StripePolicy chooses the channel each datagram goes out on.
type StripePolicy uint8

// Stripe policies.
const (
	// LeastQueued sends on the up channel with the fewest datagrams in
	// flight, taking channels in turn among equals.
	LeastQueued StripePolicy = iota
	// RoundRobin sends on each up channel with window room in turn.
	RoundRobin
)

func (p StripePolicy) String() string {
	if p == RoundRobin {
		return "round-robin"
	}
	return "least-queued"
}

// StripeConfig shapes a Stripe.
type StripeConfig struct {
	// Channels is how many channels this end has (2..MaxChannels; one
	// channel needs no stripe).
	Channels int
	// MTU is the smallest channel MTU; the stripe carries link datagrams
	// of up to MTU-ChannelOverhead bytes.
	MTU int
	// Window bounds the datagrams in flight on each channel and is the
	// credit each channel advertises.
	Window int
	// Reorder is how many datagrams the receiver holds while it waits for
	// a gap in the stripe order to fill.
	Reorder int
	// ReorderHold bounds how long a datagram waits for a gap that no
	// channel has passed.
	ReorderHold time.Duration
	// HeartbeatInterval is the longest a channel stays silent;
	// DeadInterval without a datagram on a channel drops it.
	HeartbeatInterval, DeadInterval time.Duration
	// Session identifies this incarnation; non-zero.
	Session uint64
	Policy  StripePolicy
	// SharedMedium says the channels are paths of one medium that may
	// deliver a datagram to another channel's reader than the one it was
	// sent on: the queues of one network device, where the receiving NIC
	// picks the queue (RSS or flow steering, not the sender). A datagram is
	// then accounted to the channel its header names. Without it, a
	// datagram naming another channel is refused.
	SharedMedium bool
}

// DefaultStripeConfig returns a configuration for k channels of the given
// MTU; Session is left zero for the driver to fill.
func DefaultStripeConfig(k, mtu int) StripeConfig {
	return StripeConfig{
		Channels:          k,
		MTU:               mtu,
		Window:            64,
		Reorder:           256,
		ReorderHold:       2 * time.Millisecond,
		HeartbeatInterval: 20 * time.Millisecond,
		DeadInterval:      200 * time.Millisecond,
	}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c *StripeConfig) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: stripe: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Channels < 2 || c.Channels > MaxChannels:
		return bad("Channels %d outside [2, %d]", c.Channels, MaxChannels)
	case c.MTU < ChannelOverhead+MinMTU || c.MTU > MaxMTU:
		return bad("MTU %d outside [%d, %d]", c.MTU, ChannelOverhead+MinMTU, MaxMTU)
	case c.Window < 1 || c.Window > MaxWindow:
		return bad("Window %d outside [1, %d]", c.Window, MaxWindow)
	case c.Reorder < 1 || c.Reorder > MaxWindow:
		return bad("Reorder %d outside [1, %d]", c.Reorder, MaxWindow)
	case c.ReorderHold <= 0 || c.HeartbeatInterval <= 0:
		return bad("ReorderHold %v and HeartbeatInterval %v must be positive", c.ReorderHold, c.HeartbeatInterval)
	case c.DeadInterval < 2*c.HeartbeatInterval:
		return bad("DeadInterval %v shorter than two heartbeats", c.DeadInterval)
	case c.Session == 0:
		return bad("Session is zero")
	case c.Policy > RoundRobin:
		return bad("unknown policy %d", c.Policy)
	}
	return nil
}

// Errors of Stripe.Send.
var (
	// ErrNoChannel: no channel is up.
	ErrNoChannel = errors.New("link: no channel up")
	// ErrChannelsFull: every up channel's window is full.
	ErrChannelsFull = errors.New("link: every channel's window is full")
)

// ChannelStats are one channel's counters.
type ChannelStats struct {
	Up                   bool
	TxDatagrams, TxBytes uint64 // data datagrams sent
	RxDatagrams, RxBytes uint64 // data datagrams received
	TxControl, RxControl uint64 // greetings, acks and heartbeats
	// Lost counts channel sequence numbers that never arrived (a later
	// one did); Errors datagrams refused on this channel.
	Lost, Errors uint64
	Ups, Downs   uint64
	InFlight     int // data datagrams sent and not yet acknowledged
}

// StripeStats are the stripe's own counters.
type StripeStats struct {
	// Held counts datagrams that arrived ahead of the stripe order and
	// waited; Skipped places in the order given up as lost; Late
	// datagrams that arrived after their place was given up (delivered
	// anyway: the link above drops duplicates).
	Held, Skipped, Late uint64
	// Full counts datagrams refused because every window was full;
	// Overflow datagrams dropped for want of a receive buffer.
	Full, Overflow uint64
	// Stale counts datagrams of a retired peer session; Malformed those
	// that failed to decode or named the wrong channel; Unsynced data
	// addressed to an older session of this end.
	Stale, Malformed, Unsynced uint64
	PeerRestarts               uint64
}

// ChannelEvent is a channel coming up or being dropped.
type ChannelEvent struct {
	At      time.Duration
	Channel int
	Up      bool
	// Reason is ReasonHandshake for a channel that came up, ReasonDead
	// for one silent for its DeadInterval, ReasonPeerRestart for every
	// channel of a peer that restarted.
	Reason Reason
}

type channel struct {
	up             bool
	lastRx, lastTx time.Duration
	// send side
	nxt, una uint32
	credits  uint16
	// receive side
	rcvKnown   bool
	rcvNext    uint32 // next expected channel seq
	unacked    int    // data received since the last ack sent
	coverKnown bool
	cover      uint32 // every stripe place up to here sent on this channel has arrived or is lost
	ctlPending bool
	stats      ChannelStats
}

// Stripe joins several channels into one datagram path: the channel layer
// of a multi-channel link. It is a deterministic state machine like
// Endpoint: the driver feeds it datagrams read from channel i (Input),
// writes the datagrams it produces (Send for link datagrams, Output for
// each channel's greetings, acks and heartbeats) and takes link datagrams
// back in stripe order (Receive). It does no I/O and reads no clock.
type Stripe struct {
	cfg     StripeConfig
	ch      []channel
	rr      int
	nextOut uint32 // stripe place of the next datagram sent

	peerKnown   bool
	peer        uint64
	peerOffered int
	retired     [retiredSessions]uint64
	retiredNext int

	// receive order: slots hold datagrams by stripe place modulo Reorder
	rcvKnown bool
	rcvNext  uint32
	slot     [][]byte
	present  []bool
	held     int
	top      uint32 // the highest place held (while held > 0)
	gapSince time.Duration
	late     []byte
	lateLen  int // -1: empty
	now      time.Duration

	events [eventQueue]ChannelEvent
	evHead int
	evLen  int

	stats StripeStats
	in    ChannelHeader
	out   ChannelHeader
}

// NewStripe returns a stripe whose channels are all down; each greets its
// peer on the first Output.
func NewStripe(cfg StripeConfig, now time.Duration) (*Stripe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Stripe{cfg: cfg, ch: make([]channel, cfg.Channels), lateLen: -1, now: now}
	s.late = make([]byte, cfg.MTU)
	s.slot = make([][]byte, cfg.Reorder)
	s.present = make([]bool, cfg.Reorder)
	for i := range s.ch {
		s.ch[i] = channel{lastRx: now, lastTx: now, ctlPending: true, credits: uint16(min(cfg.Window, 0xFFFF))}
	}
	return s, nil
}

// Config returns the stripe's configuration.
func (s *Stripe) Config() StripeConfig { return s.cfg }

// MTU is the largest link datagram Send accepts.
func (s *Stripe) MTU() int { return s.cfg.MTU - ChannelOverhead }

// Agreed is the number of channels both ends have (0 before the peer was
// heard): channels at or past it never come up.
func (s *Stripe) Agreed() int {
	if !s.peerKnown {
		return 0
	}
	return min(s.cfg.Channels, s.peerOffered)
}

// Up reports whether at least one channel is up.
func (s *Stripe) Up() bool {
	for i := range s.ch {
		if s.ch[i].up {
			return true
		}
	}
	return false
}

// Send encodes link datagram d for the channel the policy picks into buf
// (which must hold MTU bytes of the stripe config) and returns the channel
// and the length to write there. It fails with ErrNoChannel when no
// channel is up and ErrChannelsFull when every up channel's window is
// full.
func (s *Stripe) Send(now time.Duration, d, buf []byte) (int, int, error) {
	return s.SendVia(now, -1, d, buf)
}

// SendVia is Send on channel c when c is up and has room in its window,
// on the channel the policy picks otherwise (c = -1: always). A driver
// that writes a burst of datagrams keeps a run of them on one channel so
// that the run costs one batch write (one system call) instead of one per
// channel.
func (s *Stripe) SendVia(now time.Duration, c int, d, buf []byte) (int, int, error) {
	s.now = now
	if len(d) > s.MTU() {
		return 0, 0, fmt.Errorf("%w: %d > %d bytes", ErrTooLarge, len(d), s.MTU())
	}
	if c < 0 || c >= len(s.ch) || !s.room(c) {
		var err error
		if c, err = s.pick(); err != nil {
			if errors.Is(err, ErrChannelsFull) {
				s.stats.Full++
			}
			return 0, 0, err
		}
	}
	ch := &s.ch[c]
	h := &s.out
	h.Data = true
	h.Seq = ch.nxt
	h.Stripe = s.nextOut
	s.fill(h, c)
	n, err := h.Encode(buf, d)
	if err != nil {
		return 0, 0, err
	}
	ch.nxt++
	s.nextOut++
	ch.lastTx = now
	ch.stats.TxDatagrams++
	ch.stats.TxBytes += uint64(n)
	return c, n, nil
}

// room reports whether channel c is up and has room in its window.
func (s *Stripe) room(c int) bool {
	ch := &s.ch[c]
	return ch.up && int(ch.nxt-ch.una) < min(s.cfg.Window, int(ch.credits))
}

// pick chooses the channel for the next datagram.
func (s *Stripe) pick() (int, error) {
	best, bestQ, anyUp := -1, 0, false
	k := len(s.ch)
	for j := range k {
		c := (s.rr + j) % k
		ch := &s.ch[c]
		if !ch.up {
			continue
		}
		anyUp = true
		q := int(ch.nxt - ch.una)
		if q >= min(s.cfg.Window, int(ch.credits)) {
			continue
		}
		if s.cfg.Policy == RoundRobin {
			best = c
			break
		}
		if best < 0 || q < bestQ {
			best, bestQ = c, q
		}
	}
	if best < 0 {
		if anyUp {
			return 0, ErrChannelsFull
		}
		return 0, ErrNoChannel
	}
	s.rr = (best + 1) % k
	return best, nil
}

// fill sets the fields every datagram on channel c carries.
func (s *Stripe) fill(h *ChannelHeader, c int) {
	ch := &s.ch[c]
	h.Channel, h.Offered = uint8(c), uint8(s.cfg.Channels)
	h.SrcSession, h.DstSession = s.cfg.Session, 0
	if s.peerKnown {
		h.DstSession = s.peer
	}
	h.Ack = ch.rcvNext
	h.Credits = uint16(min(s.cfg.Window, 0xFFFF))
	ch.unacked = 0
	ch.ctlPending = false
}

// Input processes one datagram read from channel c. A datagram that fails
// to decode or names another channel (one this end does not have, with
// SharedMedium) is counted and reported with an error wrapping
// ErrMalformed, ErrVersion or ErrChecksum.
func (s *Stripe) Input(now time.Duration, c int, d []byte) error {
	s.now = now
	if c < 0 || c >= len(s.ch) {
		return fmt.Errorf("link: stripe input: no channel %d", c)
	}
	h := &s.in
	payload, err := h.Decode(d)
	if err == nil && s.cfg.SharedMedium && int(h.Channel) < len(s.ch) {
		c = int(h.Channel)
	}
	ch := &s.ch[c]
	if err == nil && int(h.Channel) != c {
		err = fmt.Errorf("%w: channel %d datagram arrived on channel %d", ErrMalformed, h.Channel, c)
	}
	if err != nil {
		s.stats.Malformed++
		ch.stats.Errors++
		return fmt.Errorf("link: stripe input: %w", err)
	}
	if !s.acceptPeer(h) {
		s.stats.Stale++
		return nil
	}
	if h.DstSession != s.cfg.Session {
		ch.ctlPending = true // the peer has not heard this end yet
		if h.Data {
			s.stats.Unsynced++
		}
		return nil
	}
	if c >= s.peerOffered {
		s.stats.Malformed++
		ch.stats.Errors++
		return fmt.Errorf("link: stripe input: %w: channel %d past the %d offered", ErrMalformed, c, s.peerOffered)
	}
	ch.lastRx = now
	if !ch.up {
		ch.up = true
		ch.stats.Ups++
		ch.ctlPending = true
		s.pushEvent(ChannelEvent{At: now, Channel: c, Up: true, Reason: ReasonHandshake})
	}
	if seqLess(ch.una, h.Ack) && !seqLess(ch.nxt, h.Ack) {
		ch.una = h.Ack
	}
	ch.credits = h.Credits
	if !h.Data {
		ch.stats.RxControl++
		s.cover(ch, h.Stripe-1)
		return nil
	}
	ch.stats.RxDatagrams++
	ch.stats.RxBytes += uint64(len(d))
	if !ch.rcvKnown || !seqLess(h.Seq, ch.rcvNext) {
		if ch.rcvKnown {
			ch.stats.Lost += uint64(h.Seq - ch.rcvNext)
		}
		ch.rcvKnown, ch.rcvNext = true, h.Seq+1
	}
	ch.unacked++
	s.cover(ch, h.Stripe)
	s.place(now, h.Stripe, payload)
	return nil
}

// acceptPeer checks the sender's session, adopting a new one; it reports
// false for a datagram to ignore.
func (s *Stripe) acceptPeer(h *ChannelHeader) bool {
	if h.SrcSession == s.cfg.Session {
		return false
	}
	if s.peerKnown && h.SrcSession == s.peer {
		return true
	}
	for _, r := range s.retired {
		if r == h.SrcSession {
			return false
		}
	}
	if s.peerKnown {
		s.retired[s.retiredNext] = s.peer
		s.retiredNext = (s.retiredNext + 1) % retiredSessions
		s.stats.PeerRestarts++
	}
	s.peerKnown, s.peer, s.peerOffered = true, h.SrcSession, int(h.Offered)
	for i := range s.ch {
		ch := &s.ch[i]
		if ch.up {
			s.down(i, ReasonPeerRestart)
		}
		ch.rcvKnown, ch.coverKnown, ch.unacked = false, false, 0
		ch.ctlPending = true
	}
	// The first datagram of a session is a greeting (a channel comes up
	// only after one): its stripe field is where the order starts.
	s.rcvKnown, s.rcvNext, s.held, s.lateLen = true, h.Stripe, 0, -1
	clear(s.present)
	return true
}

// cover records that every stripe place up to p sent on channel ch has
// arrived or is lost (channels deliver in order).
func (s *Stripe) cover(ch *channel, p uint32) {
	if !ch.coverKnown || seqLess(ch.cover, p) {
		ch.coverKnown, ch.cover = true, p
	}
}

// place stores a datagram at its stripe place.
func (s *Stripe) place(now time.Duration, p uint32, payload []byte) {
	if !s.rcvKnown {
		s.rcvKnown, s.rcvNext = true, p
	}
	if seqLess(p, s.rcvNext) {
		s.stats.Late++
		if s.lateLen >= 0 {
			s.stats.Overflow++
			return
		}
		s.lateLen = copy(s.late, payload)
		return
	}
	r := uint32(len(s.slot))
	if d := p - s.rcvNext; d >= 2*r {
		// Far ahead of the order: start over from there.
		s.stats.Overflow += uint64(s.held)
		s.stats.Skipped += uint64(d - r + 1)
		clear(s.present)
		s.held = 0
		s.rcvNext = p - r + 1
	}
	for p-s.rcvNext >= r {
		s.skip() // the order buffer is full: give up its oldest place
	}
	i := p % r
	if s.present[i] {
		return // a duplicate
	}
	if p != s.rcvNext {
		s.stats.Held++
		if s.held == 0 || s.present[s.rcvNext%r] {
			s.gapSince = now
		}
	}
	if cap(s.slot[i]) == 0 {
		// slots get their buffer on first use: a stripe holds only as
		// much as its traffic ever reordered
		s.slot[i] = make([]byte, 0, s.MTU())
	}
	s.slot[i] = append(s.slot[i][:0], payload...)
	s.present[i] = true
	if s.held == 0 || seqLess(s.top, p) {
		s.top = p
	}
	s.held++
}

// Room is how many places past the highest one held the order buffer
// still has: a driver reads no more from its channels at once than that
// (datagrams past it would push out the oldest place, held or not).
func (s *Stripe) Room() int {
	r := len(s.slot)
	if s.held == 0 {
		return r
	}
	return max(0, r-int(s.top-s.rcvNext+1))
}

// skip gives up the place at the head of the order if it is missing, and
// moves past it.
func (s *Stripe) skip() {
	i := s.rcvNext % uint32(len(s.slot))
	if s.present[i] {
		s.present[i] = false
		s.held--
		s.stats.Overflow++ // only when the order buffer must make room
	} else {
		s.stats.Skipped++
	}
	s.rcvNext++
}

// gapPassed reports whether every up channel has passed the head of the
// order: whatever was sent there is lost.
func (s *Stripe) gapPassed() bool {
	any := false
	for i := range s.ch {
		ch := &s.ch[i]
		if !ch.up {
			continue
		}
		if !ch.coverKnown || seqLess(ch.cover, s.rcvNext) {
			return false
		}
		any = true
	}
	return any
}

// Ready reports whether Receive would return a datagram now.
func (s *Stripe) Ready() bool {
	if s.lateLen >= 0 {
		return true
	}
	if s.held == 0 {
		return false
	}
	return s.present[s.rcvNext%uint32(len(s.slot))] || s.gapPassed()
}

// Receive returns the next link datagram in stripe order. The slice is
// valid until the next call to Receive or Input.
func (s *Stripe) Receive() ([]byte, bool) {
	if s.lateLen >= 0 {
		n := s.lateLen
		s.lateLen = -1
		return s.late[:n], true
	}
	if s.held == 0 {
		return nil, false
	}
	r := uint32(len(s.slot))
	for !s.present[s.rcvNext%r] {
		if !s.gapPassed() {
			return nil, false
		}
		s.stats.Skipped++
		s.rcvNext++
	}
	i := s.rcvNext % r
	s.present[i] = false
	s.held--
	s.rcvNext++
	if s.held > 0 && !s.present[s.rcvNext%r] {
		s.gapSince = s.now
	}
	return s.slot[i], true
}

// Tick runs the timers: channels silent for DeadInterval are dropped, and
// a gap older than ReorderHold is given up.
func (s *Stripe) Tick(now time.Duration) {
	s.TickChannels(now)
	if s.GapDue(now) {
		r := uint32(len(s.slot))
		for !s.present[s.rcvNext%r] {
			s.stats.Skipped++
			s.rcvNext++
		}
	}
}

// TickChannels runs only the channels' timers (a channel silent for
// DeadInterval is dropped). A driver whose reader reads the channels
// itself leaves the gaps to that reader's Tick, which comes after it read
// what the channels hold: a gap is then never given up while the datagram
// that fills it waits, unread, in a channel.
func (s *Stripe) TickChannels(now time.Duration) {
	s.now = now
	for i := range s.ch {
		ch := &s.ch[i]
		if ch.up && now-ch.lastRx >= s.cfg.DeadInterval {
			s.down(i, ReasonDead)
		}
	}
}

// GapDue reports whether a gap in the stripe order has waited ReorderHold:
// the next Tick gives it up.
func (s *Stripe) GapDue(now time.Duration) bool {
	return s.held > 0 && now-s.gapSince >= s.cfg.ReorderHold
}

// down drops channel i from the stripe until its peer is heard on it
// again; its datagrams in flight are forgotten (the link above resends).
func (s *Stripe) down(i int, why Reason) {
	ch := &s.ch[i]
	ch.up = false
	ch.una = ch.nxt
	ch.coverKnown = false
	ch.stats.Downs++
	ch.ctlPending = true
	s.pushEvent(ChannelEvent{At: s.now, Channel: i, Reason: why})
}

// NextDeadline is when Tick or Output must run again if nothing else
// happens.
func (s *Stripe) NextDeadline() time.Duration {
	d := time.Duration(1<<63 - 1)
	for i := range s.ch {
		ch := &s.ch[i]
		d = min(d, ch.lastTx+s.cfg.HeartbeatInterval)
		if ch.up {
			d = min(d, ch.lastRx+s.cfg.DeadInterval)
		}
	}
	if s.held > 0 {
		d = min(d, s.gapSince+s.cfg.ReorderHold)
	}
	return d
}

// Output writes channel c's next control datagram (greeting, ack or
// heartbeat) into buf and reports whether one was owed. Acks are owed
// after a quarter window of data; heartbeats after HeartbeatInterval of
// silence.
func (s *Stripe) Output(now time.Duration, c int, buf []byte) (int, bool) {
	s.now = now
	if c < 0 || c >= len(s.ch) {
		return 0, false
	}
	ch := &s.ch[c]
	if !ch.ctlPending && ch.unacked < max(1, s.cfg.Window/4) && now-ch.lastTx < s.cfg.HeartbeatInterval {
		return 0, false
	}
	h := &s.out
	h.Data = false
	h.Seq = ch.nxt
	h.Stripe = s.nextOut
	s.fill(h, c)
	n, err := h.Encode(buf, nil)
	if err != nil {
		return 0, false
	}
	ch.lastTx = now
	ch.stats.TxControl++
	return n, true
}

func (s *Stripe) pushEvent(ev ChannelEvent) {
	if s.evLen == eventQueue {
		s.evHead = (s.evHead + 1) % eventQueue
		s.evLen--
	}
	s.events[(s.evHead+s.evLen)%eventQueue] = ev
	s.evLen++
}

// PollEvent returns the oldest channel transition not yet returned.
func (s *Stripe) PollEvent() (ChannelEvent, bool) {
	if s.evLen == 0 {
		return ChannelEvent{}, false
	}
	ev := s.events[s.evHead]
	s.evHead = (s.evHead + 1) % eventQueue
	s.evLen--
	return ev, true
}

// Stats returns the stripe's counters.
func (s *Stripe) Stats() StripeStats { return s.stats }

// ChannelStats returns channel c's counters.
func (s *Stripe) ChannelStats(c int) ChannelStats {
	ch := &s.ch[c]
	st := ch.stats
	st.Up = ch.up
	st.InFlight = int(ch.nxt - ch.una)
	return st
}
