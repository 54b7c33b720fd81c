package secure_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
	"github.com/aitherion/dpu/noc/port/secure"
)

// benchLink moves 64-byte messages a->b through two link endpoints over a
// perfect mem pair, one goroutine pumping both (as noc/link's
// BenchmarkLinkMem64 does), with or without secure ports in between; the
// two run side by side so their ratio is taken in one run.
func benchLink(b *testing.B, sealed bool, size int) {
	ma, mb, err := mem.Pair(mem.Config{Queue: 4096})
	if err != nil {
		b.Fatal(err)
	}
	var pa, pb noc.Port = ma, mb
	if sealed {
		ka, _ := secure.GenerateKeyPair()
		kb, _ := secure.GenerateKeyPair()
		fab := secure.NewFabric()
		fab.Add("a", ka.Public)
		fab.Add("b", kb.Public)
		sa, err := secure.New(ma, secure.Config{Static: ka, Fabric: fab, HandshakeRetry: time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		sb, err := secure.New(mb, secure.Config{Static: kb, Fabric: fab, HandshakeRetry: time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		pa, pb = sa, sb
	}
	mtu := pa.MTU()
	cfg := func(s uint64) link.Config {
		c := link.DefaultConfig()
		c.MTU, c.Session, c.Window = mtu, s, 64
		return c
	}
	var now time.Duration
	ea, err := link.NewEndpoint(cfg(1), now)
	if err != nil {
		b.Fatal(err)
	}
	eb, err := link.NewEndpoint(cfg(2), now)
	if err != nil {
		b.Fatal(err)
	}
	obuf, ibuf := make([]byte, mtu), make([]byte, mtu+64)
	move := func(from *link.Endpoint, w noc.Port, r noc.Poller, to *link.Endpoint) {
		for {
			n, ok := from.Output(now, obuf)
			if !ok {
				break
			}
			_ = w.WriteDatagram(obuf[:n])
		}
		for {
			n, ok, _ := r.TryReadDatagram(ibuf)
			if !ok {
				break
			}
			_ = to.Input(now, ibuf[:n])
		}
	}
	got := 0
	round := func() {
		now += time.Microsecond
		move(ea, pa, pb.(noc.Poller), eb)
		for {
			if _, ok := eb.Receive(); !ok {
				break
			}
			got++
		}
		move(eb, pb, pa.(noc.Poller), ea)
	}
	for i := 0; !ea.Up() || !eb.Up(); i++ {
		if i > 100000 {
			b.Fatal("link never came up")
		}
		now += time.Millisecond
		round()
		time.Sleep(10 * time.Microsecond) // real time for the handshake pacing
	}
	msg := make([]byte, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	got = 0
	for got < b.N {
		for sent < b.N {
			err := ea.Send(now, msg)
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
}

// BenchmarkLink64 compares 64-byte messages over noc/link on mem ports,
// plain and sealed: the cost of link crypto.
func BenchmarkLink64(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchLink(b, false, 64) })
	b.Run("secure", func(b *testing.B) { benchLink(b, true, 64) })
}

// BenchmarkLinkPage is the same with a 4 KiB page per message.
func BenchmarkLinkPage(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchLink(b, false, 4096+noc.HeaderLen) })
	b.Run("secure", func(b *testing.B) { benchLink(b, true, 4096+noc.HeaderLen) })
}
