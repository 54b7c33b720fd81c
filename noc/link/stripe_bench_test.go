package link_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/udp"
)

// udpChannels returns k connected pairs of UDP loopback ports.
func udpChannels(tb testing.TB, k, mtu int) (a, b []noc.Port) {
	tb.Helper()
	for range k {
		ca, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			tb.Fatal(err)
		}
		cb, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			tb.Fatal(err)
		}
		pa, err := udp.New(ca, cb.LocalAddr().(*net.UDPAddr).AddrPort(), mtu)
		if err != nil {
			tb.Fatal(err)
		}
		pb, err := udp.New(cb, ca.LocalAddr().(*net.UDPAddr).AddrPort(), mtu)
		if err != nil {
			tb.Fatal(err)
		}
		a, b = append(a, pa), append(b, pb)
	}
	return a, b
}

// BenchmarkStripedUDPPage moves 4 KiB pages (with their frame header)
// through two Conns over k UDP loopback channels of 1500 bytes; k = 1 is
// the plain UDP port, the baseline.
func BenchmarkStripedUDPPage(b *testing.B) {
	for _, k := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("channels=%d", k), func(b *testing.B) {
			ca, cb := udpChannels(b, k, 1500)
			pa, pb := ca[0], cb[0]
			if k > 1 {
				var err error
				if pa, err = link.NewStripedPort("a", ca, link.DefaultStripeConfig(k, 1500)); err != nil {
					b.Fatal(err)
				}
				if pb, err = link.NewStripedPort("b", cb, link.DefaultStripeConfig(k, 1500)); err != nil {
					b.Fatal(err)
				}
			}
			benchConn(b, pa, pb, 4096+noc.HeaderLen)
		})
	}
}

// benchConn sends b.N messages of size bytes from a Conn over pa to one
// over pb.
func benchConn(b *testing.B, pa, pb noc.Port, size int) {
	cfa, cfb := link.DefaultConfig(), link.DefaultConfig()
	cfa.Session, cfb.Session = 1, 2
	cfa.MTU, cfb.MTU = pa.MTU(), pb.MTU()
	cfa.MaxMessage, cfb.MaxMessage = size, size
	ca, err := link.NewConn(pa, cfa)
	if err != nil {
		b.Fatal(err)
	}
	defer ca.Close()
	cb, err := link.NewConn(pb, cfb)
	if err != nil {
		b.Fatal(err)
	}
	defer cb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ca.WaitUp(ctx); err != nil {
		b.Fatal(err)
	}
	if err := cb.WaitUp(ctx); err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, size)
	done := make(chan error, 1)
	b.SetBytes(int64(size))
	b.ResetTimer()
	go func() {
		buf := make([]byte, size)
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
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	st := ca.Stats()
	b.ReportMetric(float64(st.Retransmits), "retransmits")
	b.ReportMetric(float64(st.Timeouts), "rto-expiries")
	for _, p := range []noc.Port{pa, pb} {
		if sp, ok := p.(*link.StripedPort); ok {
			s, _ := sp.Stats()
			b.ReportMetric(float64(s.Full), "full-"+sp.Name())
			b.ReportMetric(float64(s.Skipped), "skipped-"+sp.Name())
			b.ReportMetric(float64(s.Overflow), "overflow-"+sp.Name())
			b.ReportMetric(float64(s.Held)/float64(b.N), "held/op-"+sp.Name())
		}
	}
}
