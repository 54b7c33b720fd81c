//go:build linux

package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgBatch is the most datagrams one sendmmsg or recvmmsg moves.
const mmsgBatch = 64

// mmsghdr is struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// mmsg is the state of one direction's batched I/O, kept in the Port so a
// batch allocates nothing. The writer's and the reader's are separate.
type mmsg struct {
	hdrs  [mmsgBatch]mmsghdr
	iovs  [mmsgBatch]unix.Iovec
	names [mmsgBatch]syscall.RawSockaddrAny
	n     int // messages in the batch
	done  int // result of the system call
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// remoteSockaddr encodes the port's remote address once, for sendmmsg.
func (p *Port) remoteSockaddr() (unsafe.Pointer, uint32) {
	if p.remote.Addr().Is4() {
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&p.txName))
		sa.Family = syscall.AF_INET
		sa.Addr = p.remote.Addr().As4()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], p.remote.Port())
		return unsafe.Pointer(sa), syscall.SizeofSockaddrInet4
	}
	sa := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&p.txName))
	sa.Family = syscall.AF_INET6
	sa.Addr = p.remote.Addr().As16()
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], p.remote.Port())
	return unsafe.Pointer(sa), syscall.SizeofSockaddrInet6
}

// WriteDatagrams implements noc.BatchWriter: the whole batch in as few
// sendmmsg(2) calls as it takes (one per 64 datagrams).
func (p *Port) WriteDatagrams(bufs [][]byte) error {
	w := &p.wbatch
	if w.fn == nil {
		w.fn = func(fd uintptr) bool {
			r, _, e := syscall.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[0])), uintptr(w.n), 0, 0, 0)
			if e == syscall.EAGAIN {
				return false // wait for room
			}
			w.done, w.errno = int(r), e
			return true
		}
	}
	name, nameLen := p.remoteSockaddr()
	for len(bufs) > 0 {
		w.n = min(len(bufs), mmsgBatch)
		for i, b := range bufs[:w.n] {
			if len(b) > p.mtu {
				return fmt.Errorf("%w: %d > %d", ErrTooLarge, len(b), p.mtu)
			}
			w.iovs[i] = unix.Iovec{Base: unsafe.SliceData(b)}
			w.iovs[i].SetLen(len(b))
			w.hdrs[i] = mmsghdr{}
			w.hdrs[i].hdr.Name = (*byte)(name)
			w.hdrs[i].hdr.Namelen = nameLen
			w.hdrs[i].hdr.Iov = &w.iovs[i]
			w.hdrs[i].hdr.SetIovlen(1)
		}
		for w.n > 0 {
			if err := p.raw.Write(w.fn); err != nil {
				return p.opError("write", err)
			}
			if w.errno != 0 && w.errno != syscall.EINTR {
				return p.opError("write", w.errno)
			}
			if w.done <= 0 {
				continue
			}
			// what was not sent moves to the front
			copy(w.hdrs[:], w.hdrs[w.done:w.n])
			w.n -= w.done
		}
		bufs = bufs[min(len(bufs), mmsgBatch):]
	}
	return nil
}

// TryReadDatagrams implements noc.BatchPoller: one recvmmsg(2) without
// waiting fills up to len(bufs) buffers; lens gets their lengths. Datagrams
// from addresses other than the remote are dropped and counted.
func (p *Port) TryReadDatagrams(bufs [][]byte, lens []int) (int, error) {
	r := &p.rbatch
	if r.fn == nil {
		r.fn = func(fd uintptr) bool {
			for {
				n, _, e := syscall.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.n), unix.MSG_DONTWAIT, 0, 0)
				if e == syscall.EINTR {
					continue
				}
				r.done, r.errno = int(n), e
				return true
			}
		}
	}
	r.n = min(len(bufs), len(lens), mmsgBatch)
	if r.n == 0 {
		return 0, nil
	}
	for i, b := range bufs[:r.n] {
		r.iovs[i] = unix.Iovec{Base: unsafe.SliceData(b)}
		r.iovs[i].SetLen(len(b))
		r.hdrs[i] = mmsghdr{}
		r.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		r.hdrs[i].hdr.Namelen = syscall.SizeofSockaddrAny
		r.hdrs[i].hdr.Iov = &r.iovs[i]
		r.hdrs[i].hdr.SetIovlen(1)
	}
	if err := p.raw.Read(r.fn); err != nil {
		return 0, p.opError("read", err)
	}
	switch r.errno {
	case 0:
	case syscall.EAGAIN:
		return 0, nil
	default:
		return 0, p.opError("read", r.errno)
	}
	k := 0
	for i := range r.done {
		if !p.fromRemote(sockaddrOf(&r.names[i])) {
			p.foreign.Add(1)
			continue
		}
		if i != k {
			bufs[k], bufs[i] = bufs[i], bufs[k]
		}
		lens[k] = int(r.hdrs[i].len)
		k++
	}
	return k, nil
}

func sockaddrOf(rsa *syscall.RawSockaddrAny) netip.AddrPort {
	q := poller{rsa: *rsa}
	return q.sockaddr()
}
