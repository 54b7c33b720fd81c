package seqpacket

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func TestBatchReadsSeveralMessages(t *testing.T) {
	a, b := pair(t)
	for i := range 5 {
		if _, err := a.Write([]byte(fmt.Sprintf("msg-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := NewBatch(b, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch.Bufs {
		batch.Bufs[i] = make([]byte, 64)
	}
	n, err := batch.Read(4)
	if err != nil || n != 4 {
		t.Fatalf("read %d, %v; want 4 of the 5 queued", n, err)
	}
	for i := range n {
		if got := string(batch.Bufs[i][:batch.Len[i]]); got != fmt.Sprintf("msg-%d", i) {
			t.Fatalf("message %d = %q", i, got)
		}
	}
	if n, err = batch.Read(2); err != nil || n != 1 || string(batch.Bufs[0][:batch.Len[0]]) != "msg-4" {
		t.Fatalf("second read %d %v", n, err)
	}
	// A message longer than its buffer is flagged, not split.
	a.Write(make([]byte, 100))
	if n, err = batch.Read(1); err != nil || n != 1 || batch.Flags[0]&unix.MSG_TRUNC == 0 {
		t.Fatalf("long message: n=%d flags=%#x err=%v", n, batch.Flags[0], err)
	}
	a.Close()
	if _, err := batch.Read(1); !errors.Is(err, ErrEOF) {
		t.Fatalf("read after the peer closed: %v", err)
	}
}

func TestOutboxConcurrentSendersAndDescriptors(t *testing.T) {
	a, b := pair(t)
	out, err := NewOutbox(a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const senders, each = 8, 200
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if err := out.Send([]byte(fmt.Sprintf("%d/%d", s, i)), nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	seen := map[string]bool{}
	last := make([]int, senders)
	for i := range last {
		last[i] = -1
	}
	buf := make([]byte, 64)
	for range senders * each {
		n, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		var s, i int
		fmt.Sscanf(string(buf[:n]), "%d/%d", &s, &i)
		if seen[string(buf[:n])] || i != last[s]+1 {
			t.Fatalf("message %q repeated or out of its sender's order", buf[:n])
		}
		seen[string(buf[:n])], last[s] = true, i
	}
	wg.Wait()

	// Descriptors travel with their message and the outbox closes its copies.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	dup, _ := unix.Dup(int(w.Fd()))
	if err := out.Send([]byte("fd"), []int{dup}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Close(dup); !errors.Is(err, unix.EBADF) {
		t.Fatalf("outbox kept its descriptor open: %v", err)
	}
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := b.ReadMsgUnix(buf, oob)
	if err != nil || string(buf[:n]) != "fd" {
		t.Fatalf("fd message: %q %v", buf[:n], err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights: %v %v", fds, err)
	}
	got := os.NewFile(uintptr(fds[0]), "w")
	got.Write([]byte("x"))
	got.Close()
	one := make([]byte, 1)
	if _, err := r.Read(one); err != nil || one[0] != 'x' {
		t.Fatal("passed descriptor is not the pipe")
	}
}

func TestOutboxQueueFlushAndBoundedWrites(t *testing.T) {
	a, b := pair(t)
	out, err := NewOutbox(a, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := out.Queue([]byte{byte(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := b.Read(make([]byte, 8)); err == nil {
		t.Fatalf("queued message sent before Flush (%d bytes)", n)
	}
	if err := out.Flush(); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Time{})
	buf := make([]byte, 8)
	for i := range 3 {
		if n, err := b.Read(buf); err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("message %d: %v %v", i, buf[:n], err)
		}
	}
	// A peer that never reads: writes fail within the timeout, and so
	// does everything after.
	big := bytes.Repeat([]byte{1}, 60000)
	start := time.Now()
	var werr error
	for werr == nil && time.Since(start) < 10*time.Second {
		werr = out.Send(big, nil)
	}
	if !errors.Is(werr, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked write ended with %v", werr)
	}
	if err := out.Send([]byte{1}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after a failed write: %v", err)
	}
}

// TestOutboxFlushNowNeverWaits: FlushNow returns at once when the peer has
// no room; the Outbox's goroutine delivers the rest, in order, once the
// peer reads, and fails the Outbox (OnFail) when the peer never does.
func TestOutboxFlushNowNeverWaits(t *testing.T) {
	a, b := pair(t)
	out, err := NewOutbox(a, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7}, 30000)
	const msgs = 40 // far beyond the socket's buffer
	start := time.Now()
	for i := range msgs {
		big[0] = byte(i)
		if err := out.Queue(big, nil); err != nil {
			t.Fatal(err)
		}
		if err := out.FlushNow(); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("FlushNow waited %v for a peer that does not read", d)
	}
	buf := make([]byte, len(big))
	for i := range msgs {
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := b.Read(buf)
		if err != nil || n != len(big) || buf[0] != byte(i) {
			t.Fatalf("message %d: %d bytes, first %d: %v", i, n, buf[0], err)
		}
	}

	// a peer that never reads: the Outbox fails within its timeout and
	// says so through OnFail
	c, _ := pair(t)
	out2, err := NewOutbox(c, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	out2.OnFail = func() { close(failed) }
	for range msgs {
		if err := out2.Queue(big, nil); err != nil {
			break
		}
		if err := out2.FlushNow(); err != nil {
			break
		}
	}
	select {
	case <-failed:
	case <-time.After(5 * time.Second):
		t.Fatal("no OnFail within 5s for a peer that never reads")
	}
	if err := out2.Send([]byte{1}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after a failed write: %v", err)
	}
}

// TestBatchReady: Ready is false on a quiet connection, true once a message
// or the peer's close waits, and false again once the message is read.
func TestBatchReady(t *testing.T) {
	a, b := pair(t)
	batch, err := NewBatch(a, 1)
	if err != nil {
		t.Fatal(err)
	}
	batch.Bufs[0] = make([]byte, 64)
	if batch.Ready() {
		t.Fatal("ready with nothing sent")
	}
	if _, err := b.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !batch.Ready() {
		t.Fatal("not ready with a message waiting")
	}
	if n, err := batch.Read(1); err != nil || n != 1 {
		t.Fatalf("read %d: %v", n, err)
	}
	if batch.Ready() {
		t.Fatal("ready after the only message was read")
	}
	b.Close()
	if !batch.Ready() {
		t.Fatal("not ready after the peer closed")
	}
}

// TestBatchReadyAllocatesNothing: Ready runs in the loops of a reader
// that waits for its answers.
func TestBatchReadyAllocatesNothing(t *testing.T) {
	a, _ := pair(t)
	batch, err := NewBatch(a, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { batch.Ready() }); n != 0 {
		t.Fatalf("Ready allocates %v times per call", n)
	}
}
