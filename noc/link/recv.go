package link

import (
	"encoding/binary"
	"time"
)

// recvSlot is one fragment that arrived and was not yet delivered.
type recvSlot struct {
	buf     []byte
	flags   Flags
	present bool
}

// receiver holds the peer's fragments of one link epoch: [base, nxt)
// arrived in order and wait for Receive; slots beyond nxt arrived out of
// order. It accepts sequence numbers below base+window.
type receiver struct {
	slots      []recvSlot // ring indexed by seq & mask
	mask       uint32
	pool       [][]byte
	fragLen    int // largest fragment accepted
	window     uint32
	maxMessage int

	base, nxt uint32
	ooo       int    // slots present beyond nxt
	oooHigh   uint32 // highest of them
	complete  int    // messages complete in [base, nxt)

	ackPending bool // a data datagram arrived since the last ack
	ackNow     bool // the owed ack may not wait (AckDelay)
	ackSince   time.Duration
	ackData    int    // data datagrams since the last ack
	advEdge    uint32 // right edge last advertised (ack + credits)
	advZero    bool   // the last advertisement granted no credits
	sack       [MaxSACK]SACKBlock
	nsack      uint8
	sackDirty  bool

	msg     []byte // the message Receive lends out
	packOff int    // where the next message of the packed slot at base starts
}

func (r *receiver) init(c *Config) {
	r.fragLen = c.MTU - HeaderLen - TrailerLen
	r.window = uint32(c.Window)
	r.maxMessage = c.MaxMessage
	n := 1
	for n < c.Window {
		n <<= 1
	}
	r.slots = make([]recvSlot, n)
	r.mask = uint32(n - 1)
	store := make([]byte, c.Window*r.fragLen)
	r.pool = make([][]byte, 0, c.Window)
	for i := range c.Window {
		r.pool = append(r.pool, store[i*r.fragLen:(i+1)*r.fragLen:(i+1)*r.fragLen])
	}
	r.msg = make([]byte, 0, c.MaxMessage)
}

// reset drops every fragment and expects first next. It returns how many
// complete messages were dropped undelivered.
func (r *receiver) reset(first uint32) (discarded uint64) {
	discarded = uint64(r.complete)
	for i := range r.slots {
		if sl := &r.slots[i]; sl.present {
			r.pool = append(r.pool, sl.buf)
			*sl = recvSlot{}
		}
	}
	r.base, r.nxt, r.advEdge = first, first, first
	r.ooo, r.complete, r.nsack = 0, 0, 0
	r.ackPending, r.sackDirty, r.advZero = false, false, false
	r.ackNow, r.ackData, r.packOff = false, 0, 0
	return discarded
}

// ackDue reports whether the owed ack must go now: at once without an
// AckDelay, for a second data datagram, a gap or a duplicate, else once the
// delay has passed.
func (r *receiver) ackDue(now, delay time.Duration) bool {
	return r.ackPending && (delay == 0 || r.ackNow || r.ackData >= 2 || now-r.ackSince >= delay)
}

// credits is how many sequence numbers from nxt on this end accepts.
func (r *receiver) credits() uint32 { return r.base + r.window - r.nxt }

// onData stores one fragment.
func (r *receiver) onData(now time.Duration, seq uint32, f Flags, payload []byte, st *Stats) {
	if !r.ackPending {
		r.ackPending, r.ackSince = true, now
	}
	r.ackData++
	if seq != r.nxt || r.ooo > 0 {
		r.ackNow = true // a gap, or a duplicate: the sender must hear at once
	}
	if seqLess(seq, r.nxt) {
		st.Duplicates++
		return
	}
	if seq-r.base >= r.window {
		st.OutOfWindow++
		return
	}
	if len(payload) > r.fragLen {
		st.ProtocolErrors++
		return
	}
	sl := &r.slots[seq&r.mask]
	if sl.present {
		st.Duplicates++
		return
	}
	last := len(r.pool) - 1
	sl.buf = append(r.pool[last][:0], payload...)
	r.pool = r.pool[:last]
	sl.flags = f & (FlagFirst | FlagLast | FlagPacked)
	sl.present = true
	if seq != r.nxt {
		r.ooo++
		if r.ooo == 1 || seqLess(r.oooHigh, seq) {
			r.oooHigh = seq
		}
		r.sackDirty = true
		return
	}
	for {
		if r.slots[r.nxt&r.mask].flags&FlagLast != 0 {
			r.complete++
		}
		r.nxt++
		if r.nxt-r.base >= r.window || !r.slots[r.nxt&r.mask].present {
			break
		}
		r.ooo--
	}
	r.sackDirty = r.ooo > 0
	if r.nxt-r.base == r.window && r.complete == 0 {
		// The window is full of one unfinished message: it is larger
		// than this end accepts. Drop it; its remaining fragments are
		// dropped by next as they complete.
		r.release(r.nxt)
		st.Discarded++
	}
}

// next returns the next complete message, dropping ill-formed ones.
func (r *receiver) next(st *Stats) ([]byte, bool) {
outer:
	for r.complete > 0 {
		start, q, total := r.base, r.base, 0
		if r.slots[start&r.mask].flags&FlagPacked != 0 {
			if msg, ok := r.unpack(st); ok {
				return msg, true
			}
			continue
		}
		for {
			sl := &r.slots[q&r.mask]
			if q != start && sl.flags&FlagFirst != 0 {
				// A message started before the previous one ended.
				r.release(q)
				st.Discarded++
				start, total = q, 0
				if sl.flags&FlagPacked != 0 {
					continue outer
				}
			}
			total += len(sl.buf)
			if sl.flags&FlagLast != 0 {
				break
			}
			q++
		}
		r.complete--
		if r.slots[start&r.mask].flags&FlagFirst == 0 || total > r.maxMessage {
			r.release(q + 1)
			st.Discarded++
			continue
		}
		msg := r.msg[:0]
		for i := start; i != q+1; i++ {
			msg = append(msg, r.slots[i&r.mask].buf...)
		}
		r.release(q + 1)
		r.msg = msg
		return msg, true
	}
	return nil, false
}

// unpack returns the next message of the packed datagram at base, and
// frees the datagram after its last one. A datagram whose lengths do not
// cover its payload exactly is dropped whole (Stats.Discarded) before any
// of it is returned.
func (r *receiver) unpack(st *Stats) ([]byte, bool) {
	buf := r.slots[r.base&r.mask].buf
	if r.packOff == 0 && !wellPacked(buf, r.maxMessage) {
		st.Discarded++
		r.endPacked()
		return nil, false
	}
	msg, next, _ := packedAt(buf, r.packOff)
	r.msg = append(r.msg[:0], msg...)
	r.packOff = next
	if r.packOff == len(buf) {
		r.endPacked()
	}
	return r.msg, true
}

// packedAt returns the message of packed payload b at offset o and the
// offset after it; false when no whole message of at least a byte starts
// there.
func packedAt(b []byte, o int) (msg []byte, next int, ok bool) {
	if o+packLen > len(b) {
		return nil, o, false
	}
	next = o + packLen + int(binary.BigEndian.Uint16(b[o:]))
	if next == o+packLen || next > len(b) {
		return nil, o, false
	}
	return b[o+packLen : next], next, true
}

// wellPacked reports whether the lengths of packed payload b cover it
// exactly, each message at least a byte and at most max.
func wellPacked(b []byte, max int) bool {
	for o := 0; o < len(b); {
		msg, next, ok := packedAt(b, o)
		if !ok || len(msg) > max {
			return false
		}
		o = next
	}
	return len(b) > 0
}

// endPacked frees the packed datagram at base.
func (r *receiver) endPacked() {
	r.complete--
	r.packOff = 0
	r.release(r.base + 1)
}

// release frees the in-order slots [base, to).
func (r *receiver) release(to uint32) {
	for ; r.base != to; r.base++ {
		sl := &r.slots[r.base&r.mask]
		r.pool = append(r.pool, sl.buf)
		*sl = recvSlot{}
	}
}

// windowOpened reports whether consuming messages opened the window enough
// to tell the peer at once: it had no credits, or a quarter window more.
func (r *receiver) windowOpened() bool {
	edge := r.base + r.window
	if edge == r.advEdge {
		return false
	}
	return r.advZero || edge-r.advEdge >= max(1, r.window/4)
}

// fillAck writes the cumulative ack, credits and SACK blocks into h.
func (r *receiver) fillAck(h *Header) {
	c := r.credits()
	h.Ack = r.nxt
	h.Credits = uint16(c)
	r.advEdge, r.advZero = r.nxt+c, c == 0
	r.ackPending, r.ackNow, r.ackData = false, false, 0
	if r.ooo == 0 {
		h.NSACK = 0
		return
	}
	if r.sackDirty {
		r.buildSACK()
	}
	h.NSACK = r.nsack
	h.SACK = r.sack
}

// buildSACK describes the lowest MaxSACK runs of fragments present beyond
// nxt, so that the sender knows the fate of every fragment up to the end of
// the last block.
func (r *receiver) buildSACK() {
	r.nsack = 0
	in := false
	var runStart uint32
	emit := func(from, to uint32) {
		r.sack[r.nsack] = SACKBlock{Start: uint16(from - r.nxt), Count: uint16(to - from)}
		r.nsack++
	}
	for q := r.nxt + 1; q != r.oooHigh+1 && r.nsack < MaxSACK; q++ {
		present := r.slots[q&r.mask].present
		if present && !in {
			in, runStart = true, q
		} else if !present && in {
			in = false
			emit(runStart, q)
		}
	}
	if in && r.nsack < MaxSACK {
		emit(runStart, r.oooHigh+1)
	}
	r.sackDirty = false
}

// Unpacked returns the messages of the payload of a FlagPacked datagram
// (for tools that read captured datagrams), or false when its lengths do
// not cover it exactly.
func Unpacked(payload []byte) ([][]byte, bool) {
	if !wellPacked(payload, MaxMTU) {
		return nil, false
	}
	var msgs [][]byte
	for o := 0; o < len(payload); {
		msg, next, _ := packedAt(payload, o)
		msgs = append(msgs, msg)
		o = next
	}
	return msgs, true
}
