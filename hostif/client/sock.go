package client

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sock is the connection's socket once HELLO is done, detached from the Go
// runtime's network poller: a duplicate of the descriptor, the net.UnixConn
// closed. A socket the runtime polls wakes the runtime's poller thread for
// every reply, which then wakes the goroutine waiting for it: two or three
// thread wake-ups per round trip where a blocking recv(2) in the caller's
// thread has one. A detached socket wakes only who waits for it in poll(2):
// the caller holding the read turn (see Client.sockWait), or the event
// listener while no call waits.
//
// sock is the seqpacket.Conn of the client's Batch and Outbox. Its Read
// calls its function once and never waits (errAgain when the function
// found nothing): readers wait with waitIn, bounded as each sees fit. Its
// Write waits for room in poll(2), up to the write deadline.
//
// Every system call on the descriptor holds mu for reading; close shuts
// the socket down (which wakes every poll on it), then takes mu to close
// the descriptor, so a descriptor number is never used after it is closed.
type sock struct {
	mu     sync.RWMutex
	fd     int
	closed atomic.Bool
	wdl    atomic.Int64 // write deadline, UnixNano; 0: none
}

// errAgain is what sock.Read returns when its function found nothing.
var errAgain = errors.New("hostif client: nothing to read")

// writeSlice bounds one wait of a blocked writer in poll(2).
const writeSlice = 100 * time.Millisecond

var _ syscall.RawConn = (*sock)(nil)

// detach takes uc's socket out of the runtime poller: it keeps a duplicate
// of the descriptor and closes uc (which unregisters the original).
func detach(uc *net.UnixConn) (*sock, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(d uintptr) { fd, derr = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup: %w", derr)
	}
	if err := uc.Close(); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	// The duplicate shares the file description, non-blocking already;
	// make sure of it.
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return &sock{fd: fd}, nil
}

// SyscallConn returns s itself.
func (s *sock) SyscallConn() (syscall.RawConn, error) { return s, nil }

// SetWriteDeadline bounds the waits of Write.
func (s *sock) SetWriteDeadline(t time.Time) error {
	if t.IsZero() {
		s.wdl.Store(0)
	} else {
		s.wdl.Store(max(t.UnixNano(), 1))
	}
	return nil
}

// Control implements syscall.RawConn.
func (s *sock) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// Read implements syscall.RawConn: f once; errAgain if it is not done.
func (s *sock) Read(f func(fd uintptr) bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	if !f(uintptr(s.fd)) {
		return errAgain
	}
	return nil
}

// Write implements syscall.RawConn: f until it is done, waiting for room
// (up to the write deadline) between calls.
func (s *sock) Write(f func(fd uintptr) bool) error {
	for {
		s.mu.RLock()
		if s.closed.Load() {
			s.mu.RUnlock()
			return net.ErrClosed
		}
		if f(uintptr(s.fd)) {
			s.mu.RUnlock()
			return nil
		}
		slice := writeSlice
		if dl := s.wdl.Load(); dl != 0 {
			left := time.Until(time.Unix(0, dl))
			if left <= 0 {
				s.mu.RUnlock()
				return os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		_, err := s.poll(unix.POLLOUT, slice)
		s.mu.RUnlock()
		if err != nil {
			return err
		}
	}
}

// waitIn waits up to d for the socket to become readable (or hung up, or
// shut down). It reports whether it is; net.ErrClosed once s is closed.
func (s *sock) waitIn(d time.Duration) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, net.ErrClosed
	}
	return s.poll(unix.POLLIN, d)
}

// poll is one poll(2) of the descriptor, with s.mu held for reading. It is
// a blocking system call the runtime is told about (its P goes to other
// goroutines meanwhile).
func (s *sock) poll(ev int16, d time.Duration) (bool, error) {
	pfd := [1]unix.PollFd{{Fd: int32(s.fd), Events: ev}}
	ts := unix.NsecToTimespec(int64(max(d, 0)))
	n, err := unix.Ppoll(pfd[:], &ts, nil)
	if err != nil {
		if err == unix.EINTR {
			return false, nil
		}
		return false, fmt.Errorf("poll: %w", err)
	}
	return n > 0, nil
}

// close shuts the socket down, waits for the system calls in progress and
// closes the descriptor. Only the first call closes.
func (s *sock) close() {
	if s.closed.Swap(true) {
		return
	}
	_ = unix.Shutdown(s.fd, unix.SHUT_RDWR) // wakes every poll(2) on it
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = unix.Close(s.fd)
	s.fd = -1
}
