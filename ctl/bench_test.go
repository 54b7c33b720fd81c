package ctl_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/ctl/ctltest"
)

// BenchmarkRouteDump is a whole route dump over the socket: request,
// one message per route, NLMSG_DONE, decoded by the client.
func BenchmarkRouteDump(b *testing.B) {
	for _, n := range []int{16, 1024} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			snap := ctltest.Sample()
			snap.Routes = manyRoutes(n)
			_, path := ctltest.Serve(b, ctltest.NewSource(snap))
			c, err := ctl.Dial(path)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				rs, err := c.Routes(ctx)
				if err != nil || len(rs) != n {
					b.Fatalf("%d routes, %v", len(rs), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/route")
		})
	}
}

// BenchmarkStats is one request/reply round trip.
func BenchmarkStats(b *testing.B) {
	_, path := ctltest.Serve(b, ctltest.NewSource(ctltest.Sample()))
	c, err := ctl.Dial(path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Stats(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish is the agent's cost of one event with members that
// read as fast as they can.
func BenchmarkPublish(b *testing.B) {
	for _, members := range []int{0, 1, 8} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			srv, path := ctltest.Serve(b, ctltest.NewSource(ctltest.Sample()), ctl.WithLimits(ctl.Limits{MonitorQueue: 1 << 16}))
			for range members {
				conn, err := net.Dial("unixpacket", path)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				conn.Write(msg(family, fRequest|fAck, 1, ctl.CmdSubscribe, 1, attr(1, u32(ctl.MonitorGroup))))
				go func() {
					buf := make([]byte, ctl.MaxMessageSize)
					for {
						if _, err := conn.Read(buf); err != nil {
							return
						}
					}
				}()
			}
			for srv.Subscribers() != members {
				time.Sleep(time.Millisecond)
			}
			ev := ctl.Event{Kind: ctl.EventRouteChange, Node: 7, Port: "p1", NextHop: 3, Hops: 2}
			b.ReportAllocs()
			for b.Loop() {
				srv.Publish(ev)
			}
			b.ReportMetric(float64(srv.Subscribers()), "members_left")
		})
	}
}
