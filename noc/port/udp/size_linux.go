//go:build linux

package udp

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// SocketBuffer is the send and receive buffer a Port asks its socket for:
// a link's window of large datagrams (64 of 9000 bytes, and the kernel's
// overhead per datagram) fits without a drop at the receiver. Where the
// process may not exceed net.core.{r,w}mem_max, the kernel caps it there.
const SocketBuffer = 4 << 20

// JumboMTU is the largest MTU PathMTU suggests: a 4 KiB page and every
// header in one datagram, and a link window of them in a few megabytes.
const JumboMTU = 9000

// sizeBuffers asks for SocketBuffer each way: beyond the system's maximum
// where the process may (CAP_NET_ADMIN), up to it otherwise.
func sizeBuffers(fd int) error {
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], SocketBuffer) == nil {
			continue
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], SocketBuffer); err != nil {
			return fmt.Errorf("udp: socket buffer: %w", err)
		}
	}
	return nil
}

// PathMTU is the largest UDP payload that reaches remote without IP
// fragmentation (the MTU of the route's interface less the IP and UDP
// headers), at most JumboMTU: 9000 on loopback, 1472 on an Ethernet of
// 1500 bytes. Both ends of a link must use the same MTU.
func PathMTU(remote string) (int, error) {
	ra, err := net.ResolveUDPAddr("udp", remote)
	if err != nil {
		return 0, fmt.Errorf("%w: remote %q: %w", ErrAddress, remote, err)
	}
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		return 0, fmt.Errorf("udp: path MTU to %s: %w", remote, err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("udp: path MTU: %w", err)
	}
	v6 := !netip.AddrPortFrom(ra.AddrPort().Addr().Unmap(), 0).Addr().Is4()
	var mtu int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		if v6 {
			mtu, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU)
		} else {
			mtu, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU)
		}
	}); err != nil {
		return 0, fmt.Errorf("udp: path MTU: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("udp: path MTU to %s: %w", remote, serr)
	}
	hdr := 20 + 8
	if v6 {
		hdr = 40 + 8
	}
	return max(1, min(mtu-hdr, JumboMTU, MaxMTU)), nil
}
