package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
)

// bulkPages is the size of the allocation the bulk benchmark stores into:
// 4 MiB, its pages written in turn.
const bulkPages = 1024

// bulkDepth is how many page stores the benchmark keeps in flight on its
// one session.
const bulkDepth = 32

// BenchmarkLiveBulkStore: 4 KiB page stores from a client of node 1 into
// pages owned by node 0, 32 in flight on one session, between two
// dpu-agent processes linked over UDP loopback by 1 and by 4 channels,
// plaintext and sealed. It reports MB/s of page data acknowledged, and
// x-1ch, the rate over the one-channel link's of the same kind measured
// just before in the same run.
//
//	go test -run '^$' -bench LiveBulkStore -benchtime 20000x ./agent/
func BenchmarkLiveBulkStore(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		one := 0.0
		for _, k := range []int{1, 4} {
			kind := "plain"
			if sealed {
				kind = "sealed"
			}
			b.Run(fmt.Sprintf("%s/channels=%d", kind, k), func(b *testing.B) {
				rate := benchBulkStore(b, sealed, k)
				if k == 1 {
					one = rate
				} else if one > 0 {
					b.ReportMetric(rate/one, "x-1ch")
				}
			})
		}
	}
}

// benchBulkStore runs b.N page stores and returns the bytes per second.
func benchBulkStore(b *testing.B, sealed bool, k int) float64 {
	s0, s1, c0, g := ownedPair(b, sealed, k)
	ctx := context.Background()
	raw := rawSession(b, s1)
	in := make([]byte, wire.MaxMessage)
	page := make([]byte, 4096)
	msg := make([]byte, 0, wire.MaxMessage)
	store := func(id uint64) {
		page[0] = byte(id)
		r := wire.Request{Header: wire.Header{Op: wire.OpStore, GVA: g.PageAt(int(id % bulkPages)), ID: id}, Data: page}
		if _, err := raw.Write(wire.AppendRequest(msg[:0], &r)); err != nil {
			b.Fatal(err)
		}
	}
	reply := func() {
		if _, err := raw.Read(in); err != nil {
			b.Fatal(err)
		}
		if in[4] != 0 {
			b.Fatalf("store reply status %d", in[4])
		}
	}
	// the first store waits for the link (and, sealed, its handshake)
	deadline := time.Now().Add(20 * time.Second)
	for {
		store(1)
		if _, err := raw.Read(in); err == nil && in[4] == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no one-hop store within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	id := uint64(100)
	for range bulkDepth {
		store(id)
		id++
	}
	b.SetBytes(4096)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		reply()
		store(id)
		id++
	}
	for range bulkDepth {
		reply()
	}
	el := time.Since(start)
	b.StopTimer()
	// the last page stored holds what the last store wrote
	last := id - 1
	got := make([]byte, 1)
	if _, err := c0.Load(ctx, g.PageAt(int(last%bulkPages)), got); err != nil || got[0] != byte(last) {
		b.Fatalf("owner's copy of the last page: %v, %v; want %d", got, err, byte(last))
	}
	rate := float64(b.N) * 4096 / el.Seconds()
	b.ReportMetric(rate/1e6, "MB/s-acked")
	// datagrams both agents' links sent, per page stored (the warm-up's
	// few included): what the link layer makes of a page's request and
	// its reply
	b.ReportMetric(linkDatagrams(b, ctx, s0, s1)/float64(b.N), "datagrams/page")
	return rate
}

// linkDatagrams is how many datagrams the links of the agents of sockets
// s0 and s1 sent so far.
func linkDatagrams(b *testing.B, ctx context.Context, socks ...string) float64 {
	var dg uint64
	for _, s := range socks {
		c, err := ctl.Dial(filepath.Join(filepath.Dir(s), "ctl.sock"))
		if err != nil {
			b.Fatal(err)
		}
		ls, err := c.Links(ctx)
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range ls {
			dg += l.TxDatagrams
		}
	}
	return float64(dg)
}

// ownedPair links two agents (linkedPair) and allocates bulkPages pages
// owned by node 0 through a client of it (closed at cleanup), which it
// returns with the pages and both agents' sockets.
func ownedPair(b *testing.B, sealed bool, k int) (s0, s1 string, c0 *client.Client, g gva.GVA) {
	s0, s1 = linkedPair(b, sealed, k)
	ctx := context.Background()
	c0, err := client.Dial(ctx, s0, client.Options{Name: "owner"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c0.Close() })
	if g, err = c0.Alloc(ctx, bulkPages*4096, 0o666); err != nil {
		b.Fatal(err)
	}
	return s0, s1, c0, g
}

// freeUDPRun returns the first of n consecutive loopback UDP ports free at
// the time of the call.
func freeUDPRun(b *testing.B, n int) int {
	for range 200 {
		base := 20000 + rand.IntN(40000)
		var held []*net.UDPConn
		for i := range n {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: base + i})
			if err != nil {
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		if len(held) == n {
			return base
		}
	}
	b.Fatalf("no run of %d free UDP ports", n)
	return 0
}

// BenchmarkLiveRangeStore: StoreRange and LoadRange of 4 MiB (bulk
// transfers of up to wire.MaxBulk through the connection's bulk area, four
// in flight) from a client of node 1 into pages owned by node 0, between
// two dpu-agent processes over UDP loopback, 1 and 4 channels, plaintext
// and sealed; beside it the page-by-page store of BenchmarkLiveBulkStore's
// shape is not repeated (run both for the ratio). Reports MB/s and
// datagrams per page of both agents' links.
//
//	go test -run '^$' -bench LiveRangeStore -benchtime 20x ./agent/
func BenchmarkLiveRangeStore(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		for _, k := range []int{1, 4} {
			kind := "plain"
			if sealed {
				kind = "sealed"
			}
			for _, dir := range []string{"store", "load"} {
				b.Run(fmt.Sprintf("%s/%s/channels=%d", dir, kind, k), func(b *testing.B) { benchRange(b, sealed, k, dir == "load") })
			}
		}
	}
}

func benchRange(b *testing.B, sealed bool, k int, load bool) {
	s0, s1, _, g := ownedPair(b, sealed, k)
	ctx := context.Background()
	c1, err := client.Dial(ctx, s1, client.Options{Name: "far", Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c1.Close()
	data := make([]byte, bulkPages*4096)
	for i := range data {
		data[i] = byte(i)
	}
	deadline := time.Now().Add(20 * time.Second)
	for { // the first store waits for the link (and, sealed, its handshake)
		if _, err := c1.Store(ctx, g, data[:8]); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no one-hop store within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c1.StoreRange(ctx, g, data); err != nil {
		b.Fatal(err)
	}
	got := make([]byte, len(data))
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if load {
			if _, err := c1.LoadRange(ctx, g, got); err != nil {
				b.Fatal(err)
			}
		} else if _, err := c1.StoreRange(ctx, g, data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if load && !bytes.Equal(got, data) {
		b.Fatal("loaded range differs from the stored one")
	}
	b.ReportMetric(float64(b.N)*float64(len(data))/b.Elapsed().Seconds()/1e6, "MB/s-acked")
	b.ReportMetric(linkDatagrams(b, ctx, s0, s1)/float64(b.N*bulkPages), "datagrams/page")
}
