package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc/port/secure"
)

// oneHopPair starts two dpu-agent processes linked by UDP over loopback,
// with plain or secure (key-file, fabric-keys) links, and returns node 0's
// and node 1's dpu0.sock.
func oneHopPair(b *testing.B, sealed bool) (s0, s1 string) { return linkedPair(b, sealed, 1) }

// linkedPair is oneHopPair with a link of k channels (consecutive ports).
func linkedPair(b *testing.B, sealed bool, k int) (s0, s1 string) {
	dir := b.TempDir()
	ports := []int{0, 0}
	if k == 1 {
		ports = freeUDPPorts(b, 2)
	} else {
		base := freeUDPRun(b, 2*k)
		ports = []int{base, base + k}
	}
	addr := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	opt := ""
	if k > 1 {
		opt = fmt.Sprintf(" channels=%d", k)
	}
	var extra [2][]string
	if sealed {
		fab := secure.NewFabric()
		var order []secure.PublicKey
		for i := range 2 {
			kp, err := secure.GenerateKeyPair()
			if err != nil {
				b.Fatal(err)
			}
			keyFile := filepath.Join(dir, fmt.Sprintf("node%d.key", i))
			if err := secure.WriteKeyFile(keyFile, kp, -1, -1); err != nil {
				b.Fatal(err)
			}
			fab.Add(fmt.Sprintf("node%d", i), kp.Public)
			order = append(order, kp.Public)
			conf := filepath.Join(dir, fmt.Sprintf("node%d.conf", i))
			text := fmt.Sprintf("key-file = %s\nfabric-keys = %s\n", keyFile, filepath.Join(dir, "fabric.keys"))
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				b.Fatal(err)
			}
			extra[i] = []string{"--config", conf}
		}
		if err := rundir.WriteFile(filepath.Join(dir, "fabric.keys"), fab.Format(order), 0o644, -1, -1); err != nil {
			b.Fatal(err)
		}
	}
	s0 = startAgentProc(b, filepath.Join(dir, "n0"), append(extra[0], "--node", "0", "--port", "p0 udp "+addr[0]+" "+addr[1]+opt)...)
	s1 = startAgentProc(b, filepath.Join(dir, "n1"), append(extra[1], "--node", "1", "--port", "p0 udp "+addr[1]+" "+addr[0]+opt)...)
	return s0, s1
}

// BenchmarkLiveOneHopLinks: plain against secure links, side by side in
// one run, between two dpu-agent processes: the median one-hop CAS round
// trip (one request in flight: what sealing adds to a round trip) and
// one-hop fetch-add throughput with 32 requests in flight on one session
// (many small frames per step: what sealing costs under load, where the
// secure port seals what a step writes as bundles).
func BenchmarkLiveOneHopLinks(b *testing.B) {
	for _, kind := range []string{"plain", "secure"} {
		b.Run("cas-latency/"+kind, func(b *testing.B) { benchOneHop(b, kind == "secure", 1, 1) })
	}
	for _, kind := range []string{"plain", "secure"} {
		b.Run("fadd-pipelined32/"+kind, func(b *testing.B) { benchOneHop(b, kind == "secure", 32, 1) })
	}
	// the same over a link of four channels
	b.Run("cas-latency/plain/channels=4", func(b *testing.B) { benchOneHop(b, false, 1, 4) })
	b.Run("fadd-pipelined32/plain/channels=4", func(b *testing.B) { benchOneHop(b, false, 32, 4) })
}

func benchOneHop(b *testing.B, sealed bool, depth, channels int) {
	s0, s1 := linkedPair(b, sealed, channels)
	ctx := context.Background()
	c0, err := client.Dial(ctx, s0, client.Options{Name: "owner"})
	if err != nil {
		b.Fatal(err)
	}
	defer c0.Close()
	g, err := c0.Alloc(ctx, 4096, 0o666)
	if err != nil {
		b.Fatal(err)
	}
	raw := rawSession(b, s1)
	in := make([]byte, wire.MaxMessage)
	msg := make([]byte, 0, 64)
	send := func(id uint64, r wire.Request) {
		r.Header.ID = id
		if _, err := raw.Write(wire.AppendRequest(msg[:0], &r)); err != nil {
			b.Fatal(err)
		}
	}
	reply := func() {
		if _, err := raw.Read(in); err != nil {
			b.Fatal(err)
		}
		if in[4] != 0 {
			b.Fatalf("reply status %d", in[4])
		}
	}
	// the first CAS waits for the link (and, sealed, its handshake) and routes
	deadline := time.Now().Add(20 * time.Second)
	for {
		send(2, wire.Request{Header: wire.Header{Op: wire.OpCAS, GVA: g}})
		if n, err := raw.Read(in); err == nil && n == wire.HeaderLen+16 && in[4] == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no one-hop CAS within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if depth == 1 {
		var lat []time.Duration
		i := uint64(0)
		for b.Loop() {
			t0 := time.Now()
			send(i+3, wire.Request{Header: wire.Header{Op: wire.OpCAS, GVA: g}, Expected: i, Desired: i + 1})
			reply()
			lat = append(lat, time.Since(t0))
			i++
		}
		if v, err := c0.Load64(ctx, g); err != nil || v != i {
			b.Fatalf("owner's word %d after %d swaps: %v", v, i, err)
		}
		b.ReportMetric(median(lat), "cas-p50-ns")
		return
	}
	fadd := func(id uint64) {
		addr := g
		addr.Lo += (id % uint64(depth)) * 8
		send(id, wire.Request{Header: wire.Header{Op: wire.OpFetchAdd, GVA: addr}, Delta: 1})
	}
	id := uint64(100)
	for range depth {
		fadd(id)
		id++
	}
	start := time.Now()
	done := 0
	for b.Loop() {
		reply()
		done++
		fadd(id)
		id++
	}
	for range depth {
		reply()
	}
	b.ReportMetric(float64(done)/time.Since(start).Seconds(), "ops/s")
	var sum uint64
	for k := range depth {
		addr := g
		addr.Lo += uint64(k) * 8
		v, err := c0.Load64(ctx, addr)
		if err != nil {
			b.Fatal(err)
		}
		sum += v
	}
	if sum != uint64(done+depth) {
		b.Fatalf("words sum to %d after %d fetch-adds", sum, done+depth)
	}
}
