package link_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/secure"
	"github.com/aitherion/dpu/noc/port/udp"
)

// throughputMTU is the channel MTU of the throughput benchmark: a 4 KiB
// frame and every header in one datagram, as on loopback or a jumbo link.
const throughputMTU = 9000

// frameSize is the message of the throughput benchmark: a 4 KiB frame.
const frameSize = 4096

// BenchmarkLinkThroughput: 4 KiB frames through a reliable link (two
// Conns) over 1 and 4 UDP loopback channels, plaintext and sealed
// (noc/port/secure over the striped port), beside the baseline measured
// first in the same run: the same 4 KiB datagrams between a plain pair of
// UDP sockets, written and read in batches (sendmmsg, recvmmsg) as fast
// as they go, counting what arrives. Each case reports frames/s, MB/s
// and x-udp, its MB/s over the baseline's.
//
//	go test -run '^$' -bench LinkThroughput -benchtime 20000x ./noc/link/
func BenchmarkLinkThroughput(b *testing.B) {
	base := udpPairRate(b, 40000)
	b.Logf("udp pair baseline: %.0f MB/s (%.0f datagrams/s of %d bytes)", base/1e6, base/frameSize, frameSize)
	b.Run("udp-pair", func(b *testing.B) {
		b.ReportMetric(base/1e6, "MB/s")
		b.ReportMetric(base/frameSize, "frames/s")
		b.ReportMetric(1, "x-udp")
	})
	for _, sealed := range []bool{false, true} {
		for _, k := range []int{1, 4} {
			name := fmt.Sprintf("link/channels=%d/plain", k)
			if sealed {
				name = fmt.Sprintf("link/channels=%d/sealed", k)
			}
			b.Run(name, func(b *testing.B) {
				ca, cb := udpChannels(b, k, throughputMTU)
				pa, pb := ca[0], cb[0]
				if k > 1 {
					var err error
					if pa, err = link.NewStripedPort("a", ca, link.DefaultStripeConfig(k, throughputMTU)); err != nil {
						b.Fatal(err)
					}
					if pb, err = link.NewStripedPort("b", cb, link.DefaultStripeConfig(k, throughputMTU)); err != nil {
						b.Fatal(err)
					}
				}
				if sealed {
					pa, pb = sealPair(b, pa, pb)
				}
				benchConn(b, pa, pb, frameSize)
				rate := float64(b.N) * frameSize / b.Elapsed().Seconds()
				b.ReportMetric(rate/base, "x-udp")
			})
		}
	}
}

// sealPair wraps two ports in secure ports of a two-node fabric.
func sealPair(b *testing.B, pa, pb noc.Port) (noc.Port, noc.Port) {
	ka, err := secure.GenerateKeyPair()
	if err != nil {
		b.Fatal(err)
	}
	kb, err := secure.GenerateKeyPair()
	if err != nil {
		b.Fatal(err)
	}
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
	return sa, sb
}

// udpPairRate sends n datagrams of frameSize bytes from one UDP loopback
// socket to another in batches of 64 and returns the bytes per second that
// arrived (the receiver stops at n or 100 ms after the sender is done).
func udpPairRate(b *testing.B, n int) float64 {
	ca, cb := udpChannels(b, 1, throughputMTU)
	pa, pb := ca[0].(*udp.Port), cb[0].(*udp.Port)
	defer pa.Close()
	defer pb.Close()
	const batch = 64
	out := make([][]byte, batch)
	for i := range out {
		out[i] = make([]byte, frameSize)
	}
	in, lens := make([][]byte, batch), make([]int, batch)
	for i := range in {
		in[i] = make([]byte, throughputMTU)
	}
	got := make(chan int, 1)
	start := time.Now()
	var end time.Time
	go func() {
		total := 0
		for total < n {
			_ = pb.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := pb.ReadDatagram(in[0]); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					b.Error(err)
				}
				break
			}
			total++
			m, _ := pb.TryReadDatagrams(in, lens)
			total += m
			end = time.Now()
		}
		got <- total
	}()
	for sent := 0; sent < n; sent += batch {
		if err := pa.WriteDatagrams(out); err != nil {
			b.Fatal(err)
		}
	}
	total := <-got
	if total == 0 {
		b.Fatal("no datagram arrived")
	}
	return float64(total) * frameSize / end.Sub(start).Seconds()
}
