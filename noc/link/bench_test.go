package link_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

// benchPump moves size-byte messages a->b over a perfect mem pair with one
// goroutine pumping both endpoints, b.N messages in all. The virtual clock
// advances 1µs per round so that round-trip estimates stay sane.
func benchPump(b *testing.B, size, mtu int) {
	mc := mem.Config{MTU: mtu, Queue: 4096}
	ca, cb := testConfig(1), testConfig(2)
	for _, c := range []*link.Config{&ca, &cb} {
		c.MTU, c.Window = mtu, 64
	}
	p := newPump(b, mc, ca, cb)
	p.waitUp()
	msg := make([]byte, size)
	obuf := make([]byte, mtu)
	ibuf := make([]byte, mtu)
	got := 0
	round := func() {
		p.now += time.Microsecond
		for {
			n, ok := p.a.Output(p.now, obuf)
			if !ok {
				break
			}
			_ = p.pa.WriteDatagram(obuf[:n])
		}
		for {
			n, ok, _ := p.pb.TryReadDatagram(ibuf)
			if !ok {
				break
			}
			if err := p.b.Input(p.now, ibuf[:n]); err != nil {
				b.Fatal(err)
			}
		}
		for {
			m, ok := p.b.Receive()
			if !ok {
				break
			}
			if len(m) != size {
				b.Fatalf("got %d bytes", len(m))
			}
			got++
		}
		for {
			n, ok := p.b.Output(p.now, obuf)
			if !ok {
				break
			}
			_ = p.pb.WriteDatagram(obuf[:n])
		}
		for {
			n, ok, _ := p.pa.TryReadDatagram(ibuf)
			if !ok {
				break
			}
			if err := p.a.Input(p.now, ibuf[:n]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for got < b.N {
		for sent < b.N {
			err := p.a.Send(p.now, msg)
			if errors.Is(err, link.ErrBackpressure) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			sent++
		}
		round()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if s := p.a.Stats(); s.Retransmits != 0 {
		b.Errorf("retransmissions on a perfect link: %d", s.Retransmits)
	}
}

// BenchmarkLinkMem64: 64-byte messages, 64-fragment window, 1500-byte MTU.
func BenchmarkLinkMem64(b *testing.B) { benchPump(b, 64, 1500) }

// BenchmarkLinkMemPage: a 4 KiB page and its frame header per message,
// three fragments over a 1500-byte MTU.
func BenchmarkLinkMemPage(b *testing.B) { benchPump(b, 4096+noc.HeaderLen, 1500) }

// BenchmarkLinkMemPageJumbo: the same page in one fragment over a jumbo MTU.
func BenchmarkLinkMemPageJumbo(b *testing.B) { benchPump(b, 4096+noc.HeaderLen, 9000) }

// BenchmarkConnMem64: 64-byte messages through two Conns (goroutines, real
// clock, locks) over a perfect mem pair.
func BenchmarkConnMem64(b *testing.B) {
	pa, pb, err := mem.Pair(mem.Config{Queue: 4096})
	if err != nil {
		b.Fatal(err)
	}
	ca, err := link.NewConn(pa, connConfig(1))
	if err != nil {
		b.Fatal(err)
	}
	defer ca.Close()
	cb, err := link.NewConn(pb, connConfig(2))
	if err != nil {
		b.Fatal(err)
	}
	defer cb.Close()
	ctx := context.Background()
	if err := ca.WaitUp(ctx); err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 64)
	done := make(chan error, 1)
	b.SetBytes(64)
	b.ResetTimer()
	go func() {
		buf := make([]byte, 1500)
		for range b.N {
			if _, err := cb.Receive(ctx, buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := ca.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
