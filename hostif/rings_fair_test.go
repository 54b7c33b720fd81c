package hostif_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/ring"
	"github.com/aitherion/dpu/hostif/wire"
)

// ringClient is a connection with a ring pair, driven by hand: it submits
// and reaps only when told to.
type ringClient struct {
	*raw
	ring *ring.Client
	buf  []byte
}

func dialRing(t *testing.T, path string, entries uint32) *ringClient {
	t.Helper()
	return attachRing(t, rawDial(t, path), entries)
}

// attachRing says hello on r and asks for a ring pair of entries.
func attachRing(t *testing.T, r *raw, entries uint32) *ringClient {
	t.Helper()
	if h, _, _ := r.hello(1, 1); h.Status != 0 {
		t.Fatalf("hello: status %d", h.Status)
	}
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpRings, ID: 2}, RingEntries: entries})
	h, _, fds := r.recv()
	if h.Status != 0 || len(fds) != 2 {
		t.Fatalf("RINGS: status %d, %d descriptors", h.Status, len(fds))
	}
	rc, err := ring.Attach(fds[0], fds[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return &ringClient{raw: r, ring: rc, buf: make([]byte, rc.Config().MaxMessage())}
}

// fill submits loads of g until the submission ring is full; it returns
// how many it submitted.
func (c *ringClient) fill(t *testing.T, g gva.GVA, id *uint64) int {
	t.Helper()
	n := 0
	for {
		err := c.ring.Submit(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpLoad, ID: *id, GVA: g}, Len: 8}))
		if errors.Is(err, ring.ErrFull) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		*id++
		n++
	}
}

// reap takes every completion waiting and returns how many there were;
// each must be a successful reply.
func (c *ringClient) reap(t *testing.T) int {
	t.Helper()
	n := 0
	for {
		m, ok, err := c.ring.Reap(c.buf)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return n
		}
		h, _, err := wire.DecodeReply(c.buf[:m])
		if err != nil || h.Status != 0 {
			t.Fatalf("ring reply: status %d, %v", h.Status, err)
		}
		n++
	}
}

// serveRings serves rings on a node of a one-node fabric, at a socket in
// dir, with opts (a hand-driven driver: the test calls ServeRings; no
// ring is cut for not reaping); it returns the server, the node and the
// socket's path.
func serveRings(t *testing.T, dir string, opts hostif.Options) (*hostif.Server, *hostiftest.Node, string) {
	t.Helper()
	fab := hostiftest.Start(t, hostiftest.Config{Nodes: 1})
	be := fab.Node(0)
	t.Cleanup(be.Close)
	opts.RingBell = func(int, bool) {}
	opts.WriteTimeout = time.Hour
	srv, err := hostif.NewServer(be, opts)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, hostif.SocketName)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no socket")
		}
		time.Sleep(time.Millisecond)
	}
	return srv, be, path
}

// TestRingSchedulerBoundsEachClientsShare (hole 1, the fairness half): the
// loop's ring scheduler gives a user's rings together at most the per-pass
// bound of submissions in each pass, however many a client keeps waiting,
// and, while a user has no more rings than the bound, serves every ring
// that has one waiting in every pass. The test is the driver: it calls
// ServeRings pass by pass beside two clients of one user (this test's), a
// hostile one that keeps its submission ring (256 entries) full, first
// reaping its completions as fast as they come (a flood) and then never
// reaping (a hog), and an honest one that submits one request before every
// pass. Whatever the machine's speed: the two clients' share of a pass is
// at most the bound (16 here, against the hostile client's 64 requests in
// flight and 256 waiting), and the flood uses it up; the honest client's
// request is taken in the very pass it was submitted before (so it waits
// behind at most one bound's worth of the hostile client's), the hog takes
// nothing once its completion ring is full, and every honest request is
// answered. TestRingSchedulerBoundsEachUsersShare has the clients of two
// users.
func TestRingSchedulerBoundsEachClientsShare(t *testing.T) {
	const bound = 16
	dir, err := os.MkdirTemp("", "hostif")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, be, path := serveRings(t, dir, hostif.Options{})
	hostile := dialRing(t, path, ring.MaxEntries) // opened first: served first in every pass
	honest := dialRing(t, path, 0)
	// After a HELLO was answered: the server has opened its session, in
	// which the backend allocates (before it, the two would race to open it).
	g, err := be.Alloc(ctxT(t), 1, gva.Attr{Mode: 0o666})
	if err != nil {
		t.Fatal(err)
	}
	var hostileID, honestID uint64 = 1000, 1 << 40
	// pass runs one pass of the scheduler after the honest client
	// submitted one request and the hostile one filled its ring (having
	// reaped what came, when it reaps); it returns what each got, and
	// waits for the honest client's reply (so the honest client never has
	// more than one request in flight, and never meets its own bound).
	pass := func(hostileReaps bool) (h, o uint64) {
		t.Helper()
		if hostileReaps {
			hostile.reap(t)
		}
		hostile.fill(t, g, &hostileID)
		if err := honest.ring.Submit(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpLoad, ID: honestID, GVA: g}, Len: 8})); err != nil {
			t.Fatal(err)
		}
		honestID++
		before := srv.RingsTaken()
		srv.ServeRings(bound, time.Now())
		after := srv.RingsTaken()
		if len(before) != 2 || len(after) != 2 {
			t.Fatalf("%d rings, want 2", len(after))
		}
		h, o = after[0]-before[0], after[1]-before[1]
		if o == 1 {
			deadline := time.Now().Add(10 * time.Second)
			for honest.reap(t) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the honest client's request was not answered within 10 s")
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		return h, o
	}
	check := func(phase string, i int, h, o uint64) {
		t.Helper()
		if h+o > bound {
			t.Fatalf("%s, pass %d: the two clients got %d and %d submissions in one pass, more than the bound %d", phase, i, h, o, bound)
		}
		if o != 1 {
			t.Fatalf("%s, pass %d: the honest client's waiting request was taken %d times in the pass, want once", phase, i, o)
		}
	}

	// a flood: the hostile client reaps everything and keeps 256 waiting
	var flood, floodMax, shareMax uint64
	const floodPasses = 200
	for i := range floodPasses {
		h, o := pass(true)
		check("flood", i, h, o)
		flood += h
		floodMax = max(floodMax, h)
		shareMax = max(shareMax, h+o)
	}
	if shareMax != bound {
		t.Fatalf("the two clients got at most %d submissions in a pass: the hostile one did not flood (the bound is %d)", shareMax, bound)
	}
	t.Logf("flood: the hostile client got %d submissions in %d passes (at most %d a pass), the honest one 1 a pass", flood, floodPasses, floodMax)

	// a hog: the hostile client stops reaping; once its completion ring
	// is full and replies wait, it is taken nothing
	var hog uint64
	passes := 0
	deadline := time.Now().Add(30 * time.Second)
	for srv.RingStats().Stalled == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the ring that does not reap was not seen stalled in %d passes", passes)
		}
		h, o := pass(false)
		check("hog", passes, h, o)
		hog += h
		passes++
	}
	for i := range 50 {
		h, o := pass(false)
		check("stalled hog", i, h, o)
		if h != 0 {
			t.Fatalf("stalled hog, pass %d: the client that does not reap got %d submissions", i, h)
		}
	}
	cfg := hostile.ring.Config()
	if limit := uint64(cfg.Entries) + 64; hog > limit {
		t.Fatalf("the client that does not reap got %d submissions after it stopped, more than its completion ring and its requests in flight (%d)", hog, limit)
	}
	t.Logf("hog: the hostile client got %d submissions in %d passes until it stalled, then none; the honest one 1 a pass", hog, passes)
}
