package xdp

import "golang.org/x/sys/unix"

// txQueue is where this process puts frames to send: descriptors of UMEM
// regions written by WriteDatagram.
type txQueue struct {
	producerRing[unix.XDPDesc]
}

// putFrame queues one frame of n descriptors, marking all but the last as
// continued. The caller has checked free(len(descs)).
func (q *txQueue) putFrame(descs []unix.XDPDesc) {
	for i, d := range descs {
		if i < len(descs)-1 {
			d.Options |= unix.XDP_PKT_CONTD
		} else {
			d.Options &^= unix.XDP_PKT_CONTD
		}
		q.put(d)
	}
}
