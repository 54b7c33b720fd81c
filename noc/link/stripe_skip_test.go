package link_test

import (
	"testing"

	"github.com/aitherion/dpu/noc/link"
)

// TestStripeFullOrderBufferCountsThePlacesItGivesUp: with one channel's
// datagrams lost and the other's arriving, the order buffer fills and gives
// up its missing oldest places; each is counted skipped, never more than
// the places lost.
func TestStripeFullOrderBufferCountsThePlacesItGivesUp(t *testing.T) {
	ca, cb := stripeConfig(2, 0xA), stripeConfig(2, 0xB)
	cb.Reorder = 16
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
	n := 4 * cb.Reorder
	ws := sendN(t, a, 0, 0, n)
	fed := ws[0].c
	lost := 0
	for _, w := range ws {
		if w.c != fed {
			lost++
			continue
		}
		if err := b.Input(0, w.c, w.b); err != nil {
			t.Fatal(err)
		}
		receiveAll(b)
	}
	s := b.Stats()
	if s.Skipped == 0 || s.Skipped > uint64(lost) {
		t.Fatalf("skipped %d places (%d lost), overflow %d", s.Skipped, lost, s.Overflow)
	}
}
