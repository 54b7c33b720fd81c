package secure

// window is a sliding anti-replay window over 64-bit counters (the
// scheme of RFC 6479, as WireGuard uses it): counters more than
// windowBits behind the highest seen are refused, and each counter inside
// the window is accepted once.
const (
	windowWords = 32
	windowBits  = (windowWords - 1) * 64 // usable span: one word is being rotated
)

type window struct {
	last   uint64 // highest counter accepted + 1 (0: none yet)
	bitmap [windowWords]uint64
}

// check reports whether counter may be accepted (it does not record it).
func (w *window) check(counter uint64) bool {
	if counter+1 > w.last {
		return true
	}
	if w.last-(counter+1) >= windowBits {
		return false
	}
	idx := counter / 64 % windowWords
	return w.bitmap[idx]&(1<<(counter%64)) == 0
}

// accept records counter, which check accepted and which authenticated.
func (w *window) accept(counter uint64) {
	if counter+1 > w.last {
		cur := w.last / 64
		nxt := counter / 64
		if w.last == 0 {
			cur = 0
		}
		diff := nxt - cur
		if diff > windowWords {
			diff = windowWords
		}
		for i := uint64(1); i <= diff; i++ {
			w.bitmap[(cur+i)%windowWords] = 0
		}
		if w.last == 0 {
			w.bitmap[nxt%windowWords] = 0
		}
		w.last = counter + 1
	}
	w.bitmap[counter/64%windowWords] |= 1 << (counter % 64)
}
