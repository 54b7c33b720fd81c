package link_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

// TestRTTSamples: the round-trip estimator (RFC 6298) takes a sample of
// zero (an ack in the same tick as its data, as under virtual time) as a
// first measurement, smooths the next one into it, and ignores a sample
// that comes out negative (an ack handled at a time before its data was
// sent: a caller's clock that stepped back).
func TestRTTSamples(t *testing.T) {
	ca, cb := testConfig(31), testConfig(32)
	a, err := link.NewEndpoint(ca, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := link.NewEndpoint(cb, 0)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, 0, a, b)
	if !a.Up() || !b.Up() {
		t.Fatal("link did not come up")
	}
	if s := a.Stats(); s.SRTT != 0 || s.RTTVar != 0 {
		t.Fatalf("estimator before any data: srtt %v rttvar %v", s.SRTT, s.RTTVar)
	}
	buf := make([]byte, ca.MTU)
	// roundTrip sends one message from a at send and hands b's ack to a at
	// ack.
	roundTrip := func(send, ack time.Duration) {
		t.Helper()
		if err := a.Send(send, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		n, ok := a.Output(send, buf)
		if !ok {
			t.Fatal("no datagram for the message")
		}
		if err := b.Input(send, buf[:n]); err != nil {
			t.Fatal(err)
		}
		if _, ok := b.Receive(); !ok {
			t.Fatal("message not delivered")
		}
		n, ok = b.Output(send, buf)
		if !ok {
			t.Fatal("no ack from b")
		}
		if err := a.Input(ack, buf[:n]); err != nil {
			t.Fatal(err)
		}
		if s := a.Stats(); s.InFlight != 0 {
			t.Fatalf("%d fragments in flight after the ack", s.InFlight)
		}
	}
	want := func(when string, srtt, rttvar time.Duration) {
		t.Helper()
		if s := a.Stats(); s.SRTT != srtt || s.RTTVar != rttvar {
			t.Fatalf("%s: srtt %v rttvar %v, want %v and %v", when, s.SRTT, s.RTTVar, srtt, rttvar)
		}
	}
	roundTrip(10*time.Millisecond, 10*time.Millisecond) // a sample of 0
	want("after a zero sample", 0, 0)
	// The second sample is smoothed into the first: srtt 0 + 8/8 ms,
	// rttvar (3·0 + |0-8|)/4 ms. Had the zero not counted, this would be
	// the first sample: srtt 8 ms, rttvar 4 ms.
	roundTrip(20*time.Millisecond, 28*time.Millisecond)
	want("after samples of 0 and 8 ms", time.Millisecond, 2*time.Millisecond)
	if s := a.Stats(); s.RTO != ca.RTO {
		t.Fatalf("RTO %v, want the floor %v (srtt + 4·rttvar is 9 ms)", s.RTO, ca.RTO)
	}
	// An ack handled 1 ms before its data was sent: no sample.
	roundTrip(40*time.Millisecond, 39*time.Millisecond)
	want("after an ack from before its data", time.Millisecond, 2*time.Millisecond)
}

// TestBackoffStopsAtItsBound: each retransmission timeout doubles the RTO
// up to 2^16 times the base, and no further, even while MaxRTO would
// allow more.
func TestBackoffStopsAtItsBound(t *testing.T) {
	ca, cb := testConfig(33), testConfig(34)
	for _, c := range []*link.Config{&ca, &cb} {
		c.RTO, c.MaxRTO, c.DeadInterval = time.Microsecond, time.Second, 3*time.Second
	}
	a, err := link.NewEndpoint(ca, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := link.NewEndpoint(cb, 0)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, 0, a, b)
	if !a.Up() {
		t.Fatal("link did not come up")
	}
	if err := a.Send(0, []byte("lost")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, ca.MTU)
	now := time.Duration(0)
	for a.Stats().Timeouts < 20 { // everything a sends is lost
		if now > 2*time.Second || !a.Up() {
			t.Fatalf("at %v (up %v): %d timeouts", now, a.Up(), a.Stats().Timeouts)
		}
		for {
			if _, ok := a.Output(now, buf); !ok {
				break
			}
		}
		now = max(a.NextDeadline(), now+1)
		a.Tick(now)
	}
	if s := a.Stats(); s.RTO != time.Microsecond<<16 {
		t.Fatalf("RTO %v after %d timeouts, want %v (the base doubled 16 times)", s.RTO, s.Timeouts, time.Microsecond<<16)
	}
}

// TestDuplicateDataIsCountedAndDropped: a data datagram that arrives a
// second time is counted in Duplicates, delivers nothing and is acked at
// once.
func TestDuplicateDataIsCountedAndDropped(t *testing.T) {
	ca, cb := testConfig(35), testConfig(36)
	cb.AckDelay = time.Millisecond // an in-order datagram's ack may wait; a duplicate's may not
	a, err := link.NewEndpoint(ca, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := link.NewEndpoint(cb, 0)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, 0, a, b)
	if !a.Up() || !b.Up() {
		t.Fatal("link did not come up")
	}
	if err := a.Send(0, []byte("once")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, ca.MTU)
	n, ok := a.Output(0, buf)
	if !ok {
		t.Fatal("no datagram for the message")
	}
	d := append([]byte(nil), buf[:n]...)
	for i := range 2 {
		if err := b.Input(0, d); err != nil {
			t.Fatal(err)
		}
		if m, ok := b.Receive(); ok != (i == 0) {
			t.Fatalf("copy %d: delivered %q (%v)", i+1, m, ok)
		}
	}
	if s := b.Stats(); s.Duplicates != 1 {
		t.Fatalf("Duplicates %d after one datagram twice, want 1", s.Duplicates)
	}
	if _, ok := b.Output(0, buf); !ok {
		t.Fatal("no immediate ack after a duplicate")
	}
}
