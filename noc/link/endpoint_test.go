package link_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

func TestFragmentationUnderLoss(t *testing.T) {
	const page = 4096 + noc.HeaderLen // a page and its frame header
	p := newPump(t, lossy(11), testConfig(111), testConfig(112))
	p.waitUp()
	ab := newStream(t, "a->b", 400, func(i int) int {
		switch i % 10 {
		case 0:
			return noc.HeaderLen + noc.MaxPayload // the largest frame
		case 1:
			return 1500 - link.Overhead // exactly one fragment
		case 2:
			return 1500 - link.Overhead + 1 // one byte into a second
		}
		return page
	})
	p.recvB = ab.check
	p.until(10*time.Minute, "pages", func() bool { ab.fill(p.now, p.a); return ab.done() })
	sa, sb := p.a.Stats(), p.b.Stats()
	if sa.TxDatagrams < 3*400 {
		t.Errorf("%d datagrams for 400 messages of at least 4 KiB over a 1500-byte MTU", sa.TxDatagrams)
	}
	if sa.Retransmits == 0 || sb.OutOfWindow != 0 || sa.Downs != 0 {
		t.Errorf("a %+v\nb %+v", sa, sb)
	}
}

// TestSequenceWraparound: both ends start a few hundred sequence numbers
// below 2^32 and carry streams across it under loss. The wire shows it
// happened: each end sent data with sequence numbers 2^32-1 and 0 in one
// link epoch, and the peer's cumulative ack for that epoch passed 0.
func TestSequenceWraparound(t *testing.T) {
	// With epoch 0 the first sequence number is the xor of the session's
	// halves: both streams cross 2^32.
	p := newPump(t, lossy(5), testConfig(0xFFFFFF00), testConfig(0x1_FFFFFFF0^1))
	wa, wb := newWrapWatch(), newWrapWatch()
	p.tapA = func(b []byte) { watchWrap(t, b, wa, wb) }
	p.tapB = func(b []byte) { watchWrap(t, b, wb, wa) }
	p.waitUp()
	ab := newStream(t, "a->b", 2000, func(i int) int { return 8 + i%50 })
	ba := newStream(t, "b->a", 2000, func(i int) int { return 8 + i%70 })
	p.recvB, p.recvA = ab.check, ba.check
	p.until(10*time.Minute, "streams", func() bool {
		ab.fill(p.now, p.a)
		ba.fill(p.now, p.b)
		return ab.done() && ba.done()
	})
	for _, w := range []struct {
		name string
		w    *wrapWatch
	}{{"a->b", wa}, {"b->a", wb}} {
		if !w.w.crossed() {
			t.Errorf("%s did not cross 2^32 in one epoch: data at 2^32-1 in epochs %v, at 0 in %v; acks past 0 in %v",
				w.name, w.w.top, w.w.zero, w.w.ackedPast)
		}
	}
}

// wrapWatch records, per link epoch of one sender, whether it sent data
// with sequence numbers 2^32-1 and 0 and whether its peer's cumulative
// ack went past 0.
type wrapWatch struct {
	top, zero, ackedPast map[uint32]bool
}

func newWrapWatch() *wrapWatch {
	return &wrapWatch{top: map[uint32]bool{}, zero: map[uint32]bool{}, ackedPast: map[uint32]bool{}}
}

func (w *wrapWatch) crossed() bool {
	for e := range w.top {
		if w.zero[e] && w.ackedPast[e] {
			return true
		}
	}
	return false
}

// watchWrap reads one datagram that the end watched by self wrote: its
// data sequence numbers count for self, its ack for the peer.
func watchWrap(t *testing.T, b []byte, self, peer *wrapWatch) {
	var h link.Header
	if _, err := h.Decode(b); err != nil {
		t.Fatalf("datagram on the wire: %v", err)
	}
	if h.Flags&link.FlagData != 0 {
		switch h.Seq {
		case math.MaxUint32:
			self.top[h.SrcEpoch] = true
		case 0:
			self.zero[h.SrcEpoch] = true
		}
	}
	// The streams are a few thousand fragments: an ack this small follows
	// the wrap.
	if h.DstSession != 0 && h.Ack > 0 && h.Ack < 1<<16 {
		peer.ackedPast[h.DstEpoch] = true
	}
}

// TestCredits: a receiver that does not drain its messages stops the
// sender at its window, and the sender never exceeds the credits.
func TestCredits(t *testing.T) {
	cb := testConfig(2)
	cb.Window = 8
	cb.MaxMessage = 1000
	p := newPump(t, mem.Config{}, testConfig(1), cb)
	p.waitUp()
	ab := newStream(t, "a->b", 100, func(int) int { return 100 })
	// b holds its messages for a while.
	for range 1000 {
		ab.fill(p.now, p.a)
		p.step()
		if s := p.a.Stats(); s.InFlight > 8 {
			t.Fatalf("%d fragments in flight with 8 credits", s.InFlight)
		}
	}
	if sa := p.a.Stats(); sa.InFlight != 0 || sa.WindowStalls == 0 || sa.Queued == 0 {
		t.Fatalf("sender should wait on credits with everything acked: %+v", sa)
	}
	p.recvB = ab.check
	p.until(time.Minute, "stream", func() bool { ab.fill(p.now, p.a); return ab.done() })
	if sb := p.b.Stats(); sb.OutOfWindow != 0 {
		t.Errorf("sender exceeded credits: %+v", sb)
	}
}

// TestOversizedMessageFromPeer: a peer sending a message larger than this
// end accepts loses that message, not the link.
func TestOversizedMessageFromPeer(t *testing.T) {
	cb := testConfig(2)
	cb.Window = 4
	cb.MaxMessage = 2000
	p := newPump(t, mem.Config{}, testConfig(1), cb)
	p.waitUp()
	sizes := []int{100, 8 * 1440, 300, 3000, 50}
	for i, n := range sizes {
		if err := p.a.Send(p.now, make([]byte, n)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	var got []int
	p.recvB = func(m []byte) { got = append(got, len(m)) }
	p.until(time.Minute, "deliveries", func() bool { return p.a.Stats().InFlight+p.a.Stats().Queued == 0 })
	if len(got) != 3 || got[0] != 100 || got[1] != 300 || got[2] != 50 {
		t.Errorf("delivered sizes %v, want [100 300 50]", got)
	}
	if sb := p.b.Stats(); sb.Discarded == 0 || sb.Downs != 0 {
		t.Errorf("b: %+v", sb)
	}
}

func TestDeadIntervalAndRecovery(t *testing.T) {
	p := newPump(t, mem.Config{}, testConfig(1), testConfig(2))
	p.waitUp()
	p.cutA, p.cutB = true, true
	p.until(time.Minute, "link down", func() bool { return !p.a.Up() && !p.b.Up() })
	cfg := testConfig(1)
	if p.now < cfg.DeadInterval || p.now > cfg.DeadInterval+cfg.HeartbeatInterval+time.Millisecond {
		t.Errorf("down at %v, dead interval %v", p.now, cfg.DeadInterval)
	}
	for _, ev := range p.events[len(p.events)-2:] {
		if !strings.Contains(ev, "down (dead)") {
			t.Errorf("event %q, want a dead-interval down", ev)
		}
	}
	if err := p.a.Send(p.now, []byte("x")); !errors.Is(err, link.ErrDown) {
		t.Errorf("Send while down: %v", err)
	}
	// Stay cut for a while: heartbeats keep going out, nothing comes up.
	p.until(time.Minute, "a while", func() bool { return p.now > 10*time.Second })
	if p.a.Up() || p.b.Up() {
		t.Fatal("up while cut")
	}
	p.cutA, p.cutB = false, false
	start := p.now
	p.waitUp()
	if p.now-start > 2*cfg.HeartbeatInterval {
		t.Errorf("took %v to come back, heartbeat %v", p.now-start, cfg.HeartbeatInterval)
	}
	ab := newStream(t, "a->b", 100, func(int) int { return 64 })
	p.recvB = ab.check
	p.until(time.Minute, "stream", func() bool { ab.fill(p.now, p.a); return ab.done() })
}

// TestOneWayFailure: when only a->b fails, b declares the link dead and
// its new epoch takes a down too (ReasonPeerReset), though a still hears b.
func TestOneWayFailure(t *testing.T) {
	p := newPump(t, mem.Config{}, testConfig(1), testConfig(2))
	p.waitUp()
	p.cutA = true
	p.until(time.Minute, "link down", func() bool { return !p.a.Up() && !p.b.Up() })
	var reset bool
	for _, ev := range p.events {
		reset = reset || strings.HasPrefix(ev, "a: ") && strings.Contains(ev, "down (peer-reset)")
	}
	if !reset {
		t.Errorf("a did not see b's reset: %v", p.events)
	}
	p.cutA = false
	p.waitUp()
	if _, e := p.a.Session(); e == 0 {
		t.Error("a still in epoch 0 after going down")
	}
}

// TestPeerRestart: b is replaced by a new incarnation. a notices, goes down
// and up with the new session, abandons what it queued for the old one, and
// no datagram of the old session or epoch is ever delivered.
func TestPeerRestart(t *testing.T) {
	p := newPump(t, mem.Config{}, testConfig(1), testConfig(2))
	p.waitUp()
	old := newStream(t, "old a->b", 50, func(int) int { return 200 })
	p.recvB = old.check
	p.until(time.Minute, "old stream", func() bool { old.fill(p.now, p.a); return old.done() })

	// Capture everything both ends write while b's link is cut, with
	// data in flight from a.
	var fromA, fromB [][]byte // what each end wrote: late datagrams for the other
	capture := func(to *[][]byte) func([]byte) {
		return func(b []byte) { *to = append(*to, append([]byte(nil), b...)) }
	}
	p.tapA, p.tapB = capture(&fromA), capture(&fromB)
	p.cutA, p.cutB = true, true
	lost := newStream(t, "lost", 5, func(int) int { return 300 })
	lost.fill(p.now, p.a)
	cut := p.now
	p.until(time.Minute, "heartbeats", func() bool { return p.now > cut+3*testConfig(1).HeartbeatInterval })
	if len(fromA) == 0 || len(fromB) == 0 || !p.a.Up() {
		t.Fatalf("captured %d from a, %d from b; a up %v", len(fromA), len(fromB), p.a.Up())
	}
	p.tapA, p.tapB = nil, nil

	// b restarts with a new session on the same port.
	b2, err := link.NewEndpoint(testConfig(0xB2), p.now)
	if err != nil {
		t.Fatal(err)
	}
	p.b = b2
	p.recvB = expectNone(t, "b2")
	p.cutA, p.cutB = false, false
	p.events = nil
	p.waitUp()
	if len(p.events) < 3 || !strings.Contains(p.events[0], "a: ") || !strings.Contains(p.events[0], "down (peer-restart)") {
		t.Errorf("events %v: want a down for peer-restart first", p.events)
	}
	t.Logf("events: %q", p.events)
	if s, _, _ := p.a.Peer(); s != 0xB2 {
		t.Errorf("a's peer is %x", s)
	}
	if sa := p.a.Stats(); sa.Abandoned != 5 {
		t.Errorf("a abandoned %d messages, want the 5 queued for the old session", sa.Abandoned)
	}

	// Deliver the old datagrams late, each to the end it was sent to: all
	// are stale (a's old epoch at b2, b's retired session at a).
	staleA, staleB := p.a.Stats().Stale, b2.Stats().Stale
	for _, d := range fromB {
		if err := p.a.Input(p.now, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range fromA {
		if err := b2.Input(p.now, d); err != nil {
			t.Fatal(err)
		}
		if _, ok := b2.Receive(); ok {
			t.Fatal("b2 delivered a message of the old session")
		}
	}
	if p.a.Stats().Stale-staleA != uint64(len(fromB)) || b2.Stats().Stale-staleB != uint64(len(fromA)) {
		t.Errorf("replayed datagrams not counted stale: a %+v b2 %+v", p.a.Stats(), b2.Stats())
	}
	if !p.a.Up() || !b2.Up() {
		t.Fatal("a replay of stale datagrams took the link down")
	}

	// The new session starts from scratch.
	fresh := newStream(t, "new a->b2", 100, func(int) int { return 64 })
	p.recvB = fresh.check
	p.until(time.Minute, "new stream", func() bool { fresh.fill(p.now, p.a); return fresh.done() })
}

func TestSendErrors(t *testing.T) {
	cfg := testConfig(1)
	cfg.Window = 4
	cfg.SendQueue = 2
	cfg.MaxMessage = 4 * 1440
	p := newPump(t, mem.Config{}, cfg, testConfig(2))
	if err := p.a.Send(p.now, []byte("early")); !errors.Is(err, link.ErrDown) {
		t.Errorf("Send before up: %v", err)
	}
	p.waitUp()
	if err := p.a.Send(p.now, make([]byte, cfg.MaxMessage+1)); !errors.Is(err, link.ErrTooLarge) {
		t.Errorf("Send too large: %v", err)
	}
	for i := range 6 {
		if err := p.a.Send(p.now, []byte("m")); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := p.a.Send(p.now, []byte("m")); !errors.Is(err, link.ErrBackpressure) {
		t.Errorf("Send on a full queue: %v", err)
	}
	if err := p.a.Send(p.now, nil); !errors.Is(err, link.ErrBackpressure) {
		t.Errorf("Send of an empty message on a full queue: %v", err)
	}
	// An empty message is a message.
	var got [][]byte
	p.recvB = func(m []byte) { got = append(got, append([]byte(nil), m...)) }
	p.until(time.Minute, "drain", func() bool { return len(got) == 6 })
	if err := p.a.Send(p.now, nil); err != nil {
		t.Fatal(err)
	}
	p.until(time.Minute, "empty", func() bool { return len(got) == 7 })
	if len(got[6]) != 0 {
		t.Errorf("empty message arrived as %d bytes", len(got[6]))
	}
}

// TestCorruptDatagramChangesNothing: a datagram with a flipped bit is
// refused with ErrChecksum; the intact copy still delivers.
func TestCorruptDatagramChangesNothing(t *testing.T) {
	p := newPump(t, mem.Config{}, testConfig(1), testConfig(2))
	p.waitUp()
	if err := p.a.Send(p.now, []byte("payload")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n, ok := p.a.Output(p.now, buf)
	if !ok {
		t.Fatal("no datagram")
	}
	var h link.Header
	if _, err := h.Decode(buf[:n]); err != nil {
		t.Fatal(err)
	}
	d := buf[:h.Len()] // the feature word after the trailer is padding to the checks
	before := p.b.Stats()
	for i := range d {
		for bit := range 8 {
			d[i] ^= 1 << bit
			err := p.b.Input(p.now, d)
			d[i] ^= 1 << bit
			if err == nil {
				t.Fatalf("flipped bit %d of byte %d accepted", bit, i)
			}
			if !errors.Is(err, link.ErrChecksum) && !errors.Is(err, link.ErrMalformed) && !errors.Is(err, link.ErrVersion) {
				t.Fatalf("flipped bit %d of byte %d: %v", bit, i, err)
			}
		}
	}
	after := p.b.Stats()
	if after.CRCErrors+after.Malformed-before.CRCErrors-before.Malformed != uint64(8*len(d)) {
		t.Errorf("refusals not counted: %+v", after)
	}
	after.CRCErrors, after.Malformed = before.CRCErrors, before.Malformed
	if after != before {
		t.Errorf("corrupt input changed state:\n%+v\n%+v", before, after)
	}
	if _, ok := p.b.Receive(); ok {
		t.Fatal("delivered from corrupt datagrams")
	}
	if err := p.b.Input(p.now, d); err != nil {
		t.Fatal(err)
	}
	if m, ok := p.b.Receive(); !ok || string(m) != "payload" {
		t.Fatalf("intact datagram: %q %v", m, ok)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := testConfig(1)
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*link.Config)
	}{
		{"zero session", func(c *link.Config) { c.Session = 0 }},
		{"tiny MTU", func(c *link.Config) { c.MTU = link.Overhead }},
		{"huge MTU", func(c *link.Config) { c.MTU = 1 << 16 }},
		{"zero window", func(c *link.Config) { c.Window = 0 }},
		{"window beyond credits", func(c *link.Config) { c.Window = link.MaxWindow + 1 }},
		{"negative queue", func(c *link.Config) { c.SendQueue = -1 }},
		{"message beyond window", func(c *link.Config) { c.Window = 8 }},
		{"zero RTO", func(c *link.Config) { c.RTO = 0 }},
		{"MaxRTO below RTO", func(c *link.Config) { c.MaxRTO = c.RTO / 2 }},
		{"no heartbeat", func(c *link.Config) { c.HeartbeatInterval = 0 }},
		{"dead within a heartbeat", func(c *link.Config) { c.DeadInterval = c.HeartbeatInterval }},
		{"dead before MaxRTO", func(c *link.Config) { c.DeadInterval = c.MaxRTO }},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); !errors.Is(err, link.ErrConfig) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if _, err := link.NewEndpoint(c, 0); !errors.Is(err, link.ErrConfig) {
			t.Errorf("%s: NewEndpoint: %v", tc.name, err)
		}
	}
}

// TestConfigValidateAtItsBounds: each bound Validate states is inclusive
// where it says so: MTU MinMTU and MaxMTU, Window 1 and MaxWindow,
// SendQueue 0 and MaxWindow, a message of exactly Window fragments,
// AckDelay 0, MaxRTO equal to RTO, DeadInterval of exactly two heartbeats
// are accepted; one past each is refused.
func TestConfigValidateAtItsBounds(t *testing.T) {
	base := testConfig(1)
	small := func(c *link.Config) { c.MaxMessage = 64 } // one fragment at any MTU
	for _, tc := range []struct {
		name string
		edit func(*link.Config)
		ok   bool
	}{
		{"MTU MinMTU", func(c *link.Config) { small(c); c.MTU = link.MinMTU }, true},
		{"MTU MinMTU-1", func(c *link.Config) { small(c); c.MTU = link.MinMTU - 1 }, false},
		{"MTU MaxMTU", func(c *link.Config) { c.MTU = link.MaxMTU }, true},
		{"MTU MaxMTU+1", func(c *link.Config) { c.MTU = link.MaxMTU + 1 }, false},
		{"Window 1", func(c *link.Config) { small(c); c.Window = 1 }, true},
		{"Window MaxWindow", func(c *link.Config) { c.Window = link.MaxWindow }, true},
		{"SendQueue 0", func(c *link.Config) { c.SendQueue = 0 }, true},
		{"SendQueue MaxWindow", func(c *link.Config) { c.SendQueue = link.MaxWindow }, true},
		{"SendQueue MaxWindow+1", func(c *link.Config) { c.SendQueue = link.MaxWindow + 1 }, false},
		{"MaxMessage 0", func(c *link.Config) { c.MaxMessage = 0 }, true},
		{"message of Window fragments", func(c *link.Config) { c.Window = 1; c.MaxMessage = c.MTU - link.Overhead }, true},
		{"message of Window+1 fragments", func(c *link.Config) { c.Window = 1; c.MaxMessage = c.MTU - link.Overhead + 1 }, false},
		{"AckDelay 0", func(c *link.Config) { c.AckDelay = 0 }, true},
		{"AckDelay RTO", func(c *link.Config) { c.AckDelay = c.RTO }, false},
		{"AckDelay just under RTO", func(c *link.Config) { c.AckDelay = c.RTO - 1 }, true},
		{"MaxRTO RTO", func(c *link.Config) { c.MaxRTO = c.RTO }, true},
		{"MaxRTO RTO-1", func(c *link.Config) { c.MaxRTO = c.RTO - 1 }, false},
		{"dead two heartbeats", func(c *link.Config) {
			c.MaxRTO = c.RTO
			c.DeadInterval = max(2*c.HeartbeatInterval, c.MaxRTO+1)
			c.HeartbeatInterval = c.DeadInterval / 2
		}, true},
		{"dead just under two heartbeats", func(c *link.Config) {
			c.MaxRTO = c.RTO
			c.DeadInterval = max(2*c.HeartbeatInterval, c.MaxRTO+1) | 1
			c.HeartbeatInterval = c.DeadInterval/2 + 1
		}, false},
		{"dead just past MaxRTO", func(c *link.Config) { c.HeartbeatInterval = time.Microsecond; c.DeadInterval = c.MaxRTO + 1 }, true},
	} {
		c := base
		tc.edit(&c)
		err := c.Validate()
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, link.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
}

// TestHotPathAllocations: a message round trip allocates nothing.
func TestHotPathAllocations(t *testing.T) {
	p := newPump(t, mem.Config{}, testConfig(1), testConfig(2))
	p.waitUp()
	msg := make([]byte, 64)
	out := make([]byte, 1500)
	allocs := testing.AllocsPerRun(1000, func() {
		p.now += time.Microsecond
		if err := p.a.Send(p.now, msg); err != nil {
			t.Fatal(err)
		}
		n, _ := p.a.Output(p.now, out)
		if err := p.b.Input(p.now, out[:n]); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.b.Receive(); !ok {
			t.Fatal("no message")
		}
		n, _ = p.b.Output(p.now, out)
		if err := p.a.Input(p.now, out[:n]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per message round trip", allocs)
	}
}
