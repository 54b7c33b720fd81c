package agent_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
)

// TestRingsOnLiveAgents: clients of a live fabric get ring pairs and run
// their data path on them — a CAS chain on a page one hop away and local
// fetch-adds — in every loop mode, with the same results as the socket.
// Poll mode runs one node: two spinning loops in one test process would
// hold both of this machine's cores.
func TestRingsOnLiveAgents(t *testing.T) {
	for _, mode := range []agent.LoopMode{agent.LoopBlocking, agent.LoopAdaptive, agent.LoopPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			n := 2
			if mode == agent.LoopPoll {
				n = 1
			}
			nodes := startLine(t, n, func(c *agent.Config) { c.Loop = mode })
			ctx := ctxT(t, time.Minute)
			c0, c1 := dialHost(t, nodes[0]), dialHost(t, nodes[n-1])
			if !c0.Rings() || !c1.Rings() {
				t.Fatalf("rings: node 0 %v, node 1 %v", c0.Rings(), c1.Rings())
			}
			g, err := c0.Alloc(ctx, 4096, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			for i := range uint64(300) {
				old, swapped, err := c1.CompareAndSwap(ctx, g, i, i+1)
				if err != nil || !swapped || old != i {
					t.Fatalf("cas %d across %d nodes: old %d swapped %v: %v", i, n, old, swapped, err)
				}
				if _, err := c0.FetchAdd(ctx, g.WithOffset(8), 1); err != nil {
					t.Fatal(err)
				}
			}
			plain, err := client.Dial(ctx, nodes[0].hostSocket(), client.Options{NoRings: true})
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			if plain.Rings() {
				t.Fatal("NoRings client got rings")
			}
			for off, want := range map[uint16]uint64{0: 300, 8: 300} {
				if v, err := plain.Load64(ctx, g.WithOffset(off)); err != nil || v != want {
					t.Fatalf("word at %d: %d, want %d: %v", off, v, want, err)
				}
			}
		})
	}
}

// sqProducerOffset is where the submission ring's producer index lives in
// the ring memfd (hostif/PROTOCOL.md §12).
const sqProducerOffset = 128

// TestHostileRing: a process that scribbles over its ring's indices loses
// its own connection and nothing else: another client's requests go on.
func TestHostileRing(t *testing.T) {
	nodes := startLine(t, 1, nil)
	ctx := ctxT(t, time.Minute)
	good := dialHost(t, nodes[0])
	g, err := good.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: nodes[0].hostSocket(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	in := make([]byte, wire.MaxMessage)
	send := func(r *wire.Request) (int, []int) {
		t.Helper()
		return rawCall(t, raw, in, r, 30*time.Second)
	}
	send(&wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})
	n, fds := send(&wire.Request{Header: wire.Header{Op: wire.OpRings, ID: 2}})
	if n < wire.HeaderLen || in[4] != 0 || len(fds) != 2 {
		t.Fatalf("RINGS reply: %d bytes, status %d, %d descriptors", n, in[4], len(fds))
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fds[0], 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	// the submission producer index far beyond the ring, then the bell
	binary.LittleEndian.PutUint32(mem[sqProducerOffset:], 1<<30)
	if _, err := unix.Write(fds[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := raw.Read(in); err == nil {
		t.Fatal("the agent kept a connection whose ring is corrupt")
	}
	for i := range uint64(50) {
		if _, swapped, err := good.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
			t.Fatalf("other client's cas %d after the hostile ring: %v", i, err)
		}
	}
}

// TestRingStoresFromManyGoroutines: stores of different bytes submitted at
// once on one ring pair (several in one pass of the loop) each write their
// own bytes.
func TestRingStoresFromManyGoroutines(t *testing.T) {
	nodes := startLine(t, 1, nil)
	ctx := ctxT(t, time.Minute)
	c := dialHost(t, nodes[0])
	if !c.Rings() {
		t.Fatal("no rings")
	}
	g, err := c.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	const writers, rounds, size = 16, 40, 64
	pattern := func(w, r int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(w*31 + r*7 + i)
		}
		return b
	}
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for r := range rounds {
				if _, err := c.Store(ctx, g.WithOffset(uint16(w*size)), pattern(w, r)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	plain, err := client.Dial(ctx, nodes[0].hostSocket(), client.Options{NoRings: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for w := range writers {
		got := make([]byte, size)
		if _, err := plain.Load(ctx, g.WithOffset(uint16(w*size)), got); err != nil {
			t.Fatal(err)
		}
		if want := pattern(w, rounds-1); string(got) != string(want) {
			t.Fatalf("writer %d's slot holds %x, want %x", w, got, want)
		}
	}
}

// TestClientThatDoesNotReadHurtsNoOne: a client that sends requests on a
// page one hop away and never reads the replies fills its socket; the
// loop, which delivers the answers from the other node, must not wait for
// it: another client's one-hop requests go on at their usual pace.
func TestClientThatDoesNotReadHurtsNoOne(t *testing.T) {
	nodes := startLine(t, 2, nil)
	ctx := ctxT(t, time.Minute)
	owner, good := dialHost(t, nodes[1]), dialHost(t, nodes[0])
	g, err := owner.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: nodes[0].hostSocket(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Read(make([]byte, wire.MaxMessage)); err != nil {
		t.Fatal(err)
	}
	// fetch-adds, which run at the owner (their answers come back through
	// the loop), never read: a few hundred replies fill the socket
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for id := uint64(2); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = raw.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = raw.Write(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpFetchAdd, ID: id, GVA: g.WithOffset(64)}, Delta: 1}))
		}
	}()
	time.Sleep(time.Second) // the hostile client's socket fills
	for i := range uint64(100) {
		start := time.Now()
		if _, swapped, err := good.CompareAndSwap(ctx, g.WithOffset(8), i, i+1); err != nil || !swapped {
			t.Fatalf("cas %d: %v", i, err)
		}
		// the outbox's bound is 5 s: a loop that waited for the hostile
		// client would show it here
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("cas %d took %v while another client did not read", i, d)
		}
	}
}
