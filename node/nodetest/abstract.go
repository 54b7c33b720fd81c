package nodetest

import (
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/node"
)

// AbstractLink is a node.Link that carries whole NoC frames over abstract
// wires (Wiring.Abstract): every message is one "datagram" on the wire, and
// the wire delivers them in order and without loss, so there are no link
// headers, acks, windows, heartbeats or retransmissions. Its carrier is
// raised and dropped by the wires (a cut wire, a killed neighbour), which
// stands in for the real link's handshake and dead interval; messages not
// yet delivered when the carrier drops are lost, as a real link abandons
// them when it goes down.
//
// Send puts a copy of the frame on the wire at once (at the driver's time,
// Wires.ShareClock), and never refuses for room: there is no send queue
// for a driver to move onto the wire.
type AbstractLink struct {
	session, peer uint64
	epoch         uint32
	up            bool
	in            [][]byte // arrived, not yet received (from inHead)
	inHead        int
	wires         *Wires        // what Send puts frames on
	to            End           // the far end of its wire
	wire          int32         // the wire's index
	last          time.Duration // when the last frame sent arrives (in order)
	pool          *framePool    // shared with the wires and the other links
	recv          []byte        // the message Receive returned last
	events        []link.Event
	stats         link.Stats
}

// abstractMTU is the largest message an abstract link carries: a whole
// frame with the largest payload.
const abstractMTU = noc.HeaderLen + noc.MaxPayload

var _ node.Link = (*AbstractLink)(nil)

func newAbstractLink(session uint64, w *Wires, end End) *AbstractLink {
	return &AbstractLink{session: session, wires: w, to: w.peer[end.Node][end.Port], wire: w.index[end.Node][end.Port], pool: &w.pool}
}

// setCarrier raises or drops the link at now, in link epoch epoch, facing
// the peer link with session peer.
func (l *AbstractLink) setCarrier(now time.Duration, up bool, epoch uint32, peer uint64) {
	l.epoch = epoch
	if up == l.up {
		return
	}
	l.up = up
	if up {
		l.peer = peer
		l.stats.Ups++
		l.events = append(l.events, link.Event{At: now, Up: true, Reason: link.ReasonHandshake, PeerSession: peer, PeerEpoch: epoch})
		return
	}
	l.stats.Discarded += uint64(len(l.in) - l.inHead)
	for _, b := range l.in[l.inHead:] {
		l.pool.put(b)
	}
	clear(l.in)
	l.in, l.inHead = l.in[:0], 0
	l.stats.Downs++
	l.events = append(l.events, link.Event{At: now, Up: false, Reason: link.ReasonDead, PeerSession: l.peer, PeerEpoch: epoch})
}

// Up reports whether the carrier is up.
func (l *AbstractLink) Up() bool { return l.up }

// Send puts a copy of msg on the wire to the peer.
func (l *AbstractLink) Send(now time.Duration, msg []byte) error {
	if len(msg) > abstractMTU {
		return fmt.Errorf("%w: %d > %d bytes", link.ErrTooLarge, len(msg), abstractMTU)
	}
	if !l.up {
		return link.ErrDown
	}
	l.stats.TxMessages++
	l.stats.TxDatagrams++
	l.stats.TxBytes += uint64(len(msg))
	l.wires.send(now, l, msg)
	return nil
}

// Input takes one frame the wire delivered, and keeps d itself: abstract
// wires hand every frame they deliver over to the receiving link
// (Wires.Pop), which gives the buffer back to the wires' pool once the
// frame was received.
func (l *AbstractLink) Input(now time.Duration, d []byte) error {
	if !l.up {
		l.stats.Stale++
		l.pool.put(d)
		return nil
	}
	l.stats.RxDatagrams++
	l.stats.RxBytes += uint64(len(d))
	l.in = append(l.in, d)
	return nil
}

// Output has nothing to give: Send put every frame on the wire.
func (l *AbstractLink) Output(time.Duration, []byte) (int, bool) { return 0, false }

// Receive returns the next message, valid until the next Receive.
func (l *AbstractLink) Receive() ([]byte, bool) {
	if l.recv != nil {
		l.pool.put(l.recv)
		l.recv = nil
	}
	if l.inHead == len(l.in) {
		return nil, false
	}
	l.recv = l.in[l.inHead]
	l.in[l.inHead] = nil
	if l.inHead++; l.inHead == len(l.in) {
		l.in, l.inHead = l.in[:0], 0
	}
	l.stats.RxMessages++
	return l.recv, true
}

// Tick does nothing: an abstract link has no timers.
func (l *AbstractLink) Tick(time.Duration) {}

// NextDeadline is when a carrier change waits to be polled, else never.
func (l *AbstractLink) NextDeadline() time.Duration {
	if len(l.events) > 0 {
		return l.events[0].At
	}
	return time.Duration(1<<63 - 1)
}

// PollEvent returns the oldest carrier change not yet returned.
func (l *AbstractLink) PollEvent() (link.Event, bool) {
	if len(l.events) == 0 {
		return link.Event{}, false
	}
	ev := l.events[0]
	l.events = l.events[1:]
	return ev, true
}

// Session returns the link's session and its carrier's epoch.
func (l *AbstractLink) Session() (uint64, uint32) { return l.session, l.epoch }

// Config says the link's MTU (the largest frame) and message size.
func (l *AbstractLink) Config() link.Config {
	return link.Config{MTU: abstractMTU, MaxMessage: abstractMTU, Session: l.session}
}

// Stats returns the link's counters.
func (l *AbstractLink) Stats() link.Stats {
	return l.stats
}

// framePool keeps frame buffers for reuse: the abstract links of one set
// of wires and the wires themselves pass buffers around instead of copying
// frames from one to the next.
type framePool struct{ free [][]byte }

// poolMax bounds the buffers a pool keeps.
const poolMax = 1 << 14

// get returns an empty buffer that holds n bytes.
func (p *framePool) get(n int) []byte {
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		if cap(b) >= n {
			return b[:0]
		}
	}
	return make([]byte, 0, max(n, 256))
}

// put gives a buffer back.
func (p *framePool) put(b []byte) {
	if b != nil && len(p.free) < poolMax {
		p.free = append(p.free, b)
	}
}
