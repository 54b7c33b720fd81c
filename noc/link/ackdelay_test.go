package link_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

// exchange moves every datagram from one endpoint to the other until
// neither has one, and returns how many went each way.
func exchange(t *testing.T, now time.Duration, a, b *link.Endpoint) (ab, ba int) {
	t.Helper()
	buf := make([]byte, a.Config().MTU)
	for range 100 {
		moved := false
		if n, ok := a.Output(now, buf); ok {
			if err := b.Input(now, buf[:n]); err != nil {
				t.Fatal(err)
			}
			ab++
			moved = true
		}
		if n, ok := b.Output(now, buf); ok {
			if err := a.Input(now, buf[:n]); err != nil {
				t.Fatal(err)
			}
			ba++
			moved = true
		}
		if !moved {
			return ab, ba
		}
	}
	t.Fatal("endpoints never went quiet")
	return
}

// TestAckDelay: with an AckDelay, the ack of a request rides on its answer
// (one datagram each way), the ack owed for the answer waits for the
// delay (or the next request), and a second unacknowledged datagram is
// acked at once.
func TestAckDelay(t *testing.T) {
	ca, cb := testConfig(21), testConfig(22)
	ca.AckDelay, cb.AckDelay = time.Millisecond, time.Millisecond
	now := time.Duration(0)
	a, err := link.NewEndpoint(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := link.NewEndpoint(cb, now)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, now, a, b)
	if !a.Up() || !b.Up() {
		t.Fatal("link did not come up")
	}
	now += time.Microsecond
	// request a->b; b answers in the same step
	if err := a.Send(now, []byte("request")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, ca.MTU)
	n, ok := a.Output(now, buf)
	if !ok {
		t.Fatal("no datagram for the request")
	}
	if err := b.Input(now, buf[:n]); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Receive(); !ok {
		t.Fatal("request not delivered")
	}
	if _, ok := b.Output(now, buf); ok {
		t.Fatal("b acked the request at once although its answer could carry the ack")
	}
	if d := b.NextDeadline(); d != now+time.Millisecond {
		t.Fatalf("b's next deadline %v, want the ack delay's end %v", d, now+time.Millisecond)
	}
	if err := b.Send(now, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	ab, ba := exchange(t, now, a, b)
	if ab != 0 || ba != 1 {
		t.Fatalf("answer with its ack: %d datagrams a->b, %d b->a; want 0 and 1", ab, ba)
	}
	if _, ok := a.Receive(); !ok {
		t.Fatal("answer not delivered")
	}
	// a owes an ack for the answer: nothing goes before the delay ...
	if ab, _ := exchange(t, now+999*time.Microsecond, a, b); ab != 0 {
		t.Fatalf("a sent %d datagrams within the ack delay", ab)
	}
	// ... one ack when it has passed
	if ab, _ := exchange(t, now+time.Millisecond, a, b); ab != 1 {
		t.Fatalf("a sent %d datagrams at the end of the ack delay, want 1", ab)
	}
	// two data datagrams unacknowledged: acked at once
	now += 2 * time.Millisecond
	for _, m := range []string{"one", "two"} {
		if err := a.Send(now, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if ab, ba := exchange(t, now, a, b); ab != 2 || ba != 1 {
		t.Fatalf("two messages: %d datagrams a->b, %d b->a; want 2 and an immediate ack", ab, ba)
	}
}
