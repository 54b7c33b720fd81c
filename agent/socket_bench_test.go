package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
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

// BenchmarkLiveSocketCASLatency: one goroutine doing CASes four ways, in
// turns of socketTurn round trips each, in one loop: through the Go client
// on the socket (client), on a bare connection through Go's net package
// (raw: write, then a read parked in the runtime's poller), on a bare
// blocking descriptor (blocking: write(2), then read(2) in the caller's
// thread, as a C program does), and a bare SOCK_SEQPACKET echo of the
// request in this process (echo). Each way runs socketTurn round trips in
// a row, so that each is measured in its steady state, not in the wake of
// another. client/blocking is the Go client's price over C's shape.
func BenchmarkLiveSocketCASLatency(b *testing.B) {
	c, sock := liveSocketClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 3*4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	page := func(i int) gva.GVA { p := g; p.Lo += uint64(i) * 4096; return p }
	raw := rawSession(b, sock)
	sys := blockingSession(b, sock)
	echoConn := dialEcho(b)
	in := make([]byte, wire.MaxMessage)
	msg := make([]byte, 0, 64)
	const (
		client = iota
		rawWay
		blocking
		echoWay
		ways
	)
	var lat [ways][]time.Duration
	var next [ways]uint64 // the next expected value of each way's page
	n := 0
	for b.Loop() {
		way := n / socketTurn % ways
		n++
		i := next[way]
		req := wire.AppendRequest(msg[:0], &wire.Request{Header: wire.Header{Op: wire.OpCAS, ID: i + 2, GVA: page(way % 3)}, Expected: i, Desired: i + 1})
		t0 := time.Now()
		switch way {
		case client:
			if _, swapped, err := c.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
				b.Fatalf("cas %d: swapped %v, %v", i, swapped, err)
			}
		case rawWay:
			if _, err := raw.Write(req); err != nil {
				b.Fatal(err)
			}
			if n, err := raw.Read(in); err != nil || n != wire.HeaderLen+16 || in[4] != 0 {
				b.Fatalf("cas reply of %d bytes, status %d: %v", n, in[4], err)
			}
		case blocking:
			if _, err := unix.Write(sys, req); err != nil {
				b.Fatal(err)
			}
			if n, err := unix.Read(sys, in); err != nil || n != wire.HeaderLen+16 || in[4] != 0 {
				b.Fatalf("cas reply of %d bytes, status %d: %v", n, in[4], err)
			}
		case echoWay:
			if _, err := echoConn.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := echoConn.Read(in); err != nil {
				b.Fatal(err)
			}
		}
		lat[way] = append(lat[way], time.Since(t0))
		next[way]++
	}
	if len(lat[echoWay]) == 0 {
		return // too few rounds for every way
	}
	pc, pr, ps, pe := median(lat[client]), median(lat[rawWay]), median(lat[blocking]), median(lat[echoWay])
	b.ReportMetric(pc, "client-p50-ns")
	b.ReportMetric(pr, "raw-p50-ns")
	b.ReportMetric(ps, "blocking-p50-ns")
	b.ReportMetric(pe, "echo-p50-ns")
	b.ReportMetric(pc/ps, "client/blocking")
}

// socketTurn is how many round trips each way of
// BenchmarkLiveSocketCASLatency makes in a row.
const socketTurn = 256

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
