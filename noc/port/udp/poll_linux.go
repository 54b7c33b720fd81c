//go:build linux

package udp

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"
)

// poller reads one datagram without blocking: recvfrom(2) with MSG_DONTWAIT
// on the socket's descriptor. Its fields are the reader's; they live in the
// Port so that a poll allocates nothing.
type poller struct {
	raw    syscall.RawConn
	fn     func(fd uintptr) bool
	block  bool // wait for a datagram (ReadDatagram) rather than report none
	b      []byte
	empty  [1]byte
	n      int
	ok     bool
	errno  syscall.Errno
	rsa    syscall.RawSockaddrAny
	rsaLen uint32
	from   netip.AddrPort
}

func (q *poller) init(p *Port) {
	q.raw = p.raw
	q.fn = q.recv
}

func (q *poller) try(b []byte) (n int, from netip.AddrPort, ok bool, err error) {
	q.block = false
	return q.read(b)
}

// wait reads one datagram, waiting for it (up to the read deadline).
func (q *poller) wait(b []byte) (n int, from netip.AddrPort, err error) {
	q.block = true
	n, from, _, err = q.read(b)
	return n, from, err
}

func (q *poller) read(b []byte) (n int, from netip.AddrPort, ok bool, err error) {
	q.b, q.ok, q.errno = b, false, 0
	err = q.raw.Read(q.fn)
	q.b = nil
	if err != nil {
		return 0, from, false, err
	}
	if q.errno != 0 {
		return 0, from, false, q.errno
	}
	return q.n, q.from, q.ok, nil
}

// recv runs inside RawConn.Read; returning true means "done, do not wait".
func (q *poller) recv(fd uintptr) bool {
	buf := unsafe.Pointer(&q.empty[0])
	if len(q.b) > 0 {
		buf = unsafe.Pointer(&q.b[0])
	}
	for {
		q.rsaLen = syscall.SizeofSockaddrAny
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(buf), uintptr(len(q.b)),
			syscall.MSG_DONTWAIT, uintptr(unsafe.Pointer(&q.rsa)), uintptr(unsafe.Pointer(&q.rsaLen)))
		switch e {
		case 0:
			q.n, q.ok = int(r), true
			q.from = q.sockaddr()
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return !q.block
		default:
			q.errno = e
			return true
		}
	}
}

func (q *poller) sockaddr() netip.AddrPort {
	switch q.rsa.Addr.Family {
	case syscall.AF_INET:
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&q.rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
	case syscall.AF_INET6:
		sa := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&q.rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}
