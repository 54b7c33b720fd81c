package xdp_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/udp"
	"github.com/aitherion/dpu/noc/port/xdp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// BenchmarkStripedPage moves 4 KiB pages (with their frame header) through
// two reliable links (link.Conn) over k channels of one veth pair between
// two namespaces whose devices have 4 queues: over AF_XDP, channel i is
// queue i (xdp.NewQueuePorts); over UDP, channel i is a socket pair on
// port 7000+i of the same devices. k = 1 is the plain port, the baseline of
// its transport in the same run.
//
//	go test -run '^$' -bench StripedPage -benchtime 20000x ./noc/port/xdp/
func BenchmarkStripedPage(b *testing.B) {
	for _, kind := range []string{"xdp", "udp"} {
		for _, k := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/channels=%d", kind, k), func(b *testing.B) {
				f := queuePair(b, 4)
				var ca, cb []noc.Port
				if kind == "xdp" {
					for _, p := range queuePortsIn(b, f, 0, k, xdp.Options{}) {
						ca = append(ca, p)
					}
					for _, p := range queuePortsIn(b, f, 1, k, xdp.Options{}) {
						cb = append(cb, p)
					}
				} else {
					ca, cb = udpChannelsIn(b, f, k)
				}
				if len(ca) != k || len(cb) != k {
					b.Fatalf("%d and %d channels, want %d", len(ca), len(cb), k)
				}
				pa, pb := stripe(b, "a", ca, kind == "xdp"), stripe(b, "b", cb, kind == "xdp")
				pageThroughput(b, pa, pb, 4096+noc.HeaderLen)
			})
		}
	}
}

// stripe joins k > 1 channels into one port (one is returned as it is).
func stripe(b *testing.B, name string, chans []noc.Port, shared bool) noc.Port {
	b.Helper()
	if len(chans) == 1 {
		return chans[0]
	}
	cfg := link.DefaultStripeConfig(len(chans), 0)
	cfg.MTU = 0
	cfg.SharedMedium = shared
	p, err := link.NewStripedPort(name, chans, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// udpChannelsIn gives node 0's and node 1's p0 the addresses fd00::1 and
// fd00::2 and returns k connected UDP port pairs between them, channel i on
// port 7000+i.
func udpChannelsIn(b *testing.B, f *veth.Fabric, k int) (a, z []noc.Port) {
	b.Helper()
	ip := func(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd00::%d", i+1)) }
	for i := range 2 {
		err := f.Do(i, func() error {
			l, err := netlink.LinkByName(veth.PortName(0))
			if err != nil {
				return err
			}
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip(i).AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
			return netlink.AddrAdd(l, addr)
		})
		if err != nil {
			b.Fatalf("address on node %d: %v", i, err)
		}
	}
	mtu := f.MTU - 40 - 8 // IPv6 and UDP headers
	open := func(node, c int) noc.Port {
		var p noc.Port
		err := f.Do(node, func() error {
			local := netip.AddrPortFrom(ip(node), uint16(7000+c))
			conn, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(local))
			if err != nil {
				return err
			}
			up, err := udp.New(conn, netip.AddrPortFrom(ip(1-node), uint16(7000+c)), mtu)
			if err != nil {
				conn.Close()
				return err
			}
			p = up
			return nil
		})
		if err != nil {
			b.Fatalf("udp channel %d on node %d: %v", c, node, err)
		}
		b.Cleanup(func() { p.Close() })
		return p
	}
	for c := range k {
		a, z = append(a, open(0, c)), append(z, open(1, c))
	}
	return a, z
}

// pageThroughput sends b.N messages of size bytes from a link.Conn over pa
// to one over pb and reports pages/s and the link's retransmissions.
func pageThroughput(b *testing.B, pa, pb noc.Port, size int) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	b.ReportMetric(float64(ca.Stats().Retransmits), "retransmits")
}
