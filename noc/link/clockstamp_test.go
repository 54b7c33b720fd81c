package link_test

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

// TestClockStampsMeasureThePeer drives two endpoints whose clocks differ by
// a known offset over a wire with different delays each way: every
// sample's interval [T3-T4, T2-T1] holds the true offset, requests go out
// about every heartbeat, and a link without ClockStamps sends no version 2
// datagram.
func TestClockStampsMeasureThePeer(t *testing.T) {
	const offset = 1234567 * time.Microsecond // b's clock minus a's
	const ab, ba = 30 * time.Microsecond, 5 * time.Microsecond
	for _, stamps := range []bool{true, false} {
		ca, cb := testConfig(1), testConfig(2)
		ca.ClockStamps, cb.ClockStamps = stamps, stamps
		a, err := link.NewEndpoint(ca, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := link.NewEndpoint(cb, offset)
		if err != nil {
			t.Fatal(err)
		}
		type flight struct {
			at   time.Duration // real time of arrival
			toB  bool
			data []byte
		}
		var wire []flight
		buf := make([]byte, 1500)
		v2 := 0
		send := func(now time.Duration) {
			for _, e := range []struct {
				ep    *link.Endpoint
				local time.Duration
				toB   bool
				delay time.Duration
			}{{a, now, true, ab}, {b, now + offset, false, ba}} {
				for {
					n, ok := e.ep.Output(e.local, buf)
					if !ok {
						break
					}
					if buf[0] == link.ClockVersion {
						v2++
					}
					wire = append(wire, flight{now + e.delay, e.toB, append([]byte(nil), buf[:n]...)})
				}
			}
		}
		samples := 0
		for now := time.Duration(0); now < 2*time.Second; now += 5 * time.Microsecond {
			rest := wire[:0]
			for _, f := range wire {
				if f.at > now {
					rest = append(rest, f)
					continue
				}
				if f.toB {
					err = b.Input(now+offset, f.data)
				} else {
					err = a.Input(now, f.data)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			wire = rest
			a.Tick(now)
			b.Tick(now + offset)
			send(now)
			for {
				s, ok := a.PollClock()
				if !ok {
					break
				}
				samples++
				lo, hi := s.T3-s.T4, s.T2-s.T1
				if offset < lo || offset > hi {
					t.Fatalf("sample %+v: offset %v outside [%v, %v]", s, offset, lo, hi)
				}
				if d := (s.T4 - s.T1) - (s.T3 - s.T2); d != ab+ba {
					t.Fatalf("sample %+v: round trip %v, want %v", s, d, ab+ba)
				}
			}
		}
		st := a.Stats()
		switch {
		case !stamps && (v2 != 0 || samples != 0):
			t.Errorf("without ClockStamps: %d version 2 datagrams, %d samples", v2, samples)
		case stamps && (samples < 30 || samples > 45 || st.ClockStale != 0):
			t.Errorf("with ClockStamps: %d samples in 2 s of 50 ms heartbeats, %d stale", samples, st.ClockStale)
		}
	}
}
