package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/ring/ringtest"
	"github.com/aitherion/dpu/hostif/wire"
)

// TestRingsEndToEnd: against an agent that offers rings, the client uses
// them for every data request, with callers that spin and callers that
// sleep (the agent spinning or sleeping on its bell), and the results are
// those of the socket path: 16 goroutines' fetch-adds sum exactly.
func TestRingsEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		agentSpin int
		spin      time.Duration
	}{
		{"polling agent", 1 << 30, 0},
		{"sleeping agent", 0, 0},
		{"sleeping both", 0, time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := ringtest.Start(t, ringtest.Options{Spin: tc.agentSpin})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, a.Path, client.Options{RingSpin: tc.spin})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !c.Rings() {
				t.Fatal("the agent offered rings; the client did not take them")
			}
			g, err := c.Alloc(ctx, 4096, 0)
			if err != nil {
				t.Fatal(err)
			}
			big := make([]byte, 4096)
			for i := range big {
				big[i] = byte(i * 7)
			}
			if _, err := c.Store(ctx, g, big); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, 4096)
			if _, err := c.Load(ctx, g, back); err != nil || string(back) != string(big) {
				t.Fatalf("a 4 KiB store and load through the ring: %v", err)
			}
			if _, err := c.Store64(ctx, g, 0); err != nil {
				t.Fatal(err)
			}
			const workers, each = 16, 200
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range each {
						if _, err := c.FetchAdd(ctx, g, 1); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if old, swapped, err := c.CompareAndSwap(ctx, g, workers*each, 1); err != nil || !swapped {
				t.Fatalf("cas after %d fetch-adds: old %d swapped %v %v", workers*each, old, swapped, err)
			}
			if v, err := c.Load64(ctx, g); err != nil || v != 1 {
				t.Fatalf("load64 %d %v", v, err)
			}
			if a.OnSocket.Load() != 0 || a.OnRing.Load() < workers*each {
				t.Fatalf("%d requests on the socket, %d on the ring", a.OnSocket.Load(), a.OnRing.Load())
			}
		})
	}
}

// TestRingsFallback: an agent without rings, or DPU_RINGS=0, keeps the
// client on the socket, with the same results.
func TestRingsFallback(t *testing.T) {
	check := func(t *testing.T, a *ringtest.Agent) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, a.Path, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Rings() {
			t.Fatal("client uses rings")
		}
		g, err := c.Alloc(ctx, 4096, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range uint64(10) {
			if old, err := c.FetchAdd(ctx, g, 1); err != nil || old != i {
				t.Fatalf("fetch-add %d: old %d %v", i, old, err)
			}
		}
		if a.OnRing.Load() != 0 || a.OnSocket.Load() != 11 {
			t.Fatalf("%d requests on the socket, %d on the ring", a.OnSocket.Load(), a.OnRing.Load())
		}
	}
	t.Run("agent without rings", func(t *testing.T) { check(t, ringtest.Start(t, ringtest.Options{NoRings: true})) })
	t.Run("DPU_RINGS=0", func(t *testing.T) {
		t.Setenv("DPU_RINGS", "0")
		check(t, ringtest.Start(t, ringtest.Options{}))
	})
}

// BenchmarkRingsCAS: one goroutine's CompareAndSwap round trips through
// the Go client to the stand-in agent (hostif/ring/ringtest), over the
// ring with a polling agent, over the ring with both sides sleeping on the
// bell, and over the socket, in the same run. ns/op is one round trip.
func BenchmarkRingsCAS(b *testing.B) {
	for _, tc := range []struct {
		name  string
		agent ringtest.Options
		opts  client.Options
	}{
		{"ring-poll", ringtest.Options{Spin: 1 << 30}, client.Options{}},
		{"ring-sleep", ringtest.Options{}, client.Options{RingSpin: time.Nanosecond}},
		{"socket", ringtest.Options{}, client.Options{NoRings: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			a := ringtest.Start(b, tc.agent)
			ctx := context.Background()
			c, err := client.Dial(ctx, a.Path, tc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			g, err := c.Alloc(ctx, 4096, 0)
			if err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			i := uint64(0)
			for b.Loop() {
				t0 := time.Now()
				if _, swapped, err := c.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
					b.Fatalf("cas %d: %v %v", i, swapped, err)
				}
				lat = append(lat, time.Since(t0))
				i++
			}
			b.ReportMetric(p50(lat), "p50-ns")
		})
	}
}

// TestRingsAbandoned: a call given up before its reply comes on the ring
// is undone when the reply comes (an ALLOC freed) although no caller
// waits on the ring any more, and its request slot comes back.
func TestRingsAbandoned(t *testing.T) {
	a := ringtest.Start(t, ringtest.Options{})
	c, err := client.Dial(context.Background(), a.Path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a.Stall.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err = c.Alloc(ctx, 4096, 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("alloc on a stalled agent: %v", err)
	}
	a.Stall.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for a.RingOps[wire.OpFree].Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned alloc was not freed")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := c.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * int(c.Hello().MaxOutstanding) {
		if _, err := c.FetchAdd(ctx, g, 1); err != nil {
			t.Fatalf("call %d after an abandoned one: %v", i, err)
		}
	}
}
