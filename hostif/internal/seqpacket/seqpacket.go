// Package seqpacket moves batches of SOCK_SEQPACKET messages with one system
// call: recvmmsg(2) into a Batch of buffers, sendmmsg(2) from an Outbox that
// whoever sends first drains for everybody (flat combining). Both wait on
// the Go netpoller through syscall.RawConn, so they honour the connection's
// deadlines.
//
// It owns the unsafe code of the host interface's sockets and nothing else:
// it never interprets message contents.
package seqpacket

import (
	"errors"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of linux/socket.h.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// Conn is the socket a Batch reads and an Outbox writes: a
// *net.UnixConn, or a socket of the caller's own that waits its own way.
type Conn interface {
	SyscallConn() (syscall.RawConn, error)
	SetWriteDeadline(t time.Time) error
}

// Batch receives up to len(Bufs) messages per call.
type Batch struct {
	rc    syscall.RawConn
	Bufs  [][]byte // message buffers; the caller may swap them between reads
	OOB   [][]byte // control buffers (nil entries receive none)
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	Len   []int // per message: bytes received
	OOBN  []int // per message: control bytes received
	Flags []int // per message: MSG_TRUNC, MSG_CTRUNC, ...

	ready  bool             // Ready's answer, set by poll
	pollFn func(fd uintptr) // poll, allocated once (Ready runs in spin loops)
}

// NewBatch returns a Batch of n message slots for uc; the caller fills
// Bufs (and OOB if it wants descriptors).
func NewBatch(uc Conn, n int) (*Batch, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := &Batch{rc: rc, Bufs: make([][]byte, n), OOB: make([][]byte, n), hdrs: make([]mmsghdr, n),
		iovs: make([]unix.Iovec, n), Len: make([]int, n), OOBN: make([]int, n), Flags: make([]int, n)}
	b.pollFn = b.poll
	return b, nil
}

// Ready reports whether a message (or the peer's close) waits to be read,
// without waiting (ppoll(2) with a zero timeout).
func (b *Batch) Ready() bool {
	b.ready = false
	_ = b.rc.Control(b.pollFn)
	return b.ready
}

func (b *Batch) poll(fd uintptr) {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	var zero unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	b.ready = e == 0 && n > 0
}

// ErrEOF is returned by Read when the peer closed the connection.
var ErrEOF = errors.New("seqpacket: connection closed by peer")

// Read receives between 1 and max messages (max <= len(Bufs)), waiting for
// the first. It returns how many arrived.
func (b *Batch) Read(max int) (int, error) {
	max = min(max, len(b.Bufs))
	for i := range max {
		b.iovs[i].Base = unsafe.SliceData(b.Bufs[i])
		b.iovs[i].SetLen(len(b.Bufs[i]))
		b.hdrs[i] = mmsghdr{}
		b.hdrs[i].hdr.Iov = &b.iovs[i]
		b.hdrs[i].hdr.SetIovlen(1)
		if len(b.OOB[i]) > 0 {
			b.hdrs[i].hdr.Control = unsafe.SliceData(b.OOB[i])
			b.hdrs[i].hdr.SetControllen(len(b.OOB[i]))
		}
	}
	var got int
	var opErr error
	err := b.rc.Read(func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(max),
			unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		if e != 0 {
			opErr = e
		}
		got = int(r)
		return true
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return 0, err
	}
	if got == 0 {
		return 0, ErrEOF
	}
	for i := range got {
		b.Len[i] = int(b.hdrs[i].n)
		b.OOBN[i] = int(b.hdrs[i].hdr.Controllen)
		b.Flags[i] = int(b.hdrs[i].hdr.Flags)
		if b.Len[i] == 0 {
			// A zero-length message ends the batch: SOCK_SEQPACKET
			// reports the peer's close that way.
			if i == 0 {
				return 0, ErrEOF
			}
			return i, nil
		}
	}
	return got, nil
}

// Outbox sends messages in batches. Send queues a copy of a message; the
// first sender that finds nobody writing becomes the writer and sends
// everything queued (its own message and whatever others queue meanwhile)
// with sendmmsg, then returns. Descriptors given to Send are owned by the
// Outbox from then on and closed once sent (or dropped).
type Outbox struct {
	uc      Conn
	rc      syscall.RawConn
	timeout time.Duration

	// OnFail, when set, is called (holding no lock of the Outbox) when a
	// write FlushNow left to the Outbox's goroutine fails.
	OnFail func()

	// Used by the writer only.
	hdrs []mmsghdr
	iovs []unix.Iovec

	mu      sync.Mutex
	writing bool
	err     error
	q       queue // being filled
	spare   queue // the last batch written, for reuse
}

type queue struct {
	data  []byte
	msgs  []span
	fds   []int
	cmsgs []byte
}

type span struct {
	off, n       int
	cmsgOff, cmN int
	fdOff, fdN   int
}

// NewOutbox returns an Outbox writing to uc. A write that cannot complete
// within timeout (the peer does not read) fails, and so does every Send
// after it.
func NewOutbox(uc Conn, timeout time.Duration) (*Outbox, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &Outbox{uc: uc, rc: rc, timeout: timeout}, nil
}

// ErrClosed is returned by Send after a write failed.
var ErrClosed = errors.New("seqpacket: outbox failed")

// Send queues msg (copied) with fds and, if no one is writing, writes the
// queue. It returns the write error if it was the writer, ErrClosed if an
// earlier write failed, else nil.
func (o *Outbox) Send(msg []byte, fds []int) error {
	if err := o.Queue(msg, fds); err != nil {
		return err
	}
	return o.Flush()
}

// Queue queues msg (copied) with fds without writing: a later Flush or
// Send writes it.
func (o *Outbox) Queue(msg []byte, fds []int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		closeAll(fds)
		return ErrClosed
	}
	o.q.add(msg, fds)
	return nil
}

// Flush writes the queue unless someone is writing already (who will then
// write it).
func (o *Outbox) Flush() error { return o.flush(true) }

// FlushNow is Flush for a caller that must not wait, such as a driver's
// loop serving many connections: what the socket takes at once is sent;
// when the peer has no room for the rest, a goroutine of the Outbox
// finishes the write (bounded by the timeout, like Flush) while FlushNow
// returns. A write that fails there fails the Outbox and calls OnFail.
func (o *Outbox) FlushNow() error { return o.flush(false) }

func (o *Outbox) flush(mayWait bool) error {
	o.mu.Lock()
	if o.err != nil {
		o.mu.Unlock()
		return ErrClosed
	}
	if o.writing || len(o.q.msgs) == 0 {
		o.mu.Unlock()
		return nil
	}
	o.writing = true
	for {
		batch := o.q
		o.q, o.spare = o.spare.reset(), queue{}
		o.mu.Unlock()
		sent, err := o.write(&batch, 0, mayWait)
		if err == nil && sent < len(batch.msgs) { // FlushNow, and no room
			go o.finish(batch, sent)
			return nil
		}
		closeAll(batch.fds)
		o.mu.Lock()
		o.spare = batch
		if err != nil {
			o.fail(err)
			o.mu.Unlock()
			return err
		}
		if len(o.q.msgs) == 0 {
			o.writing = false
			o.mu.Unlock()
			return nil
		}
	}
}

// finish writes the rest of a batch FlushNow could not (from message
// sent on), waiting for room, then whatever was queued meanwhile.
func (o *Outbox) finish(batch queue, sent int) {
	_, err := o.write(&batch, sent, true)
	closeAll(batch.fds)
	o.mu.Lock()
	o.spare = batch
	if err != nil {
		o.fail(err)
		o.mu.Unlock()
		if o.OnFail != nil {
			o.OnFail()
		}
		return
	}
	o.writing = false
	more := len(o.q.msgs) > 0
	o.mu.Unlock()
	if more && o.Flush() != nil && o.OnFail != nil {
		o.OnFail()
	}
}

// fail records err and drops what is queued (under mu).
func (o *Outbox) fail(err error) {
	o.err = err
	o.writing = false
	closeAll(o.q.fds)
	o.q = o.q.reset()
}

func (q *queue) add(msg []byte, fds []int) {
	s := span{off: len(q.data), n: len(msg), fdOff: len(q.fds), fdN: len(fds), cmsgOff: len(q.cmsgs)}
	q.data = append(q.data, msg...)
	if len(fds) > 0 {
		q.fds = append(q.fds, fds...)
		rights := unix.UnixRights(fds...)
		s.cmN = len(rights)
		q.cmsgs = append(q.cmsgs, rights...)
	}
	q.msgs = append(q.msgs, s)
}

func (q queue) reset() queue {
	return queue{data: q.data[:0], msgs: q.msgs[:0], fds: q.fds[:0], cmsgs: q.cmsgs[:0]}
}

// write sends every message of q, in order. The first attempt does not
// wait; only a write that would block arms the deadline and waits.
func (o *Outbox) write(q *queue, sent int, mayWait bool) (int, error) {
	n := len(q.msgs)
	if cap(o.hdrs) < n {
		o.hdrs, o.iovs = make([]mmsghdr, n), make([]unix.Iovec, n)
	}
	hdrs, iovs := o.hdrs[:n], o.iovs[:n]
	for i, s := range q.msgs {
		iovs[i].Base = &q.data[s.off]
		iovs[i].SetLen(s.n)
		hdrs[i] = mmsghdr{}
		hdrs[i].hdr.Iov = &iovs[i]
		hdrs[i].hdr.SetIovlen(1)
		if s.cmN > 0 {
			hdrs[i].hdr.Control = &q.cmsgs[s.cmsgOff]
			hdrs[i].hdr.SetControllen(s.cmN)
		}
	}
	wait := false
	for sent < n {
		var opErr error
		blocked := false
		err := o.rc.Write(func(fd uintptr) bool {
			r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[sent])), uintptr(n-sent),
				unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
			switch {
			case e == unix.EAGAIN || e == unix.EINTR:
				blocked = true
				return !wait // without a deadline yet: go arm one, then wait
			case e != 0:
				opErr = e
				return true
			}
			sent += int(r)
			return sent == n || !wait
		})
		if err == nil {
			err = opErr
		}
		if err != nil {
			return sent, err
		}
		if (blocked || sent < n) && !wait {
			if !mayWait {
				return sent, nil
			}
			wait = true
			_ = o.uc.SetWriteDeadline(time.Now().Add(o.timeout))
		}
	}
	if wait {
		_ = o.uc.SetWriteDeadline(time.Time{})
	}
	return sent, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
