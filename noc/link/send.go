package link

import (
	"encoding/binary"
	"time"
)

// reorderSlack is how many later transmissions may arrive before an
// unacknowledged fragment is taken as lost rather than reordered.
const reorderSlack = 3

// maxBackoff bounds the exponent of the retransmission backoff.
const maxBackoff = 16

// sendSlot is one fragment between Send and its acknowledgement.
type sendSlot struct {
	buf    []byte
	flags  Flags // FlagFirst, FlagLast
	sentAt time.Duration
	xmit   uint64 // transmission order of the latest (re)transmission
	retx   uint32 // times retransmitted
	sacked bool   // selectively acknowledged
	queued bool   // marked for retransmission
}

// sender holds the fragments of one link epoch: [una, nxt) in flight,
// [nxt, tail) waiting for the window.
type sender struct {
	slots   []sendSlot // ring indexed by seq & mask
	mask    uint32
	pool    [][]byte // free fragment buffers
	fragLen int
	window  uint32
	limit   uint32 // fragments held at most: window + send queue

	una, nxt, tail uint32
	edge           uint32 // the peer accepts seq < edge

	xmits        uint64 // transmissions so far
	rackXmit     uint64 // latest transmission known to have arrived
	retxInFlight int    // slots in flight that were retransmitted
	nQueued      int    // slots marked for retransmission
	retxLow      uint32 // no marked slot below this
	stalled      bool
	restart      bool // the next transmission starts a new flight

	rtoFloor       time.Duration // no in-flight slot was sent before this
	srtt, rttvar   time.Duration
	sampled        bool
	rtoBase        time.Duration
	minRTO, maxRTO time.Duration
	backoff        uint
	lastProgress   time.Duration
}

func (s *sender) init(c *Config) {
	s.fragLen = c.fragmentLen()
	s.window = uint32(c.Window)
	s.limit = uint32(c.Window + c.SendQueue)
	n := 1
	for n < int(s.limit) {
		n <<= 1
	}
	s.slots = make([]sendSlot, n)
	s.mask = uint32(n - 1)
	// One backing array for every fragment buffer.
	store := make([]byte, int(s.limit)*s.fragLen)
	s.pool = make([][]byte, 0, s.limit)
	for i := range int(s.limit) {
		s.pool = append(s.pool, store[i*s.fragLen:(i+1)*s.fragLen:(i+1)*s.fragLen])
	}
	s.minRTO, s.maxRTO = c.RTO, c.MaxRTO
}

// reset drops every fragment and starts at sequence number first. It
// returns how many messages were abandoned.
func (s *sender) reset(first uint32) (abandoned uint64) {
	for q := s.una; q != s.tail; q++ {
		sl := &s.slots[q&s.mask]
		if sl.flags&FlagLast != 0 {
			abandoned += uint64(packedCount(sl))
		}
		s.pool = append(s.pool, sl.buf)
		*sl = sendSlot{}
	}
	s.una, s.nxt, s.tail, s.edge, s.retxLow = first, first, first, first, first
	s.rackXmit, s.retxInFlight, s.nQueued, s.stalled = 0, 0, 0, false
	s.srtt, s.rttvar, s.sampled, s.rtoBase, s.backoff = 0, 0, false, s.minRTO, 0
	return abandoned
}

func (s *sender) inFlight() bool { return s.una != s.nxt }

// packLen is the length prefix of each message of a packed datagram.
const packLen = 2

// queue splits msg into fragments; false when they do not all fit. With
// pack, a message that fits in the room the last fragment queued leaves,
// when that is a whole message not yet sent, joins its datagram instead.
func (s *sender) queue(msg []byte, pack bool, st *Stats) bool {
	if pack && len(msg) > 0 && s.packInto(msg) {
		st.Packed++
		return true
	}
	k := max(1, (len(msg)+s.fragLen-1)/s.fragLen)
	if uint32(k) > s.limit-(s.tail-s.una) {
		return false
	}
	f := FlagFirst
	for {
		n := min(len(msg), s.fragLen)
		last := len(s.pool) - 1
		sl := &s.slots[s.tail&s.mask]
		sl.buf = append(s.pool[last][:0], msg[:n]...)
		s.pool = s.pool[:last]
		msg = msg[n:]
		if len(msg) == 0 {
			f |= FlagLast
		}
		sl.flags = f
		s.tail++
		if f&FlagLast != 0 {
			return true
		}
		f = 0
	}
}

// packInto appends msg to the last queued fragment when it is a whole
// message not yet sent and msg fits beside it, making it a packed
// datagram if it was not one.
func (s *sender) packInto(msg []byte) bool {
	if s.tail == s.nxt {
		return false // nothing waits to be sent
	}
	sl := &s.slots[(s.tail-1)&s.mask]
	if sl.flags&(FlagFirst|FlagLast) != FlagFirst|FlagLast {
		return false
	}
	need := packLen + len(msg)
	if sl.flags&FlagPacked == 0 {
		need += packLen
	}
	if len(sl.buf)+need > s.fragLen {
		return false
	}
	if sl.flags&FlagPacked == 0 {
		n := len(sl.buf)
		sl.buf = sl.buf[:n+packLen]
		copy(sl.buf[packLen:], sl.buf[:n])
		binary.BigEndian.PutUint16(sl.buf, uint16(n))
		sl.flags |= FlagPacked
	}
	sl.buf = binary.BigEndian.AppendUint16(sl.buf, uint16(len(msg)))
	sl.buf = append(sl.buf, msg...)
	return true
}

// packedCount is how many messages slot sl ends: those of a packed
// datagram, else one.
func packedCount(sl *sendSlot) int {
	if sl.flags&FlagPacked == 0 {
		return 1
	}
	k := 0
	for _, o, ok := packedAt(sl.buf, 0); ok; _, o, ok = packedAt(sl.buf, o) {
		k++
	}
	return k
}

// nextNew returns the next unsent fragment if the window and the peer's
// credits allow it.
func (s *sender) nextNew(st *Stats) (uint32, bool) {
	if s.nxt == s.tail {
		return 0, false
	}
	if s.nxt-s.una >= s.window || !seqLess(s.nxt, s.edge) {
		if !s.stalled {
			s.stalled = true
			st.WindowStalls++
		}
		return 0, false
	}
	s.stalled = false
	q := s.nxt
	s.restart = s.una == s.nxt // the flight was empty: timers start over
	s.nxt++
	return q, true
}

// creditStalled reports data waiting only for the peer's credits.
func (s *sender) creditStalled() bool {
	return s.nxt != s.tail && s.nxt-s.una < s.window && !seqLess(s.nxt, s.edge)
}

// nextRetransmit returns the lowest fragment marked for retransmission.
func (s *sender) nextRetransmit() (uint32, bool) {
	if s.nQueued == 0 {
		return 0, false
	}
	q := s.retxLow
	if seqLess(q, s.una) {
		q = s.una
	}
	for ; q != s.nxt; q++ {
		sl := &s.slots[q&s.mask]
		if sl.queued {
			sl.queued = false
			s.nQueued--
			s.retxLow = q + 1
			if sl.retx == 0 {
				s.retxInFlight++
			}
			sl.retx++
			return q, true
		}
	}
	s.nQueued = 0 // unreachable while the count is kept right
	return 0, false
}

// transmit stamps fragment q as sent now and returns it.
func (s *sender) transmit(now time.Duration, q uint32) *sendSlot {
	sl := &s.slots[q&s.mask]
	if s.restart {
		s.rtoFloor = now
		s.lastProgress = now
		s.restart = false
	}
	s.xmits++
	sl.xmit = s.xmits
	sl.sentAt = now
	return sl
}

// mark queues fragment q for retransmission.
func (s *sender) mark(q uint32, sl *sendSlot) {
	sl.queued = true
	s.nQueued++
	if seqLess(q, s.retxLow) {
		s.retxLow = q
	}
}

// onAck applies the cumulative ack, credits and SACK blocks of a datagram
// from the current peer.
func (s *sender) onAck(now time.Duration, h *Header, st *Stats) {
	ack := h.Ack
	if seqLess(s.nxt, ack) {
		st.ProtocolErrors++ // acknowledges what was never sent
		return
	}
	if edge := ack + uint32(h.Credits); seqLess(s.edge, edge) {
		s.edge = edge
	}
	if seqLess(ack, s.una) {
		return // an older ack overtaken by a newer one
	}
	advanced := false
	if ack != s.una {
		if last := &s.slots[(ack-1)&s.mask]; last.retx == 0 && !last.sacked {
			s.sample(now - last.sentAt)
		}
		for q := s.una; q != ack; q++ {
			sl := &s.slots[q&s.mask]
			if sl.xmit > s.rackXmit {
				s.rackXmit = sl.xmit
			}
			if sl.retx > 0 {
				s.retxInFlight--
			}
			if sl.queued {
				s.nQueued--
			}
			s.pool = append(s.pool, sl.buf)
			*sl = sendSlot{}
		}
		s.una = ack
		s.backoff = 0
		s.lastProgress = now
		advanced = true
	}
	// The ack describes every fragment below known: each arrived or is
	// a hole. Beyond it nothing is known, so nothing there is judged lost.
	known := ack
	for i := range h.NSACK {
		b := h.SACK[i]
		start, end := ack+uint32(b.Start), ack+uint32(b.Start)+uint32(b.Count)
		if seqLess(s.nxt, end) || seqLess(end, start) {
			end = s.nxt
		}
		if seqLess(known, end) {
			known = end
		}
		for q := start; seqLess(q, end); q++ {
			sl := &s.slots[q&s.mask]
			if sl.sacked {
				continue
			}
			sl.sacked = true
			if sl.queued {
				sl.queued = false
				s.nQueued--
			}
			if sl.xmit > s.rackXmit {
				s.rackXmit = sl.xmit
				advanced = true
			}
		}
	}
	if advanced {
		s.detectLoss(known, st)
	}
}

// detectLoss marks as lost every unacknowledged fragment below known that
// was transmitted more than reorderSlack transmissions before one that has
// arrived (RACK, counting transmissions instead of time).
func (s *sender) detectLoss(known uint32, st *Stats) {
	for q := s.una; seqLess(q, known); q++ {
		sl := &s.slots[q&s.mask]
		if sl.sacked || sl.queued {
			continue
		}
		if sl.xmit+reorderSlack < s.rackXmit {
			s.mark(q, sl)
			st.FastRetransmits++
		} else if s.retxInFlight == 0 {
			// Without retransmissions, later slots were sent later.
			return
		}
	}
}

// checkRTO marks the fragments whose retransmission timer expired.
func (s *sender) checkRTO(now time.Duration, st *Stats) {
	if !s.inFlight() {
		return
	}
	rto := s.rto()
	if now < s.rtoFloor+rto {
		return
	}
	floor, expired := now, false
	for q := s.una; q != s.nxt; q++ {
		sl := &s.slots[q&s.mask]
		if sl.sacked || sl.queued {
			continue
		}
		if sl.sentAt+rto <= now {
			s.mark(q, sl)
			expired = true
		} else if sl.sentAt < floor {
			floor = sl.sentAt
		}
	}
	s.rtoFloor = floor
	if expired {
		st.Timeouts++
		if s.backoff < maxBackoff {
			s.backoff++
		}
	}
}

// rto is the current retransmission timeout, backoff included.
func (s *sender) rto() time.Duration {
	r := s.rtoBase
	for i := uint(0); i < s.backoff && r < s.maxRTO; i++ {
		r *= 2
	}
	return min(r, s.maxRTO)
}

// sample feeds one round-trip time into the estimator (RFC 6298).
func (s *sender) sample(r time.Duration) {
	if r < 0 {
		return
	}
	if !s.sampled {
		s.srtt, s.rttvar, s.sampled = r, r/2, true
	} else {
		d := s.srtt - r
		if d < 0 {
			d = -d
		}
		s.rttvar = (3*s.rttvar + d) / 4
		s.srtt = (7*s.srtt + r) / 8
	}
	s.rtoBase = min(max(s.srtt+4*s.rttvar, s.minRTO), s.maxRTO)
}
