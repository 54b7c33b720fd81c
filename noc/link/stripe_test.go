package link_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

func stripeConfig(k int, session uint64) link.StripeConfig {
	c := link.DefaultStripeConfig(k, 1500)
	c.Session = session
	return c
}

// wire is a datagram on its way over one channel.
type wire struct {
	c int
	b []byte
}

// stripePair returns two stripes of k channels whose channels are all up.
func stripePair(t testing.TB, k int) (a, b *link.Stripe) {
	t.Helper()
	return stripePairShared(t, k, false)
}

// stripePairShared is stripePair with SharedMedium set as asked.
func stripePairShared(t testing.TB, k int, shared bool) (a, b *link.Stripe) {
	t.Helper()
	ca, cb := stripeConfig(k, 0xA), stripeConfig(k, 0xB)
	ca.SharedMedium, cb.SharedMedium = shared, shared
	a, err := link.NewStripe(ca, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = link.NewStripe(cb, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		exchangeControl(t, a, b, 0)
		exchangeControl(t, b, a, 0)
	}
	for c := range k {
		if !a.ChannelStats(c).Up || !b.ChannelStats(c).Up {
			t.Fatalf("channel %d not up after the bootstrap", c)
		}
	}
	if a.Agreed() != k || b.Agreed() != k {
		t.Fatalf("agreed %d/%d channels, want %d", a.Agreed(), b.Agreed(), k)
	}
	return a, b
}

// exchangeControl hands every control datagram from owes to to.
func exchangeControl(t testing.TB, from, to *link.Stripe, now time.Duration) {
	t.Helper()
	buf := make([]byte, 1500)
	for c := range from.Config().Channels {
		for {
			n, ok := from.Output(now, c, buf)
			if !ok {
				break
			}
			if err := to.Input(now, c, buf[:n]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sendN sends n datagrams numbered first.. and returns them as they went out.
func sendN(t testing.TB, s *link.Stripe, now time.Duration, first, n int) []wire {
	t.Helper()
	var out []wire
	for i := range n {
		d := make([]byte, 8)
		binary.BigEndian.PutUint64(d, uint64(first+i))
		buf := make([]byte, 1500)
		c, m, err := s.Send(now, d, buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wire{c, buf[:m]})
	}
	return out
}

// receiveAll returns the numbers of every datagram s delivers now.
func receiveAll(s *link.Stripe) []uint64 {
	var got []uint64
	for {
		d, ok := s.Receive()
		if !ok {
			return got
		}
		got = append(got, binary.BigEndian.Uint64(d))
	}
}

// byChannel splits ws by channel, keeping each channel's order.
func byChannel(ws []wire, k int) [][]wire {
	out := make([][]wire, k)
	for _, w := range ws {
		out[w.c] = append(out[w.c], w)
	}
	return out
}

func TestStripeRestoresOrder(t *testing.T) {
	const k = 3
	a, b := stripePair(t, k)
	ws := sendN(t, a, 0, 0, 60)
	per := byChannel(ws, k)
	for c := range k {
		if len(per[c]) < 15 {
			t.Fatalf("channel %d carried %d of 60 datagrams: not striped", c, len(per[c]))
		}
	}
	// The last channel's datagrams arrive first, then the others'.
	var got []uint64
	for c := k - 1; c >= 0; c-- {
		for _, w := range per[c] {
			if err := b.Input(0, c, w.b); err != nil {
				t.Fatal(err)
			}
			got = append(got, receiveAll(b)...)
		}
	}
	if len(got) != 60 {
		t.Fatalf("delivered %d of 60", len(got))
	}
	for i, v := range got {
		if v != uint64(i) {
			t.Fatalf("delivery %d is datagram %d: order not restored", i, v)
		}
	}
	if b.Stats().Held == 0 {
		t.Error("nothing was held, yet channels arrived out of order")
	}
	// The acks free every channel's window.
	exchangeControl(t, b, a, 0)
	for c := range k {
		if in := a.ChannelStats(c).InFlight; in != 0 {
			t.Errorf("channel %d: %d in flight after the acks", c, in)
		}
	}
}

func TestStripeSkipsLostWhenEveryChannelPassed(t *testing.T) {
	const k = 2
	a, b := stripePair(t, k)
	ws := sendN(t, a, 0, 0, 10)
	var got []uint64
	for i, w := range ws {
		if i == 4 {
			continue // lost
		}
		if err := b.Input(0, w.c, w.b); err != nil {
			t.Fatal(err)
		}
		got = append(got, receiveAll(b)...)
	}
	want := []uint64{0, 1, 2, 3, 5, 6, 7, 8, 9}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if s := b.Stats(); s.Skipped != 1 {
		t.Errorf("skipped %d places, want 1", s.Skipped)
	}
	var lost uint64
	for c := range k {
		lost += b.ChannelStats(c).Lost
	}
	if lost != 1 {
		t.Errorf("channels counted %d lost, want 1", lost)
	}
}

func TestStripeReorderHoldBoundsAGap(t *testing.T) {
	a, b := stripePair(t, 2)
	ws := sendN(t, a, 0, 0, 4)
	// Place 2 is lost and its channel sends nothing after it; place 3
	// (the other channel) waits for it only ReorderHold.
	lostC := ws[2].c
	for _, w := range ws[:2] {
		b.Input(0, w.c, w.b)
	}
	if got := receiveAll(b); len(got) != 2 {
		t.Fatalf("got %v before the gap", got)
	}
	if ws[3].c == lostC {
		t.Fatal("places 2 and 3 on one channel: the test needs them apart")
	}
	b.Input(time.Millisecond, ws[3].c, ws[3].b)
	if got := receiveAll(b); len(got) != 0 {
		t.Fatalf("delivered %v across an open gap", got)
	}
	hold := b.Config().ReorderHold
	if d := b.NextDeadline(); d > time.Millisecond+hold {
		t.Fatalf("next deadline %v, want by %v", d, time.Millisecond+hold)
	}
	b.Tick(time.Millisecond + hold)
	if got := receiveAll(b); len(got) != 1 || got[0] != 3 {
		t.Fatalf("after the hold got %v, want [3]", got)
	}
	// The lost datagram arriving late is still delivered (the link above
	// drops duplicates).
	b.Input(2*time.Millisecond+hold, ws[2].c, ws[2].b)
	if got := receiveAll(b); len(got) != 1 || got[0] != 2 {
		t.Fatalf("late datagram: got %v", got)
	}
	if s := b.Stats(); s.Late != 1 || s.Skipped != 1 {
		t.Errorf("late %d skipped %d, want 1 and 1", s.Late, s.Skipped)
	}
}

func TestStripeDropsASilentChannel(t *testing.T) {
	const k = 3
	a, b := stripePair(t, k)
	dead := a.Config().DeadInterval
	// Channel 1 stops carrying anything; the others keep talking.
	now := time.Duration(0)
	buf := make([]byte, 1500)
	for now < dead+50*time.Millisecond {
		now += 10 * time.Millisecond
		for _, pair := range [][2]*link.Stripe{{a, b}, {b, a}} {
			pair[0].Tick(now)
			for c := range k {
				for {
					n, ok := pair[0].Output(now, c, buf)
					if !ok {
						break
					}
					if c != 1 {
						pair[1].Input(now, c, buf[:n])
					}
				}
			}
		}
	}
	if a.ChannelStats(1).Up {
		t.Fatal("channel 1 still up after its dead interval")
	}
	if !a.ChannelStats(0).Up || !a.ChannelStats(2).Up || !a.Up() {
		t.Fatal("live channels dropped")
	}
	var ev []link.ChannelEvent
	for {
		e, ok := a.PollEvent()
		if !ok {
			break
		}
		ev = append(ev, e)
	}
	if len(ev) == 0 || ev[len(ev)-1].Up || ev[len(ev)-1].Channel != 1 {
		t.Fatalf("events %v: want channel 1 down last", ev)
	}
	for _, w := range sendN(t, a, now, 0, 30) {
		if w.c == 1 {
			t.Fatal("a datagram went out on the dropped channel")
		}
	}
	// Heard again, the channel rejoins.
	now += a.Config().HeartbeatInterval
	for range 2 {
		exchangeControl(t, b, a, now)
		exchangeControl(t, a, b, now)
	}
	if !a.ChannelStats(1).Up {
		t.Fatal("channel 1 did not rejoin")
	}
}

func TestStripeRefusesGarbage(t *testing.T) {
	a, b := stripePair(t, 2)
	ws := sendN(t, a, 0, 0, 2)
	before := b.Stats()
	// A datagram on the wrong channel, a flipped bit, a plain link
	// datagram, a short one.
	wrong := 1 - ws[0].c
	flipped := append([]byte(nil), ws[0].b...)
	flipped[len(flipped)-5] ^= 1
	plain := make([]byte, 64)
	hdr := link.Header{SrcSession: 9}
	n, _ := hdr.Encode(plain, nil)
	cases := []struct {
		c    int
		d    []byte
		want error
	}{
		{wrong, ws[0].b, link.ErrMalformed},
		{ws[0].c, flipped, link.ErrChecksum},
		{0, plain[:n], link.ErrVersion},
		{0, ws[0].b[:10], link.ErrMalformed},
	}
	for i, tc := range cases {
		if err := b.Input(0, tc.c, tc.d); !errors.Is(err, tc.want) {
			t.Errorf("case %d: err %v, want %v", i, err, tc.want)
		}
	}
	if got := receiveAll(b); len(got) != 0 {
		t.Fatalf("garbage delivered %v", got)
	}
	if s := b.Stats(); s.Malformed != before.Malformed+uint64(len(cases)) {
		t.Errorf("malformed %d, want %d", s.Malformed, before.Malformed+uint64(len(cases)))
	}
	// The good datagrams still go through afterwards.
	for _, w := range ws {
		if err := b.Input(0, w.c, w.b); err != nil {
			t.Fatal(err)
		}
	}
	if got := receiveAll(b); len(got) != 2 {
		t.Fatalf("after garbage got %v", got)
	}
}

func TestStripePeerRestart(t *testing.T) {
	a, b := stripePair(t, 2)
	old := sendN(t, a, 0, 0, 3)
	// a restarts with a new session.
	a2, err := link.NewStripe(stripeConfig(2, 0xA2), 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		exchangeControl(t, a2, b, 0)
		exchangeControl(t, b, a2, 0)
	}
	if b.Stats().PeerRestarts != 1 {
		t.Fatalf("peer restarts %d, want 1", b.Stats().PeerRestarts)
	}
	// The old incarnation's datagrams are stale now.
	for _, w := range old {
		b.Input(0, w.c, w.b)
	}
	if got := receiveAll(b); len(got) != 0 {
		t.Fatalf("old session delivered %v", got)
	}
	if b.Stats().Stale != 3 {
		t.Errorf("stale %d, want 3", b.Stats().Stale)
	}
	for _, w := range sendN(t, a2, 0, 100, 4) {
		b.Input(0, w.c, w.b)
	}
	if got := receiveAll(b); len(got) != 4 || got[0] != 100 {
		t.Fatalf("new session delivered %v", got)
	}
}

func TestStripeWindowAndPolicy(t *testing.T) {
	for _, pol := range []link.StripePolicy{link.LeastQueued, link.RoundRobin} {
		t.Run(pol.String(), func(t *testing.T) {
			ca, cb := stripeConfig(2, 0xA), stripeConfig(2, 0xB)
			ca.Window, ca.Policy = 4, pol
			a, _ := link.NewStripe(ca, 0)
			b, _ := link.NewStripe(cb, 0)
			for range 3 {
				exchangeControl(t, a, b, 0)
				exchangeControl(t, b, a, 0)
			}
			buf := make([]byte, 1500)
			var per [2]int
			for range 8 {
				c, _, err := a.Send(0, []byte("x"), buf)
				if err != nil {
					t.Fatal(err)
				}
				per[c]++
			}
			if per[0] != 4 || per[1] != 4 {
				t.Fatalf("channels carried %v, want 4 and 4", per)
			}
			if _, _, err := a.Send(0, []byte("x"), buf); !errors.Is(err, link.ErrChannelsFull) {
				t.Fatalf("9th datagram: err %v, want ErrChannelsFull", err)
			}
		})
	}
}

// With SharedMedium, a datagram read from another channel's port (a NIC
// that puts every frame on one queue) is accounted to the channel its
// header names: every channel comes up and the order is restored. Without
// it the same datagram is refused.
func TestStripeSharedMedium(t *testing.T) {
	const k = 4
	mk := func(session uint64, shared bool) *link.Stripe {
		c := stripeConfig(k, session)
		c.SharedMedium = shared
		s, err := link.NewStripe(c, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk(0xA, true), mk(0xB, true)
	buf := make([]byte, 1500)
	// every datagram, control or data, arrives on the receiver's channel 0
	allOnZero := func(from, to *link.Stripe) {
		for c := range k {
			for {
				n, ok := from.Output(0, c, buf)
				if !ok {
					break
				}
				if err := to.Input(0, 0, buf[:n]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for range 3 {
		allOnZero(a, b)
		allOnZero(b, a)
	}
	for c := range k {
		if !a.ChannelStats(c).Up || !b.ChannelStats(c).Up {
			t.Fatalf("channel %d not up when every datagram arrives on channel 0", c)
		}
	}
	ws := sendN(t, a, 0, 0, 40)
	used := map[int]bool{}
	for i := len(ws) - 1; i >= 0; i-- { // backwards: the stripe restores the order
		used[ws[i].c] = true
		if err := b.Input(0, 0, ws[i].b); err != nil {
			t.Fatal(err)
		}
	}
	got := receiveAll(b)
	if len(used) != k || len(got) != len(ws) {
		t.Fatalf("sent on %d channels; delivered %d of %d", len(used), len(got), len(ws))
	}
	for i, v := range got {
		if v != uint64(i) {
			t.Fatalf("delivered %v, want 0..%d in order", got, len(ws)-1)
		}
	}
	for c := range k {
		if b.ChannelStats(c).RxDatagrams == 0 {
			t.Errorf("channel %d accounted no datagram", c)
		}
	}
	// The strict stripe refuses the same thing.
	x, y := stripePair(t, 2)
	w := sendN(t, x, 0, 100, 2)
	for _, d := range w {
		if d.c != 0 {
			if err := y.Input(0, 0, d.b); !errors.Is(err, link.ErrMalformed) {
				t.Fatalf("strict stripe: %v, want ErrMalformed", err)
			}
		}
	}
}

// TestStripeJumpFarAheadCountsEachPlaceOnce: a datagram two order buffers
// or more past the next place expected starts the order over below it;
// every place passed over is counted skipped once, whether given up by the
// jump, because its channel has passed it, or at the end of ReorderHold.
func TestStripeJumpFarAheadCountsEachPlaceOnce(t *testing.T) {
	const reorder = 4
	ca, cb := stripeConfig(2, 0xA), stripeConfig(2, 0xB)
	ca.Reorder, cb.Reorder = reorder, reorder
	a, err := link.NewStripe(ca, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := link.NewStripe(cb, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		exchangeControl(t, a, b, 0)
		exchangeControl(t, b, a, 0)
	}
	if !b.ChannelStats(0).Up || !b.ChannelStats(1).Up {
		t.Fatal("channels not up")
	}
	ws := sendN(t, a, 0, 0, 16)
	for _, w := range ws[:2] {
		if err := b.Input(0, w.c, w.b); err != nil {
			t.Fatal(err)
		}
	}
	if got := receiveAll(b); len(got) != 2 {
		t.Fatalf("got %v, want [0 1]", got)
	}
	// Places 2..14 lost: 15 is 13 past the next expected, more than twice
	// the order buffer.
	if err := b.Input(0, ws[15].c, ws[15].b); err != nil {
		t.Fatal(err)
	}
	// The places of the other channel are given up after ReorderHold.
	b.Tick(b.Config().ReorderHold)
	if got := receiveAll(b); len(got) != 1 || got[0] != 15 {
		t.Fatalf("got %v, want [15]", got)
	}
	if s := b.Stats(); s.Skipped != 13 || s.Overflow != 0 {
		t.Fatalf("skipped %d, overflow %d; want 13 places (2..14) skipped, no overflow", s.Skipped, s.Overflow)
	}
}

// TestStripeDataForAnEarlierSessionOfThisEnd: after this end restarts, the
// peer's data still addressed to its earlier session delivers nothing; each
// is counted Unsynced.
func TestStripeDataForAnEarlierSessionOfThisEnd(t *testing.T) {
	a, _ := stripePair(t, 2)
	ws := sendN(t, a, 0, 0, 3) // addressed to b's session 0xB
	b2, err := link.NewStripe(stripeConfig(2, 0xB2), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if err := b2.Input(0, w.c, w.b); err != nil {
			t.Fatal(err)
		}
	}
	if got := receiveAll(b2); len(got) != 0 {
		t.Fatalf("the restarted end delivered %v sent to its earlier session", got)
	}
	if s := b2.Stats(); s.Unsynced != 3 {
		t.Fatalf("Unsynced %d after 3 data datagrams for an earlier session, want 3", s.Unsynced)
	}
}
