//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgBatch is the most datagrams one sendmmsg or recvmmsg moves.
const mmsgBatch = 64

// Limits of one UDP GSO message (UDP_SEGMENT): the kernel takes at most 64
// segments and a 64 KiB payload.
const (
	gsoSegments = 64
	gsoBytes    = 65507
)

// gsoControl is the room of one UDP_SEGMENT control message.
var gsoControl = unix.CmsgSpace(2)

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
	ctl   [mmsgBatch][32]byte // a UDP_SEGMENT control message per GSO message
	segs  [mmsgBatch]int      // datagrams in each message
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
// sendmmsg(2) calls as it takes (one per 64 messages). With UDP GSO (the
// kernel's UDP_SEGMENT, unless it refused it once on this socket), each
// run of consecutive datagrams of one size (the last of a run may be
// shorter) is one message the kernel cuts into those datagrams: one pass
// through the socket layer and the routing for up to 64 of them. The
// receiver sees the same datagrams either way.
func (p *Port) WriteDatagrams(bufs [][]byte) error {
	for _, b := range bufs {
		if len(b) > p.mtu {
			return fmt.Errorf("%w: %d > %d", ErrTooLarge, len(b), p.mtu)
		}
	}
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
	for len(bufs) > 0 {
		taken, err := p.writeBatch(bufs, !p.noGSO.Load())
		bufs = bufs[taken:]
		if errors.Is(err, errGSO) {
			// the kernel or the route refused segmentation: plain
			// datagrams from now on, the rest of this batch included
			p.noGSO.Store(true)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errGSO: the kernel refused a UDP_SEGMENT message.
var errGSO = errors.New("udp: segmentation offload refused")

// writeBatch sends the first mmsgBatch datagrams of bufs (at most), runs
// of one size as one GSO message each when gso is set, and returns how
// many datagrams went out; errGSO when the kernel refused a GSO message
// (the datagrams before it went out).
func (p *Port) writeBatch(bufs [][]byte, gso bool) (int, error) {
	w := &p.wbatch
	name, nameLen := p.remoteSockaddr()
	w.n = 0
	limit := min(len(bufs), mmsgBatch)
	for d := 0; d < limit; {
		run := 1
		if gso {
			seg, total := len(bufs[d]), len(bufs[d])
			for d+run < limit && run < gsoSegments && seg > 0 {
				next := len(bufs[d+run])
				if next > seg || next == 0 || total+next > gsoBytes {
					break
				}
				total += next
				run++
				if next < seg {
					break // a shorter one ends the run
				}
			}
		}
		for k := range run {
			b := bufs[d+k]
			w.iovs[d+k] = unix.Iovec{Base: unsafe.SliceData(b)}
			w.iovs[d+k].SetLen(len(b))
		}
		h := &w.hdrs[w.n]
		*h = mmsghdr{}
		h.hdr.Name = (*byte)(name)
		h.hdr.Namelen = nameLen
		h.hdr.Iov = &w.iovs[d]
		h.hdr.SetIovlen(run)
		w.segs[w.n] = run
		if run > 1 {
			c := w.ctl[w.n][:gsoControl]
			clear(c)
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			cm.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(len(bufs[d])))
			h.hdr.Control = &c[0]
			h.hdr.SetControllen(gsoControl)
		}
		w.n++
		d += run
	}
	sent := 0
	for w.n > 0 {
		if err := p.raw.Write(w.fn); err != nil {
			return sent, p.opError("write", err)
		}
		if w.errno != 0 && w.errno != syscall.EINTR {
			if (w.errno == syscall.EIO || w.errno == syscall.EINVAL) && w.segs[0] > 1 {
				return sent, errGSO
			}
			return sent, p.opError("write", w.errno)
		}
		if w.done <= 0 {
			continue
		}
		for _, k := range w.segs[:w.done] {
			sent += k
		}
		// what was not sent moves to the front
		copy(w.hdrs[:], w.hdrs[w.done:w.n])
		copy(w.segs[:], w.segs[w.done:w.n])
		w.n -= w.done
	}
	return sent, nil
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
