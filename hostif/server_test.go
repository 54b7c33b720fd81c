package hostif_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// raw is a hand-driven connection for testing the server's side of the
// protocol.
type raw struct {
	t  testing.TB
	uc *net.UnixConn
}

func rawDial(t testing.TB, path string) *raw {
	t.Helper()
	nc, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, uc: nc.(*net.UnixConn)}
	t.Cleanup(func() { r.uc.Close() })
	return r
}

// hello performs the handshake and returns the reply.
func (r *raw) hello(min, max uint16) (wire.Header, wire.Hello, []int) {
	r.t.Helper()
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: min, Max: max})
	h, body, fds := r.recv()
	var hl wire.Hello
	if err := hl.Decode(body); err != nil {
		r.t.Fatalf("hello reply: %v", err)
	}
	return h, hl, fds
}

func (r *raw) send(req *wire.Request) { r.sendBytes(wire.AppendRequest(nil, req)) }

func (r *raw) sendBytes(b []byte) {
	r.t.Helper()
	if _, err := r.uc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// recv reads one message within 10s.
func (r *raw) recv() (wire.Header, []byte, []int) {
	r.t.Helper()
	h, body, fds, err := r.tryRecv(10 * time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	return h, body, fds
}

func (r *raw) tryRecv(d time.Duration) (wire.Header, []byte, []int, error) {
	buf := make([]byte, wire.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(64*4))
	_ = r.uc.SetReadDeadline(time.Now().Add(d))
	n, oobn, _, _, err := r.uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return wire.Header{}, nil, nil, err
	}
	if n == 0 {
		return wire.Header{}, nil, nil, io.EOF
	}
	var fds []int
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			f, _ := unix.ParseUnixRights(&m)
			fds = append(fds, f...)
		}
	}
	r.t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	h, body, err := wire.DecodeReply(buf[:n])
	return h, body, fds, err
}

// closed reports whether the server ended the connection (within 10s).
func (r *raw) closed() bool {
	for {
		_, _, _, err := r.tryRecv(10 * time.Second)
		if err == nil {
			continue
		}
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	}
}

func TestSocketFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, hostif.SocketName)
	// A stale socket file (nobody listening) is replaced.
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()

	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	defer be.Close()
	srv, err := hostif.NewServer(be, hostif.Options{SocketGroup: "65534"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	waitFor(t, "socket", func() bool {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			return false
		}
		return c.Close() == nil
	})

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want socket 0660", fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Getuid() == 0 && st.Gid != 65534 {
		t.Fatalf("socket group %d, want 65534", st.Gid)
	}

	// A second server on the live socket refuses to take it over.
	srv2, _ := hostif.NewServer(be, hostif.Options{})
	if err := srv2.ListenAndServe(context.Background(), path); !errors.Is(err, hostif.ErrSocketInUse) {
		t.Fatalf("second server: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if err := srv.ListenAndServe(context.Background(), path); !errors.Is(err, hostif.ErrServed) {
		t.Fatalf("serving twice: %v", err)
	}
}

func TestVersionNegotiation(t *testing.T) {
	n := startNode(t, hostiftest.NewFabric(), 7, hostif.Options{})

	r := rawDial(t, n.path)
	h, hl, fds := r.hello(1, 9)
	if h.Status != 0 || hl.Version != 1 || hl.Min != 1 || hl.Max != 1 || hl.Machine != 7 || len(fds) != 1 {
		t.Fatalf("hello 1..9: %+v %+v fds %d", h, hl, len(fds))
	}

	r = rawDial(t, n.path)
	h, hl, fds = r.hello(2, 9)
	if syscall.Errno(h.Status) != syscall.EPROTONOSUPPORT || hl.Version != 0 || hl.Min != 1 || hl.Max != 1 || len(fds) != 0 {
		t.Fatalf("hello 2..9: %+v %+v", h, hl)
	}
	if !r.closed() {
		t.Fatal("connection stays open after a failed hello")
	}
}

func TestGarbage(t *testing.T) {
	n := startNode(t, hostiftest.NewFabric(), 1, hostif.Options{MaxGarbage: 7})
	good := dial(t, n.path)
	ctx := ctxT(t)
	g, err := good.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}

	r := rawDial(t, n.path)
	// Before HELLO, any other request is refused.
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpWhere, ID: 5, GVA: g}})
	if h, _, _ := r.recv(); syscall.Errno(h.Status) != syscall.EINVAL || h.ID != 5 {
		t.Fatalf("request before hello: %+v", h)
	}
	if h, _, _ := r.hello(1, 1); h.Status != 0 {
		t.Fatalf("hello: %+v", h)
	}
	valid := wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpCAS, ID: 77, GVA: g}, Desired: 1})
	garbage := [][]byte{
		{1, 2, 3},                                // shorter than a header
		append(valid[:len(valid):len(valid)], 0), // body too long
		func() []byte { b := append([]byte(nil), valid...); b[0] = 200; return b }(), // unknown op
		func() []byte { b := append([]byte(nil), valid...); b[2] = 2; return b }(),   // a reply, not a request
		func() []byte { b := append([]byte(nil), valid...); b[24] |= 3; return b }(), // CAS not 8-byte aligned
		make([]byte, wire.MaxMessage+100),                                            // longer than any request
	}
	for i, b := range garbage {
		r.sendBytes(b)
		h, text, _ := r.recv()
		if syscall.Errno(h.Status) != syscall.EINVAL || h.Kind != wire.KindReply || len(text) == 0 {
			t.Fatalf("garbage %d: %+v %q", i, h, text)
		}
		if i > 0 && i < 5 && h.ID != 77 {
			t.Fatalf("garbage %d: reply id %d, want 77", i, h.ID)
		}
		// Every other client keeps working.
		if _, _, err := good.CompareAndSwap(ctx, g, 0, 0); err != nil {
			t.Fatalf("good client after garbage %d: %v", i, err)
		}
	}
	// A request carrying descriptors is garbage too (the eighth: too many).
	rights := unix.UnixRights(int(os.Stdin.Fd()))
	if _, _, err := r.uc.WriteMsgUnix(valid, rights, nil); err != nil {
		t.Fatal(err)
	}
	if !r.closed() {
		t.Fatal("client still connected after repeated garbage")
	}
	if old, _, err := good.CompareAndSwap(ctx, g, 0, 5); err != nil || old != 0 {
		t.Fatalf("good client after the disconnect: %d %v", old, err)
	}
	if v, err := good.Load64(ctx, g); err != nil || v != 5 {
		t.Fatalf("garbage changed the page: %d %v", v, err)
	}
}

// remotePage allocates a page (mode 0666, root's) on machine home of fab,
// as no host connection of it: a page the other machines reach over the
// fabric.
func remotePage(t testing.TB, fab *hostiftest.Fabric, home gva.MachineIndex) gva.GVA {
	t.Helper()
	g, err := fab.Node(home).Alloc(ctxT(t), 1, gva.Attr{Mode: 0o666})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestOutstandingBound: a connection never has more requests in the
// backend than its bound, also when none of them is answered (the page's
// owner is cut off).
func TestOutstandingBound(t *testing.T) {
	fab := hostiftest.NewFabric()
	n := startNode(t, fab, 1, hostif.Options{MaxOutstanding: 4, OpTimeout: 300 * time.Millisecond})
	c := dial(t, n.path)
	g := remotePage(t, fab, 2)
	if _, err := c.Load64(ctxT(t), g); err != nil { // the server learns its attributes
		t.Fatal(err)
	}
	if c.Hello().MaxOutstanding != 4 {
		t.Fatalf("hello says %d outstanding", c.Hello().MaxOutstanding)
	}
	r := rawDial(t, n.path)
	r.hello(1, 1)
	base := n.be.Calls()
	fab.Partition(2, true)
	for i := range 10 {
		r.send(&wire.Request{Header: wire.Header{Op: wire.OpFetchAdd, ID: uint64(100 + i), GVA: g}, Delta: 1})
	}
	waitFor(t, "4 calls in flight", func() bool { return n.be.Calls()-base >= 4 })
	time.Sleep(50 * time.Millisecond)
	if got := n.be.Calls() - base; got != 4 {
		t.Fatalf("%d backend calls in flight, want the bound 4", got)
	}
	timedOut, ok := 0, 0
	seen := map[uint64]bool{}
	for i := range 10 {
		if i == 4 { // the first four timed out: the owner comes back
			fab.Partition(2, false)
		}
		h, _, _ := r.recv()
		seen[h.ID] = true
		switch syscall.Errno(h.Status) {
		case syscall.ETIMEDOUT:
			timedOut++
		case 0:
			ok++
		default:
			t.Fatalf("reply %+v", h)
		}
	}
	if len(seen) != 10 || timedOut < 4 || ok+timedOut != 10 {
		t.Fatalf("replies: %d distinct, %d timed out, %d ok", len(seen), timedOut, ok)
	}
	// a timed-out add's outcome is unknown: its frame may still arrive
	v, err := c.Load64(ctxT(t), g)
	if err != nil || v < uint64(ok) || v > uint64(ok+timedOut) {
		t.Fatalf("counter %d after %d successful and %d timed-out adds (%v)", v, ok, timedOut, err)
	}
}

// TestPipelinedOutOfOrder: replies are matched by id, and a slow request
// (a LOCK waiting for another process) does not hold up later ones.
func TestPipelinedOutOfOrder(t *testing.T) {
	n := startNode(t, hostiftest.NewFabric(), 1, hostif.Options{})
	holder := dial(t, n.path)
	ctx := ctxT(t)
	g, err := holder.Alloc(ctx, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	r := rawDial(t, n.path)
	r.hello(1, 1)
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpLock, ID: 10, GVA: g}, TimeoutMS: 5000})
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpFetchAdd, ID: 11, GVA: g.WithOffset(8)}, Delta: 3})
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpLoad, ID: 12, GVA: g.WithOffset(8)}, Len: 8})
	got := map[uint64]bool{}
	for range 2 {
		h, body, _ := r.recv()
		if h.Status != 0 || (h.ID != 11 && h.ID != 12) {
			t.Fatalf("reply %+v before the lock was free", h)
		}
		if h.ID == 12 && binary.LittleEndian.Uint64(body[8:]) != 3 && binary.LittleEndian.Uint64(body[8:]) != 0 {
			t.Fatalf("load body %x", body)
		}
		got[h.ID] = true
	}
	if err := holder.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := r.recv(); h.ID != 10 || h.Status != 0 || h.Op != wire.OpLock {
		t.Fatalf("lock reply %+v", h)
	}
}

// TestBackendCallsAreBounded: every request is answered within its bound
// when the page's owner never answers (it is cut off), and the node serves
// again once it is back.
func TestBackendCallsAreBounded(t *testing.T) {
	fab := hostiftest.NewFabric()
	n := startNode(t, fab, 1, hostif.Options{OpTimeout: 100 * time.Millisecond, LockTimeout: 100 * time.Millisecond})
	c := dial(t, n.path)
	ctx := ctxT(t)
	g := remotePage(t, fab, 2)
	if _, err := c.Load64(ctx, g); err != nil {
		t.Fatal(err)
	}
	fab.Partition(2, true)
	_, _, err := c.CompareAndSwap(ctx, g, 0, 1)
	wantErrno(t, err, syscall.ETIMEDOUT)
	wantErrno(t, c.Lock(ctx, g, 0), syscall.ETIMEDOUT)
	_, err = c.Map(ctx, g, 4096)
	wantErrno(t, err, syscall.ETIMEDOUT)
	fab.Partition(2, false)
	if _, err := c.Map(ctx, g, 4096); err != nil {
		t.Fatalf("map after the owner came back: %v", err)
	}
}

// TestReplicaFileIsReadOnly: the descriptors a client receives cannot be
// written, mapped writable, resized or resealed.
func TestReplicaFileIsReadOnly(t *testing.T) {
	n := startNode(t, hostiftest.NewFabric(), 1, hostif.Options{})
	c := dial(t, n.path)
	g, err := c.Alloc(ctxT(t), 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rawDial(t, n.path)
	_, _, statusFDs := r.hello(1, 1)
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpMap, ID: 2, GVA: g}, Bytes: 4096})
	h, _, fds := r.recv()
	if h.Status != 0 || len(fds) != 1 {
		t.Fatalf("map: %+v, %d fds", h, len(fds))
	}
	for _, fd := range []int{fds[0], statusFDs[0]} {
		if _, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			t.Fatal("replica file mapped writable")
		}
		if _, err := unix.Pwrite(fd, []byte{1}, 0); err == nil {
			t.Fatal("replica file written")
		}
		if err := unix.Ftruncate(fd, 0); err == nil {
			t.Fatal("replica file truncated")
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); err == nil {
			t.Fatal("replica file resealed")
		}
		m, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatalf("read-only map: %v", err)
		}
		if err := unix.Mprotect(m, unix.PROT_READ|unix.PROT_WRITE); err == nil {
			t.Fatal("read-only map made writable")
		}
		unix.Munmap(m)
	}
}

func TestShutdownReleases(t *testing.T) {
	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	defer be.Close()
	path := filepath.Join(t.TempDir(), hostif.SocketName)
	srv, _ := hostif.NewServer(be, hostif.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	waitFor(t, "socket", func() bool { _, err := os.Stat(path); return err == nil })
	c := dial(t, path)
	g, err := c.Alloc(ctxT(t), 2*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Map(ctxT(t), g, 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.Lock(ctxT(t), wire.PageAt(g, 1), 0); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fab.Refs(g, 1) != 0 {
		t.Fatal("ref survives shutdown")
	}
	if _, locked := fab.LockedBy(wire.PageAt(g, 1)); locked {
		t.Fatal("lock survives shutdown")
	}
	if _, err := c.Where(ctxT(t), g); err == nil {
		t.Fatal("client still served after shutdown")
	}
}

func TestCapacityAndSlots(t *testing.T) {
	fab := hostiftest.Start(t, hostiftest.Config{Pages: 8})
	n := startNode(t, fab, 1, hostif.Options{StatusSlots: 4})
	c := dial(t, n.path)
	ctx := ctxT(t)
	_, err := c.Alloc(ctx, 9*4096, 0)
	wantErrno(t, err, syscall.ENOMEM)
	g, err := c.Alloc(ctx, 4*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Map(ctx, g, 4*4096)
	wantErrno(t, err, syscall.ENOSPC)
	for i := range 4 {
		if r := fab.Refs(wire.PageAt(g, i), 1); r != 0 {
			t.Fatalf("failed map left ref on page %d", i)
		}
	}
	if _, err := c.Map(ctx, g, 3*4096); err != nil {
		t.Fatalf("map within the table: %v", err)
	}
	if _, err = c.Alloc(ctx, 4096, 0); err != nil {
		t.Fatalf("alloc within capacity: %v", err)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAllocOfHugePagesIsRefused: an ALLOC asking for huge pages is
// answered EOPNOTSUPP (this server makes none), on whichever path serves
// it, and the connection goes on: a plain ALLOC after it succeeds.
func TestAllocOfHugePagesIsRefused(t *testing.T) {
	fab := hostiftest.NewFabric()
	n := startNode(t, fab, 1, hostif.Options{})
	r := rawDial(t, n.path)
	r.hello(1, 1)
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpAlloc, ID: 7}, Bytes: 2 << 20, Flags: wire.AllocHuge})
	h, body, _ := r.recv()
	if h.ID != 7 || syscall.Errno(h.Status) != syscall.EOPNOTSUPP {
		t.Fatalf("huge ALLOC: reply %+v (%q), want EOPNOTSUPP", h, body)
	}
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpAlloc, ID: 8}, Bytes: 4096})
	if h, body, _ := r.recv(); h.ID != 8 || h.Status != 0 || h.GVA.IsZero() {
		t.Fatalf("ALLOC after a refused huge one: reply %+v (%q)", h, body)
	}
}
