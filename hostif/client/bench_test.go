package client_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

func benchClient(b *testing.B) *client.Client {
	c, _ := benchServer(b)
	return c
}

// benchServer serves an in-memory node and returns a client of it and the
// socket path.
func benchServer(b *testing.B) (*client.Client, string) {
	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	b.Cleanup(be.Close)
	path := hostiftest.StartServer(b, be, hostif.Options{})
	c, err := client.Dial(context.Background(), path, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, path
}

func p50(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Nanoseconds())
}

// BenchmarkCASLatency measures the median round trip of a CAS through
// dpu0.sock (in-memory backend) and, in the same run, of a bare
// SOCK_SEQPACKET echo of a CAS-sized message (48 bytes) driven the same
// way from Go. The target is cas/echo <= 1.5.
func BenchmarkCASLatency(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	echoConn, err := net.Dial("unixpacket", hostiftest.StartEcho(b))
	if err != nil {
		b.Fatal(err)
	}
	defer echoConn.Close()
	msg, in := make([]byte, 48), make([]byte, 64)
	var cas, echo []time.Duration
	i := uint64(0)
	for b.Loop() {
		t0 := time.Now()
		if _, _, err := c.CompareAndSwap(ctx, g, i, i+1); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := echoConn.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := echoConn.Read(in); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		cas, echo = append(cas, t1.Sub(t0)), append(echo, t2.Sub(t1))
		i++
	}
	pc, pe := p50(cas), p50(echo)
	b.ReportMetric(pc, "cas-p50-ns")
	b.ReportMetric(pe, "echo-p50-ns")
	b.ReportMetric(pc/pe, "cas/echo")
}

// BenchmarkPipelined16 keeps 16 requests in flight on one connection
// (16 goroutines sharing one Client) and reports the throughput. The
// target is >= 300k ops/s.
func BenchmarkPipelined16(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 16*4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	const depth = 16
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + depth - 1) / depth
	for w := range depth {
		wg.Go(func() {
			addr := g
			addr.Lo += uint64(w) * 4096
			for range per {
				if _, err := c.FetchAdd(ctx, addr, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.ReportMetric(float64(per*depth)/el.Seconds(), "ops/s")
}

// BenchmarkMappedLoad64 is a consistent read of a valid mapped replica
// through the Go client (seqlock around a memory load).
func BenchmarkMappedLoad64(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Store64(ctx, g.WithOffset(64), 42); err != nil {
		b.Fatal(err)
	}
	m, err := c.Map(ctx, g, 4096)
	if err != nil {
		b.Fatal(err)
	}
	var sum uint64
	for b.Loop() {
		v, err := m.Load64(ctx, 64)
		if err != nil {
			b.Fatal(err)
		}
		sum += v
	}
	if sum != 42*uint64(b.N) {
		b.Fatal("wrong values")
	}
}
