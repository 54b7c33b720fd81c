package xdp

// completionQueue is where the kernel returns UMEM frames it has sent. It
// is used by the sending side only.
type completionQueue struct {
	consumerRing[uint64]
}

// reap returns every completed frame to the TX free stack and hands the
// slots back to the kernel. It returns the number of frames reclaimed.
func (q *completionQueue) reap(u *umem) uint32 {
	n := q.available()
	for i := range n {
		u.pushTx(q.peek(i))
	}
	if n > 0 {
		q.consume(n)
		q.release()
	}
	return n
}
