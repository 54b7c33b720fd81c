package client_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

func start(t *testing.T, opts hostif.Options) (*testNode, string) {
	t.Helper()
	fab := hostiftest.Start(t, hostiftest.Config{})
	n := &testNode{fab: fab, be: fab.Node(1)}
	return n, hostiftest.StartServer(t, n.be, opts)
}

// testNode is a host on machine 1 of a fabric of real node cores.
type testNode struct {
	fab *hostiftest.Fabric
	be  *hostiftest.Node
}

// remote allocates size bytes of pages (mode 0666) on machine 2, which
// stall cuts off.
func (n *testNode) remote(size int) (gva.GVA, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.fab.Node(2).Alloc(ctx, (size+4095)/4096, gva.Attr{Mode: 0o666})
}

// stall cuts machine 2 off (true) or mends its wires (false): requests on
// its pages go unanswered meanwhile.
func (n *testNode) stall(on bool) { n.fab.Partition(2, on) }

// TestTimeoutWithoutDeadline: a call whose context has no deadline is
// still bounded, by Options.Timeout.
// Both transports: rings and the socket.
func TestTimeoutWithoutDeadline(t *testing.T) {
	for _, noRings := range []bool{false, true} {
		t.Run(transport(noRings), func(t *testing.T) { testTimeoutWithoutDeadline(t, noRings) })
	}
}

func transport(noRings bool) string {
	if noRings {
		return "socket"
	}
	return "rings"
}

func testTimeoutWithoutDeadline(t *testing.T, noRings bool) {
	be, path := start(t, hostif.Options{OpTimeout: 5 * time.Second})
	// Dial's own context bounds HELLO, not the short Timeout.
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, path, client.Options{Timeout: 200 * time.Millisecond, NoRings: noRings})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := be.remote(4096)
	if err != nil {
		t.Fatal(err)
	}
	be.stall(true)
	start := time.Now()
	_, _, err = c.CompareAndSwap(context.Background(), g, 0, 1)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("stalled call: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("bounded call took %v", el)
	}
	be.stall(false)
	// The late reply is consumed (the slot comes back) and the client
	// keeps working.
	for range 3 * c.Hello().MaxOutstanding {
		if _, _, err := c.CompareAndSwap(context.Background(), g, 7, 7); err != nil {
			t.Fatalf("after the timeout: %v", err)
		}
	}
}

func TestCloseEndsEverything(t *testing.T) {
	for _, noRings := range []bool{false, true} {
		t.Run(transport(noRings), func(t *testing.T) { testCloseEndsEverything(t, noRings) })
	}
}

func testCloseEndsEverything(t *testing.T, noRings bool) {
	be, path := start(t, hostif.Options{})
	ctx := context.Background()
	c, err := client.Dial(ctx, path, client.Options{NoRings: noRings})
	if err != nil {
		t.Fatal(err)
	}
	g, err := be.remote(4096)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Map(ctx, g, 4096)
	if err != nil {
		t.Fatal(err)
	}
	be.stall(true)
	inflight := make(chan error, 1)
	go func() {
		_, err := c.FetchAdd(ctx, g, 1)
		inflight <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	be.stall(false) // the server releases the mapping's ref
	if err := <-inflight; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("call in flight at Close: %v", err)
	}
	if _, err := c.Where(ctx, g); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	if _, err := m.Load64(ctx, 0); !errors.Is(err, client.ErrUnmapped) {
		t.Fatalf("mapping after Close: %v", err)
	}
	if err := m.Unmap(ctx); !errors.Is(err, client.ErrUnmapped) {
		t.Fatalf("unmap after Close: %v", err)
	}
	if _, ok := <-c.Events(); ok {
		t.Fatal("event stream open after Close")
	}
	c.Close() // idempotent
}

func TestDefaultSocket(t *testing.T) {
	t.Setenv("DPU_SOCKET", "")
	t.Setenv("DPU_RUN_DIR", "")
	if p := client.DefaultSocket(); p != "/run/dpu/dpu0.sock" {
		t.Fatalf("default %q", p)
	}
	t.Setenv("DPU_RUN_DIR", "/tmp/x")
	if p := client.DefaultSocket(); p != "/tmp/x/dpu0.sock" {
		t.Fatalf("run dir %q", p)
	}
	t.Setenv("DPU_SOCKET", "/s")
	if p := client.DefaultSocket(); p != "/s" {
		t.Fatalf("socket %q", p)
	}
	_, path := start(t, hostif.Options{})
	t.Setenv("DPU_SOCKET", path)
	c, err := client.Dial(context.Background(), "", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestEventsLostOnTheClient: a reader that does not keep up loses events
// and is told so, and the connection is not held up.
func TestEventsLostOnTheClient(t *testing.T) {
	_, path := start(t, hostif.Options{})
	ctx := context.Background()
	c, err := client.Dial(ctx, path, client.Options{EventQueue: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, _ := c.Alloc(ctx, 4096, 0)
	if _, err := c.Map(ctx, g, 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ctx, wire.EventUpdated.Mask()); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(20) {
		if _, err := c.Store64(ctx, g, i); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-c.Events():
			if ev.Type == wire.EventLost {
				return
			}
		case <-deadline:
			t.Fatal("no EventLost after overflowing the queue")
		}
	}
}
