package secure_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
	"github.com/aitherion/dpu/noc/port/secure"
	"github.com/aitherion/dpu/noc/port/udp"
)

// benchPorts returns the two ends of a perfect in-memory pair ("mem") or
// of two UDP sockets on the loopback ("udp").
func benchPorts(b *testing.B, transport string) (noc.Port, noc.Port) {
	switch transport {
	case "mem":
		ma, mb, err := mem.Pair(mem.Config{Queue: 4096})
		if err != nil {
			b.Fatal(err)
		}
		return ma, mb
	case "udp":
		cb, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		ua, err := udp.Open("127.0.0.1:0", cb.LocalAddr().String(), 1500)
		if err != nil {
			cb.Close()
			b.Fatal(err)
		}
		ub, err := udp.New(cb, ua.LocalAddr(), 1500)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ua.Close(); ub.Close() })
		return ua, ub
	}
	b.Fatalf("transport %q", transport)
	return nil, nil
}

// benchLink moves messages of size bytes through two link endpoints over
// transport, one goroutine pumping both (as noc/link's BenchmarkLinkMem64
// does), with or without secure ports in between; plain and sealed run
// side by side so their ratio is taken in one run. A pump pass writes what
// the endpoint has to send as one batch (WriteDatagrams where the port
// has it, as the agent's loop does), so a sealed port bundles exactly what
// is queued at that moment. With echo, b sends every message back and a
// message counts when it is home again (one-hop echo throughput);
// otherwise it counts when b has it (forwarding throughput).
func benchLink(b *testing.B, transport, kind string, echo bool, size int) {
	sealed := kind != "plain"
	pa, pb := benchPorts(b, transport)
	if sealed {
		ka, _ := secure.GenerateKeyPair()
		kb, _ := secure.GenerateKeyPair()
		fab := secure.NewFabric()
		fab.Add("a", ka.Public)
		fab.Add("b", kb.Public)
		sa, err := secure.New(pa, secure.Config{Static: ka, Fabric: fab, HandshakeRetry: time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		sb, err := secure.New(pb, secure.Config{Static: kb, Fabric: fab, HandshakeRetry: time.Millisecond})
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
	var bufs [][]byte
	ibuf := make([]byte, mtu+64)
	move := func(from *link.Endpoint, w noc.Port, r noc.Poller, to *link.Endpoint) {
		k := 0
		for ; ; k++ {
			if k == len(bufs) {
				bufs = append(bufs, make([]byte, mtu))
			}
			n, ok := from.Output(now, bufs[k][:mtu])
			if !ok {
				break
			}
			bufs[k] = bufs[k][:n]
		}
		if bw, ok := w.(noc.BatchWriter); ok {
			_ = bw.WriteDatagrams(bufs[:k])
		} else {
			for _, d := range bufs[:k] {
				_ = w.WriteDatagram(d)
			}
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
	var back [][]byte
	round := func() {
		now += time.Microsecond
		move(ea, pa, pb.(noc.Poller), eb)
		for {
			m, ok := eb.Receive()
			if !ok {
				break
			}
			if echo {
				back = append(back, m)
			} else {
				got++
			}
		}
		for len(back) > 0 {
			if err := eb.Send(now, back[0]); err != nil {
				break // backpressure: the rest waits for the next round
			}
			back = back[1:]
		}
		move(eb, pb, pa.(noc.Poller), ea)
		if echo {
			for {
				if _, ok := ea.Receive(); !ok {
					break
				}
				got++
			}
		}
	}
	for i := 0; !ea.Up() || !eb.Up(); i++ {
		if i > 100000 {
			b.Fatal("link never came up")
		}
		now += time.Millisecond
		round()
		time.Sleep(10 * time.Microsecond) // real time for the handshake pacing
	}
	if kind == "nocrypto" {
		if !secure.NullCipher(pa.(*secure.Port)) || !secure.NullCipher(pb.(*secure.Port)) {
			b.Fatal("no session to switch")
		}
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

// BenchmarkLink64 compares 64-byte messages over noc/link, plain and
// sealed, on mem and UDP loopback ports, one way (forward) and there and
// back (echo): the cost of link crypto is the sealed/plain ratio of each
// pair. "nocrypto" is a secure port whose session cipher is a test double
// that only copies: everything a secure port does but the cryptography
// (its bundling above all), so secure/nocrypto is the cost of the AEAD
// alone.
func BenchmarkLink64(b *testing.B) {
	for _, tr := range []string{"mem", "udp"} {
		for _, mode := range []string{"forward", "echo"} {
			for _, kind := range []string{"plain", "nocrypto", "secure"} {
				b.Run(tr+"/"+mode+"/"+kind, func(b *testing.B) { benchLink(b, tr, kind, mode == "echo", 64) })
			}
		}
	}
}

// BenchmarkLinkPage is the same with a 4 KiB page per message, forward.
func BenchmarkLinkPage(b *testing.B) {
	for _, tr := range []string{"mem", "udp"} {
		for _, kind := range []string{"plain", "nocrypto", "secure"} {
			b.Run(tr+"/"+kind, func(b *testing.B) { benchLink(b, tr, kind, false, 4096+noc.HeaderLen) })
		}
	}
}
