package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
)

// Benchmarks of the Go client's socket path (no shared-memory rings)
// against a live agent, beside the same CAS driven over a bare socket and
// a bare SOCK_SEQPACKET echo, all in one loop: client-p50 over raw-p50 is
// the client library's price on the socket.

func liveSocketClient(b *testing.B) (*client.Client, string) {
	b.Helper()
	sock := liveAgent(b)
	c, err := client.Dial(context.Background(), sock, client.Options{Name: b.Name(), NoRings: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if c.Rings() {
		b.Fatal("NoRings client on the ring")
	}
	return c, sock
}

// BenchmarkLiveSocketCASLatency: one goroutine, a CAS through the Go
// client on the socket, then the same CAS on a bare connection (write,
// read) through Go's net package, then on a bare blocking descriptor
// (write(2), blocking read(2) in the caller's thread, as a C program does),
// then a bare echo, per iteration.
func BenchmarkLiveSocketCASLatency(b *testing.B) {
	c, sock := liveSocketClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 3*4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	rawPage := g
	rawPage.Lo += 4096
	raw := rawSession(b, sock)
	sys := blockingSession(b, sock)
	sysPage := g
	sysPage.Lo += 2 * 4096
	echoConn := dialEcho(b)
	in := make([]byte, wire.MaxMessage)
	msg := make([]byte, 0, 64)
	var cl, rw, sc, echo []time.Duration
	i := uint64(0)
	for b.Loop() {
		t0 := time.Now()
		if _, swapped, err := c.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
			b.Fatalf("cas %d: swapped %v, %v", i, swapped, err)
		}
		t1 := time.Now()
		req := wire.AppendRequest(msg[:0], &wire.Request{Header: wire.Header{Op: wire.OpCAS, ID: i + 2, GVA: rawPage}, Expected: i, Desired: i + 1})
		if _, err := raw.Write(req); err != nil {
			b.Fatal(err)
		}
		if n, err := raw.Read(in); err != nil || n != wire.HeaderLen+16 || in[4] != 0 {
			b.Fatalf("cas reply of %d bytes, status %d: %v", n, in[4], err)
		}
		t2 := time.Now()
		req = wire.AppendRequest(msg[:0], &wire.Request{Header: wire.Header{Op: wire.OpCAS, ID: i + 2, GVA: sysPage}, Expected: i, Desired: i + 1})
		if _, err := unix.Write(sys, req); err != nil {
			b.Fatal(err)
		}
		if n, err := unix.Read(sys, in); err != nil || n != wire.HeaderLen+16 || in[4] != 0 {
			b.Fatalf("cas reply of %d bytes, status %d: %v", n, in[4], err)
		}
		t3 := time.Now()
		if _, err := echoConn.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := echoConn.Read(in); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		cl, rw, sc, echo = append(cl, t1.Sub(t0)), append(rw, t2.Sub(t1)), append(sc, t3.Sub(t2)), append(echo, t4.Sub(t3))
		i++
	}
	pc, pr, ps, pe := median(cl), median(rw), median(sc), median(echo)
	b.ReportMetric(pc, "client-p50-ns")
	b.ReportMetric(pr, "raw-p50-ns")
	b.ReportMetric(ps, "blocking-p50-ns")
	b.ReportMetric(pe, "echo-p50-ns")
	b.ReportMetric(pc/ps, "client/blocking")
}

// blockingSession is rawSession on a blocking descriptor of its own (out of
// the runtime's poller), for write(2) and read(2) in the caller's thread.
// It is closed at cleanup.
func blockingSession(b *testing.B, sock string) int {
	b.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(fd) })
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		b.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(10 * time.Second)) // every wait bounded
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		b.Fatal(err)
	}
	if _, err := unix.Write(fd, wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})); err != nil {
		b.Fatal(err)
	}
	if _, err := unix.Read(fd, make([]byte, wire.MaxMessage)); err != nil {
		b.Fatal(err)
	}
	return fd
}

// BenchmarkLiveSocketPipelined16: 16 goroutines share one socket Client,
// each CASing its own page; ops/s is the connection's throughput and
// p50-ns the median round trip one goroutine sees.
func BenchmarkLiveSocketPipelined16(b *testing.B) {
	c, _ := liveSocketClient(b)
	ctx := context.Background()
	const depth = 16
	g, err := c.Alloc(ctx, depth*4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	per := (b.N + depth - 1) / depth
	lat := make([][]time.Duration, depth)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range depth {
		wg.Go(func() {
			addr := g
			addr.Lo += uint64(w) * 4096
			l := make([]time.Duration, 0, per)
			for i := range uint64(per) {
				t0 := time.Now()
				if _, swapped, err := c.CompareAndSwap(ctx, addr, i, i+1); err != nil || !swapped {
					b.Errorf("cas %d on page %d: swapped %v, %v", i, w, swapped, err)
					return
				}
				l = append(l, time.Since(t0))
			}
			lat[w] = l
		})
	}
	wg.Wait()
	b.ReportMetric(float64(per*depth)/time.Since(start).Seconds(), "ops/s")
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) > 0 {
		b.ReportMetric(median(all), "p50-ns")
	}
}
