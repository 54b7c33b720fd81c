package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// BenchmarkRawCASLatency drives the server with a bare socket (write, then
// read, on one goroutine, like the echo) to separate the server's share of
// a CAS round trip from the client library's.
func BenchmarkRawCASLatency(b *testing.B) {
	c, path := benchServer(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := net.Dial("unixpacket", path)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	in := make([]byte, wire.MaxMessage)
	if _, err := raw.Write(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.Read(in); err != nil {
		b.Fatal(err)
	}
	echoConn, err := net.Dial("unixpacket", hostiftest.StartEcho(b))
	if err != nil {
		b.Fatal(err)
	}
	defer echoConn.Close()
	msg := make([]byte, 48)
	var cas, echo []time.Duration
	i := uint64(0)
	for b.Loop() {
		req := wire.AppendRequest(msg[:0], &wire.Request{Header: wire.Header{Op: wire.OpCAS, ID: i + 2, GVA: g}, Expected: i, Desired: i + 1})
		t0 := time.Now()
		if _, err := raw.Write(req); err != nil {
			b.Fatal(err)
		}
		if n, err := raw.Read(in); err != nil || n != wire.HeaderLen+16 || in[4] != 0 {
			b.Fatalf("cas reply of %d bytes, status %d: %v", n, in[4], err)
		}
		t1 := time.Now()
		if _, err := echoConn.Write(req); err != nil {
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
