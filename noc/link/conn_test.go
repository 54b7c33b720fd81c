package link_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

// connConfig suits goroutine tests under the race detector: quick
// retransmission, a dead interval far beyond any scheduling hiccup.
func connConfig(session uint64) link.Config {
	c := link.DefaultConfig()
	c.Session = session
	c.RTO = 2 * time.Millisecond
	c.MaxRTO = 50 * time.Millisecond
	c.HeartbeatInterval = 20 * time.Millisecond
	c.DeadInterval = 5 * time.Second
	return c
}

func newConnPair(t *testing.T, mc mem.Config, sa, sb uint64) (a, b *link.Conn) {
	t.Helper()
	pa, pb, err := mem.Pair(mc)
	if err != nil {
		t.Fatal(err)
	}
	if a, err = link.NewConn(pa, connConfig(sa)); err != nil {
		t.Fatal(err)
	}
	if b, err = link.NewConn(pb, connConfig(sb)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return a, b
}

// TestConnStreamLossy runs the 10,000-message requirement with real
// goroutines and the real clock: each side sends and receives concurrently.
func TestConnStreamLossy(t *testing.T) {
	a, b := newConnPair(t, lossy(7), 71, 72)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	ab := newStream(t, "a->b", n, func(i int) int { return 8 + i*13%200 })
	ba := newStream(t, "b->a", n, func(i int) int { return 8 + i*7%100 })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	send := func(c *link.Conn, s *stream) {
		defer wg.Done()
		for i := range n {
			if err := c.Send(ctx, s.message(i)); err != nil {
				errs <- err
				return
			}
		}
	}
	recv := func(c *link.Conn, s *stream) {
		defer wg.Done()
		buf := make([]byte, 1<<16)
		for !s.done() {
			k, err := c.Receive(ctx, buf)
			if err == nil {
				err = s.verify(buf[:k])
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}
	// Each stream's sender and verifier own different fields of it.
	abSend := newStream(t, "a->b", n, ab.size)
	baSend := newStream(t, "b->a", n, ba.size)
	wg.Add(4)
	go send(a, abSend)
	go send(b, baSend)
	go recv(b, ab)
	go recv(a, ba)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Downs+sb.Downs != 0 {
		t.Errorf("link went down: a %+v b %+v", sa, sb)
	}
	if sa.Retransmits == 0 {
		t.Errorf("the wire was not lossy: %+v", sa)
	}
	t.Logf("a: %+v", sa)
	t.Logf("b: %+v", sb)
}

func TestConnCloseWakesWaiters(t *testing.T) {
	pa, pb, err := mem.Pair(mem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	a, err := link.NewConn(pa, connConfig(1)) // its peer never answers
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	go func() { _, err := a.Receive(context.Background(), make([]byte, 64)); got <- err }()
	go func() { got <- a.Send(context.Background(), []byte("x")) }() // waits: link down
	time.Sleep(10 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-got:
			if !errors.Is(err, link.ErrClosed) {
				t.Errorf("waiter got %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake a waiter")
		}
	}
	if _, ok := <-a.Events(); ok {
		t.Error("events channel open after Close")
	}
	if err := pa.WriteDatagram([]byte("x")); err == nil {
		t.Error("port still open after Close")
	}
}

// TestConnReadsOnlyDatagramsThatCame: a Conn over a port it polls (mem)
// hands its endpoint only the datagrams the port had: a stream of
// messages both ways leaves no malformed or bad-checksum input on either
// side, and every message arrives once, in order.
func TestConnReadsOnlyDatagramsThatCame(t *testing.T) {
	a, b := newConnPair(t, mem.Config{}, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	for _, pair := range [][2]*link.Conn{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := from.Send(ctx, []byte{byte(i), 1, 2, 3}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for i := range n {
				m, err := to.Receive(ctx, buf)
				if err != nil || m != 4 || buf[0] != byte(i) {
					t.Errorf("message %d: %d bytes %v (%v)", i, m, buf[:m], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range []*link.Conn{a, b} {
		if s := c.Stats(); s.Malformed != 0 || s.CRCErrors != 0 || s.PortReadErrors != 0 {
			t.Fatalf("%d malformed, %d bad checksums, %d read errors of %d datagrams received", s.Malformed, s.CRCErrors, s.PortReadErrors, s.RxDatagrams)
		}
	}
}
