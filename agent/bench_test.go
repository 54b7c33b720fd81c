package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// Benchmarks of the host interface against a live agent: the dpu-agent
// binary, built for the run, serving a single node in its own process (as
// on a host), with the coherence engine behind dpu0.sock. Every page here
// is owned by that node.

// liveAgent starts a single-node dpu-agent process and returns its
// dpu0.sock; it is stopped when the benchmark ends.
func liveAgent(b *testing.B) string {
	b.Helper()
	return startAgentProc(b, filepath.Join(b.TempDir(), "run"), "--node", "0")
}

func liveClient(b *testing.B) (*client.Client, string) {
	b.Helper()
	sock := liveAgent(b)
	c, err := client.Dial(context.Background(), sock, client.Options{Name: b.Name()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, sock
}

func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Nanoseconds())
}

// BenchmarkLiveCASLatency: the median round trip of a CAS on a page this
// node owns, one client, through dpu0.sock of a live agent; and, in the
// same loop, of a bare SOCK_SEQPACKET echo of a CAS-sized message
// (hostiftest.StartEcho, in this process). cas/echo is the host
// interface's and engine's price over the socket itself.
func BenchmarkLiveCASLatency(b *testing.B) {
	c, _ := liveClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	echoConn := dialEcho(b)
	msg, in := make([]byte, 48), make([]byte, 64)
	var cas, echo []time.Duration
	i := uint64(0)
	sw0 := agentSwitches(b)
	for b.Loop() {
		t0 := time.Now()
		if _, swapped, err := c.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
			b.Fatalf("cas %d: swapped %v, %v", i, swapped, err)
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
	pc, pe := median(cas), median(echo)
	b.ReportMetric(pc, "cas-p50-ns")
	b.ReportMetric(pe, "echo-p50-ns")
	b.ReportMetric(pc/pe, "cas/echo")
	b.ReportMetric(float64(agentSwitches(b)-sw0)/float64(i), "agent-switches/op")
}

// BenchmarkLiveRawCASLatency is BenchmarkLiveCASLatency driven with a bare
// socket (write, then read, on one goroutine, exactly as the echo is): the
// live agent's share of a CAS round trip without the Go client's.
func BenchmarkLiveRawCASLatency(b *testing.B) {
	c, sock := liveClient(b)
	ctx := context.Background()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	raw := rawSession(b, sock)
	in := make([]byte, wire.MaxMessage)
	echoConn := dialEcho(b)
	msg := make([]byte, 0, 64)
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
	pc, pe := median(cas), median(echo)
	b.ReportMetric(pc, "cas-p50-ns")
	b.ReportMetric(pe, "echo-p50-ns")
	b.ReportMetric(pc/pe, "cas/echo")
}

// BenchmarkLivePipelined16: 16 requests in flight on one connection (16
// goroutines sharing one Client, each CASing its own page) against a live
// agent; ops/s is the connection's throughput.
func BenchmarkLivePipelined16(b *testing.B) {
	c, _ := liveClient(b)
	ctx := context.Background()
	const depth = 16
	g, err := c.Alloc(ctx, depth*4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	per := (b.N + depth - 1) / depth
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range depth {
		wg.Go(func() {
			addr := g
			addr.Lo += uint64(w) * 4096
			for i := range uint64(per) {
				if _, swapped, err := c.CompareAndSwap(ctx, addr, i, i+1); err != nil || !swapped {
					b.Errorf("cas %d on page %d: swapped %v, %v", i, w, swapped, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(per*depth)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkLiveMappedLoad64: a consistent read (seqlock) of a valid mapped
// replica through the Go client, the replica file served by a live agent.
func BenchmarkLiveMappedLoad64(b *testing.B) {
	c, _ := liveClient(b)
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
	defer m.Unmap(ctx)
	var sum uint64
	for b.Loop() {
		v, err := m.Load64(ctx, 64)
		if err != nil {
			b.Fatal(err)
		}
		sum += v
	}
	if sum != 42*uint64(b.N) {
		b.Fatalf("read %d over %d loads, want 42 each", sum, b.N)
	}
}

// BenchmarkLiveCLibrary runs libdpu's benchmark program (hostif/c/bench)
// against a live agent: read64_ns is dpu_read64 of a valid mapped replica,
// raw_ns a plain load of it, cas_p50_ns / cas_mapped_p50_ns the median
// dpu_cas64 round trip on an unmapped / a mapped page, echo_p50_ns a bare
// SOCK_SEQPACKET echo (hostiftest.StartEcho) from C in the same run.
func BenchmarkLiveCLibrary(b *testing.B) {
	for _, tool := range []string{"cc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not found", tool)
		}
	}
	if out, err := exec.Command("make", "-s", "-C", "../hostif/c", "build/dpu_bench").CombinedOutput(); err != nil {
		b.Fatalf("make dpu_bench: %v\n%s", err, out)
	}
	sock := liveAgent(b)
	echo := hostiftest.StartEcho(b)
	pair := regexp.MustCompile(`(\w+)=([0-9.]+)`)
	metrics := map[string]float64{}
	for range b.N {
		cmd := exec.Command("../hostif/c/build/dpu_bench")
		cmd.Env = append(os.Environ(), "DPU_SOCKET="+sock, "DPU_BENCH_ECHO="+echo)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("dpu_bench: %v\n%s", err, out)
		}
		for _, m := range pair.FindAllStringSubmatch(string(out), -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			metrics[m[1]] = v
		}
	}
	for _, name := range []string{"read64_ns", "raw_ns", "cas_p50_ns", "cas_mapped_p50_ns", "echo_p50_ns"} {
		b.ReportMetric(metrics[name], name)
	}
	if metrics["echo_p50_ns"] > 0 {
		b.ReportMetric(metrics["cas_p50_ns"]/metrics["echo_p50_ns"], "cas/echo")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLiveLockUnlock: the median round trip of a LOCK and of an
// UNLOCK of a page this node owns, one client over the socket (no rings:
// locks never take them), through a live agent; the echo beside them as in
// BenchmarkLiveCASLatency. With the agent's switches per lock-unlock pair.
func BenchmarkLiveLockUnlock(b *testing.B) {
	sock := liveAgent(b)
	ctx := context.Background()
	c, err := client.Dial(ctx, sock, client.Options{Name: b.Name(), NoRings: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		b.Fatal(err)
	}
	echoConn := dialEcho(b)
	msg, in := make([]byte, 48), make([]byte, 64)
	var lock, unlock, echo []time.Duration
	sw0 := agentSwitches(b)
	n := uint64(0)
	for b.Loop() {
		t0 := time.Now()
		if err := c.Lock(ctx, g, time.Second); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := c.Unlock(ctx, g); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := echoConn.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := echoConn.Read(in); err != nil {
			b.Fatal(err)
		}
		lock, unlock, echo = append(lock, t1.Sub(t0)), append(unlock, t2.Sub(t1)), append(echo, time.Since(t2))
		n++
	}
	b.ReportMetric(median(lock), "lock-p50-ns")
	b.ReportMetric(median(unlock), "unlock-p50-ns")
	b.ReportMetric(median(echo), "echo-p50-ns")
	b.ReportMetric(float64(agentSwitches(b)-sw0)/float64(n), "agent-switches/op")
}
