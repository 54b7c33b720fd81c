package xdp_test

import (
	"errors"
	"net"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/xdp"
)

// Benchmarks over one veth pair between two namespaces (privileged, behind
// the same gate as the tests). Raw numbers go in bench/ reports, not here.
//
//	go test -run '^$' -bench . -benchtime 200000x ./xdp/

// BenchmarkThroughput: datagrams of 64 bytes from node 0 to node 1 as fast
// as the receiver takes them (at most 1024 in flight), AF_XDP vs
// AF_PACKET. dgrams/s counts what arrived; %loss what did not.
func BenchmarkThroughput(b *testing.B) {
	for _, kind := range []string{"xdp", "afpacket"} {
		b.Run(kind, func(b *testing.B) {
			f := pair(b)
			opts := xdp.Options{ForceAFPacket: kind == "afpacket"}
			src, _ := openIn(b, f, 0, opts)
			dst, _ := openIn(b, f, 1, opts)
			payload := make([]byte, 64)
			var got atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 2048)
				for got.Load() < int64(b.N) {
					dst.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					if _, err := dst.ReadDatagram(buf); err != nil {
						return // the rest was lost
					}
					got.Add(1)
				}
			}()
			const window = 1024
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				for wait := time.Now(); int64(i)-got.Load() >= window && time.Since(wait) < 5*time.Millisecond; {
					runtime.Gosched()
				}
				if err := src.WriteDatagram(payload); err != nil && !errors.Is(err, xdp.ErrTxBusy) {
					b.Fatal(err)
				}
			}
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			n := got.Load()
			b.ReportMetric(float64(n)/elapsed.Seconds(), "dgrams/s")
			b.ReportMetric(100*(1-float64(n)/float64(b.N)), "%loss")
		})
	}
}

// BenchmarkRoundTrip: a 64-byte ping answered by an echo on node 1, one at
// a time; p50/p99 of the round trip. xdp waits in the runtime poller,
// xdp-poll spins on TryReadDatagram on both sides, udp is a plain IPv6 UDP
// ping-pong between the same namespaces with no XDP program attached.
func BenchmarkRoundTrip(b *testing.B) {
	for _, kind := range []string{"xdp", "xdp-poll", "afpacket", "udp"} {
		b.Run(kind, func(b *testing.B) {
			f := pair(b)
			var ping func([]byte) error
			var pong func([]byte) error
			var echo func(stop *atomic.Bool)
			switch kind {
			case "udp":
				// Connected sockets: an address with a zone would cost a
				// look-up of the interfaces on every send.
				addrA, addrB := linkLocal(b, f, 0), linkLocal(b, f, 1)
				ua, ub := udpConnIn(b, f, 0, addrA, addrB), udpConnIn(b, f, 1, addrB, addrA)
				ping = func(p []byte) error { _, err := ua.Write(p); return err }
				pong = func(p []byte) error { _, err := ua.Read(p); return err }
				echo = func(stop *atomic.Bool) {
					buf := make([]byte, 2048)
					for !stop.Load() {
						ub.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
						if n, err := ub.Read(buf); err == nil {
							ub.Write(buf[:n])
						}
					}
				}
			default:
				opts := xdp.Options{ForceAFPacket: kind == "afpacket"}
				a, _ := openIn(b, f, 0, opts)
				e, _ := openIn(b, f, 1, opts)
				poll := kind == "xdp-poll"
				ping = a.WriteDatagram
				pong = func(p []byte) error { return readPort(a, p, poll) }
				echo = func(stop *atomic.Bool) {
					buf := make([]byte, 2048)
					for !stop.Load() {
						n, ok := 0, false
						if poll {
							n, ok, _ = e.(noc.Poller).TryReadDatagram(buf)
						} else {
							e.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
							var err error
							n, err = e.ReadDatagram(buf)
							ok = err == nil
						}
						if ok {
							e.WriteDatagram(buf[:n])
						}
					}
				}
			}
			var stop atomic.Bool
			stopped := make(chan struct{})
			go func() { defer close(stopped); echo(&stop) }()
			defer func() { stop.Store(true); <-stopped }()

			payload := make([]byte, 64)
			buf := make([]byte, 2048)
			// Warm up: neighbour learning, NDP, caches.
			for range 100 {
				ping(payload)
				pong(buf)
			}
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if err := ping(payload); err != nil {
					b.Fatal(err)
				}
				if err := pong(buf); err != nil {
					b.Fatalf("round trip %d: %v", i, err)
				}
				lat[i] = time.Since(t0)
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

// readPort reads one datagram, spinning on TryReadDatagram when poll is
// set; either way it gives up after a second.
func readPort(p noc.Port, buf []byte, poll bool) error {
	if !poll {
		p.SetReadDeadline(time.Now().Add(time.Second))
		_, err := p.ReadDatagram(buf)
		return err
	}
	deadline := time.Now().Add(time.Second)
	for spin := 0; ; spin++ {
		if _, ok, err := p.(noc.Poller).TryReadDatagram(buf); ok || err != nil {
			return err
		}
		if spin%1024 == 0 && time.Now().After(deadline) {
			return os.ErrDeadlineExceeded
		}
	}
}

// udpConnIn opens a UDP socket from local to remote inside node i's
// namespace.
func udpConnIn(b *testing.B, f *veth.Fabric, i int, local, remote *net.UDPAddr) *net.UDPConn {
	b.Helper()
	var c *net.UDPConn
	if err := f.Do(i, func() (err error) { c, err = net.DialUDP("udp6", local, remote); return err }); err != nil {
		b.Fatalf("udp on node %d: %v", i, err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}
