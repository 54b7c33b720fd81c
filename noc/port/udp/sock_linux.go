//go:build linux

package udp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollSlice bounds one wait of a blocked reader or writer, so that a
// deadline set while it waits is seen in time even without a wake-up.
const pollSlice = 100 * time.Millisecond

// sock is the port's socket, detached from the Go runtime's network poller.
// A socket the runtime polls wakes a poller thread for every datagram (its
// registration is edge-triggered for input and output alike), even when
// the run loop reads it from an epoll set of its own: two threads woken
// per datagram, one of them for nothing. A detached socket wakes only the
// one who waits for it: the run loop's epoll, or a blocked reader in
// poll(2).
//
// sock implements syscall.RawConn: Read and Write call their function
// until it reports done, waiting in poll(2) between calls. Every system
// call on the descriptor holds mu for reading; Close shuts the socket down
// (which wakes the waiters), then takes mu to close the descriptor, so a
// descriptor number is never used after it is closed.
type sock struct {
	mu       sync.RWMutex
	fd       int
	closed   atomic.Bool
	deadline atomic.Int64 // read deadline, UnixNano; 0: none
	local    netip.AddrPort
}

var _ syscall.RawConn = (*sock)(nil)

// detach takes c's socket out of the runtime poller: it keeps a duplicate
// of the descriptor and closes c (which unregisters the original).
func detach(c *net.UDPConn) (*sock, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	fd := -1
	var derr error
	if err := raw.Control(func(d uintptr) { fd, derr = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("udp: dup: %w", derr)
	}
	s := &sock{fd: fd, local: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	if err := c.Close(); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("udp: %w", err)
	}
	return s, nil
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

// Read implements syscall.RawConn: f until it is done, waiting for input
// (up to the read deadline) between calls.
func (s *sock) Read(f func(fd uintptr) bool) error { return s.wait(f, unix.POLLIN) }

// Write implements syscall.RawConn: f until it is done, waiting for room
// between calls.
func (s *sock) Write(f func(fd uintptr) bool) error { return s.wait(f, unix.POLLOUT) }

func (s *sock) wait(f func(fd uintptr) bool, ev int16) error {
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
		slice := pollSlice
		if dl := s.deadline.Load(); dl != 0 && ev == unix.POLLIN {
			left := time.Until(time.Unix(0, dl))
			if left <= 0 {
				s.mu.RUnlock()
				return os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		pfd := [1]unix.PollFd{{Fd: int32(s.fd), Events: ev}}
		ts := unix.NsecToTimespec(int64(slice))
		_, err := unix.Ppoll(pfd[:], &ts, nil)
		s.mu.RUnlock()
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("poll: %w", err)
		}
	}
}

func (s *sock) setReadDeadline(t time.Time) {
	if t.IsZero() {
		s.deadline.Store(0)
		return
	}
	s.deadline.Store(max(t.UnixNano(), 1))
}

// close shuts the socket down, waits for the system calls in progress and
// closes the descriptor. Only the first call closes.
func (s *sock) close() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	// wakes readers and writers blocked in poll(2); an unconnected UDP
	// socket answers ENOTCONN but is shut down all the same
	_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
	s.mu.Lock()
	defer s.mu.Unlock()
	return unix.Close(s.fd)
}
