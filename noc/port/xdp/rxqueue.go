package xdp

import "golang.org/x/sys/unix"

// rxQueue is where the kernel puts received frames: descriptors of UMEM
// regions. A frame larger than one UMEM frame spans several descriptors, all
// but the last marked XDP_PKT_CONTD (multi-buffer sockets, XDP_USE_SG).
type rxQueue struct {
	consumerRing[unix.XDPDesc]
}

// packetDescs returns how many descriptors, starting at the i-th ready one,
// make up one frame, and false when its last descriptor is not (yet) there.
func (q *rxQueue) packetDescs(i, avail uint32) (uint32, bool) {
	for n := uint32(1); i+n <= avail; n++ {
		if q.peek(i+n-1).Options&unix.XDP_PKT_CONTD == 0 {
			return n, true
		}
	}
	return 0, false
}
