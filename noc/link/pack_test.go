package link_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

func packConfig(session uint64) link.Config {
	c := testConfig(session)
	c.Pack = true
	return c
}

// TestPackedMessagesArriveWholeAndInOrder: small messages sent in bursts
// share datagrams, and every one arrives whole, in order and once.
func TestPackedMessagesArriveWholeAndInOrder(t *testing.T) {
	p := newPump(t, mem.Config{}, packConfig(1), packConfig(2))
	p.waitUp()
	s := newStream(t, "a->b", 5000, func(i int) int { return 8 + i*37%900 })
	p.recvB = s.check
	p.until(time.Minute, "stream", func() bool { s.fill(p.now, p.a); return s.done() })
	st := p.a.Stats()
	if st.Packed == 0 || st.TxDatagrams >= st.TxMessages {
		t.Fatalf("nothing packed: %d messages in %d datagrams, %d packed", st.TxMessages, st.TxDatagrams, st.Packed)
	}
	if p.b.Stats().Discarded != 0 {
		t.Errorf("the receiver discarded: %+v", p.b.Stats())
	}
	t.Logf("%d messages in %d datagrams (%d packed)", st.TxMessages, st.TxDatagrams, st.Packed)
}

// TestPackedStreamLossy: packed datagrams lost, duplicated and reordered
// are recovered like any other; large messages (fragments) and small ones
// mix in one stream.
func TestPackedStreamLossy(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			big := func(i int) int {
				if i%17 == 0 {
					return 3000 + i%5000 // several fragments
				}
				return 8 + i*13%200
			}
			p := lossyStreams(t, seed, packConfig(seed<<8|1), packConfig(seed<<8|2), big)
			sa, sb := p.a.Stats(), p.b.Stats()
			if sa.Packed == 0 || sb.Packed == 0 || sa.Retransmits == 0 {
				t.Errorf("not packed, or the wire was not lossy: a %+v b %+v", sa, sb)
			}
		})
	}
}

// TestNoPackingForAPeerWithoutTheFeature: a peer whose datagrams carry no
// feature word (one that predates packing) never gets a packed datagram,
// and the link carries everything as before.
func TestNoPackingForAPeerWithoutTheFeature(t *testing.T) {
	p := newPump(t, mem.Config{}, packConfig(1), testConfig(2))
	strip := func(d []byte) []byte {
		var h link.Header
		if _, err := h.Decode(d); err != nil {
			t.Fatal(err)
		}
		return d[:h.Len()]
	}
	// b's datagrams lose their feature word on the way to a
	p.tapB = func(d []byte) {
		if err := p.pb.WriteDatagram(strip(d)); err != nil {
			t.Fatal(err)
		}
	}
	p.cutB = true
	packed := 0
	p.tapA = func(d []byte) {
		var h link.Header
		if _, err := h.Decode(d); err != nil {
			t.Fatal(err)
		}
		if h.Flags&link.FlagPacked != 0 {
			packed++
		}
	}
	p.waitUp()
	s := newStream(t, "a->b", 2000, func(i int) int { return 8 + i%50 })
	p.recvB = s.check
	p.until(time.Minute, "stream", func() bool { s.fill(p.now, p.a); return s.done() })
	if st := p.a.Stats(); packed != 0 || st.Packed != 0 {
		t.Fatalf("%d packed datagrams to a peer that did not name the feature (%d messages packed)", packed, st.Packed)
	}
	// the other way, b (which does not pack) heard a's word: it could, but Pack is off
	if st := p.b.Stats(); st.Packed != 0 {
		t.Fatalf("b packed with Pack off: %+v", st)
	}
}

// TestMalformedPackedDatagramLosesOnlyItself: a packed datagram whose
// lengths do not cover its payload is dropped whole (counted), and the
// messages after it still arrive.
func TestMalformedPackedDatagramLosesOnlyItself(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"zero length", []byte{0, 0, 'x'}},
		{"past the end", []byte{0, 9, 'a', 'b'}},
		{"half a prefix", []byte{0, 1, 'a', 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := link.NewEndpoint(packConfig(1), 0)
			b, _ := link.NewEndpoint(packConfig(2), 0)
			buf := make([]byte, 1<<16)
			for range 4 { // greet both ways
				if n, ok := a.Output(0, buf); ok {
					_ = b.Input(0, buf[:n])
				}
				if n, ok := b.Output(0, buf); ok {
					_ = a.Input(0, buf[:n])
				}
			}
			if !a.Up() || !b.Up() {
				t.Fatal("link not up")
			}
			sess, ep := a.Session()
			psess, pep, _ := a.Peer()
			seq := firstSeq(t, a)
			forge := func(seq uint32, f link.Flags, payload []byte) []byte {
				h := link.Header{Flags: link.FlagData | link.FlagFirst | link.FlagLast | f, SrcSession: sess, SrcEpoch: ep,
					DstSession: psess, DstEpoch: pep, Seq: seq, Credits: 64}
				h.Length = uint16(len(payload))
				d := make([]byte, h.Len())
				if _, err := h.Encode(d, payload); err != nil {
					t.Fatal(err)
				}
				return d
			}
			if err := b.Input(0, forge(seq, link.FlagPacked, tc.payload)); err != nil {
				t.Fatal(err)
			}
			if err := b.Input(0, forge(seq+1, link.FlagPacked, []byte{0, 2, 'o', 'k', 0, 1, '!'})); err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				m, ok := b.Receive()
				if !ok {
					break
				}
				got = append(got, string(m))
			}
			if fmt.Sprint(got) != "[ok !]" || b.Stats().Discarded != 1 {
				t.Fatalf("got %q, discarded %d; want [ok !] and 1", got, b.Stats().Discarded)
			}
		})
	}
}

// firstSeq is the sequence number a's next data datagram will carry.
func firstSeq(t *testing.T, a *link.Endpoint) uint32 {
	t.Helper()
	buf := make([]byte, 1<<16)
	if err := a.Send(0, []byte("probe")); err != nil {
		t.Fatal(err)
	}
	n, ok := a.Output(0, buf)
	if !ok {
		t.Fatal("no datagram")
	}
	var h link.Header
	if _, err := h.Decode(buf[:n]); err != nil {
		t.Fatal(err)
	}
	return h.Seq // b never gets it: the forged datagrams take its place
}

// TestPackedFlagOutsideAWholeMessageIsMalformed: FlagPacked on a fragment
// of a longer message is refused by the decoder.
func TestPackedFlagOutsideAWholeMessageIsMalformed(t *testing.T) {
	h := link.Header{Flags: link.FlagData | link.FlagFirst | link.FlagPacked, SrcSession: 1}
	d := make([]byte, link.HeaderLen+link.TrailerLen+3)
	n, err := h.Encode(d, []byte{0, 1, 'x'})
	if err != nil {
		t.Fatal(err)
	}
	var g link.Header
	if _, err := g.Decode(d[:n]); err == nil {
		t.Fatal("a packed first fragment decoded")
	}
}

// TestAbandonedCountsPackedMessages: messages packed into one datagram
// that the link drops when its peer restarts are each counted abandoned.
func TestAbandonedCountsPackedMessages(t *testing.T) {
	a, _ := link.NewEndpoint(packConfig(1), 0)
	b, _ := link.NewEndpoint(packConfig(2), 0)
	buf := make([]byte, 1<<16)
	greet := func(a, b *link.Endpoint) {
		for range 4 {
			if n, ok := a.Output(0, buf); ok {
				_ = b.Input(0, buf[:n])
			}
			if n, ok := b.Output(0, buf); ok {
				_ = a.Input(0, buf[:n])
			}
		}
	}
	greet(a, b)
	if !a.Up() {
		t.Fatal("link not up")
	}
	for _, m := range []string{"one", "two", "three"} {
		if err := a.Send(0, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.Packed != 2 {
		t.Fatalf("%d messages packed, want 2", st.Packed)
	}
	restarted, _ := link.NewEndpoint(packConfig(3), 0)
	n, _ := restarted.Output(0, buf) // a greeting of a new session
	_ = a.Input(0, buf[:n])
	if st := a.Stats(); st.Abandoned != 3 {
		t.Fatalf("abandoned %d messages, want 3", st.Abandoned)
	}
}
