package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
)

// Tests of the socket path (no rings): callers read their own replies,
// taking turns, and a listener reads while no call waits.

func dialSocket(t *testing.T, path string, opts client.Options) *client.Client {
	t.Helper()
	opts.NoRings = true
	c, err := client.Dial(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.Rings() {
		t.Fatal("NoRings client on the ring")
	}
	return c
}

// TestSocketManyCallers: more goroutines than the server's request slots
// share one connection; every reply reaches its own caller (each counter
// ends at exactly its count).
func TestSocketManyCallers(t *testing.T) {
	_, path := start(t, hostif.Options{MaxOutstanding: 8})
	c := dialSocket(t, path, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const workers, each = 24, 200
	g, err := c.Alloc(ctx, workers*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			addr := page(g, w)
			for i := range uint64(each) {
				old, err := c.FetchAdd(ctx, addr, 1)
				if err != nil || old != i {
					errs <- fmt.Errorf("worker %d, add %d: old %d, %v", w, i, old, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := range workers {
		if v, err := c.Load64(ctx, page(g, w)); err != nil || v != each {
			t.Errorf("counter %d: %d, %v", w, v, err)
		}
	}
}

func page(g gva.GVA, i int) gva.GVA {
	g.Lo += uint64(i) * 4096
	return g
}

// TestSocketReaderGivesUp: the caller reading the socket for everyone
// gives up (its context ends, by deadline or by cancellation); the callers
// waiting behind it still get their replies.
func TestSocketReaderGivesUp(t *testing.T) {
	for _, how := range []string{"deadline", "cancel"} {
		t.Run(how, func(t *testing.T) {
			be, path := start(t, hostif.Options{OpTimeout: 500 * time.Millisecond})
			c := dialSocket(t, path, client.Options{})
			g, err := be.remote(4096)
			if err != nil {
				t.Fatal(err)
			}
			be.stall(true)
			var ctx context.Context
			var cancel context.CancelFunc
			if how == "deadline" {
				ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			defer cancel()
			first := make(chan error, 1)
			go func() {
				_, _, err := c.CompareAndSwap(ctx, g, 0, 1)
				first <- err
			}()
			time.Sleep(10 * time.Millisecond) // the first caller reads
			const others = 3
			rest := make(chan error, others)
			for range others {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					_, _, err := c.CompareAndSwap(ctx, g, 0, 1)
					rest <- err
				}()
			}
			t0 := time.Now()
			// (a machine too slow to see the caller's deadline before the
			// server's own bound passes answers it with that: ETIMEDOUT)
			if err := <-first; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, syscall.ETIMEDOUT) {
				t.Fatalf("first call: %v", err)
			}
			if el := time.Since(t0); el > 2*time.Second {
				t.Fatalf("giving up took %v", el)
			}
			be.stall(false)
			// The calls behind the reader are answered (done, once the
			// owner is back, or ETIMEDOUT after the server's OpTimeout):
			// someone must still read those replies.
			for range others {
				if err := <-rest; err != nil && !errors.Is(err, syscall.ETIMEDOUT) {
					t.Fatalf("a call behind the reader: %v", err)
				}
			}
			if _, _, err := c.CompareAndSwap(context.Background(), g, 0, 1); err != nil {
				t.Fatalf("after: %v", err)
			}
		})
	}
}

// TestSocketEventsWhileIdle: events reach Events while no call waits (the
// listener reads them), and between calls.
func TestSocketEventsWhileIdle(t *testing.T) {
	_, path := start(t, hostif.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watcher := dialSocket(t, path, client.Options{})
	writer := dialSocket(t, path, client.Options{})
	g, err := writer.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watcher.Map(ctx, g, 4096); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Subscribe(ctx, wire.AllEvents); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(5) {
		if _, err := writer.Store64(ctx, g, i); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-watcher.Events():
			if ev.Type != wire.EventUpdated && ev.Type != wire.EventInvalidated {
				t.Fatalf("event %+v", ev)
			}
		case <-ctx.Done():
			t.Fatalf("no event for store %d", i)
		}
		for len(watcher.Events()) > 0 {
			<-watcher.Events()
		}
	}
}

// TestSocketCloseWakesReaders: Close ends the calls of a connection whose
// caller is reading the socket, at once.
func TestSocketCloseWakesReaders(t *testing.T) {
	be, path := start(t, hostif.Options{OpTimeout: 20 * time.Second})
	c := dialSocket(t, path, client.Options{})
	g, err := be.remote(4096)
	if err != nil {
		t.Fatal(err)
	}
	be.stall(true)
	defer be.stall(false)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := c.FetchAdd(context.Background(), g, 1) // no deadline: Timeout (30s) bounds it
			errs <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	t0 := time.Now()
	c.Close()
	for range 4 {
		if err := <-errs; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("call at Close: %v", err)
		}
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Fatalf("Close took %v to end the calls", el)
	}
}
