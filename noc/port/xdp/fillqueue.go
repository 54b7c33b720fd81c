package xdp

// fillQueue hands empty UMEM frames to the kernel for incoming frames. It is
// used by the receiving side only.
type fillQueue struct {
	producerRing[uint64]
}

// refill moves frames from the spare stack into the ring until one of them
// runs out, and publishes them. It returns the number of frames moved.
func (q *fillQueue) refill(u *umem) uint32 {
	n := q.free(uint32(len(u.rxSpare)))
	if s := uint32(len(u.rxSpare)); n > s {
		n = s
	}
	for range n {
		q.put(u.popRx())
	}
	if n > 0 {
		q.submit()
	}
	return n
}
