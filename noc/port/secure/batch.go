package secure

import (
	"errors"

	"github.com/aitherion/dpu/noc"
)

// batchScratch is the sealed datagrams of one batch read of the inner
// port; next is the first not yet opened (a bundle can hold more
// datagrams than the caller has room for: the rest wait for the next read,
// before anything new is read from the inner port).
type batchScratch struct {
	bufs [][]byte
	lens []int
	got  int
	next int
}

// TryReadDatagrams implements noc.BatchPoller: one batch read of the inner
// port (one recvmmsg on UDP), each datagram opened into bufs in order (a
// bundle into as many as it holds); handshake messages are answered and
// anything not authentic is dropped on the way, as TryReadDatagram does.
// An inner port without a batch read is read one datagram at a time.
func (p *Port) TryReadDatagrams(bufs [][]byte, lens []int) (int, error) {
	want := min(len(bufs), len(lens))
	bp, ok := p.inner.(noc.BatchPoller)
	if !ok {
		if _, ok := p.inner.(noc.Poller); !ok {
			return 0, errors.New("secure: inner port cannot be polled")
		}
		n := 0
		for n < want {
			m, ok, err := p.TryReadDatagram(bufs[n])
			if err != nil || !ok {
				return n, err
			}
			lens[n] = m
			n++
		}
		return n, nil
	}
	n := p.fromBacklog(bufs[:want], lens)
	if n == want || p.backlogged() {
		return n, nil
	}
	s := &p.rbatch
	for len(s.bufs) < want {
		s.bufs = append(s.bufs, make([]byte, len(p.rbuf)))
		s.lens = append(s.lens, 0)
	}
	got, err := bp.TryReadDatagrams(s.bufs[:want], s.lens[:want])
	s.got, s.next = got, 0
	n += p.fromBacklog(bufs[n:want], lens[n:])
	return n, err
}

// backlogged reports whether datagrams of an earlier read wait: the rest
// of a bundle, or sealed datagrams of a batch not yet opened.
func (p *Port) backlogged() bool { return len(p.pend) > 0 || p.rbatch.next < p.rbatch.got }

// fromBacklog opens what waits from earlier reads into bufs, in order,
// and returns how many it filled.
func (p *Port) fromBacklog(bufs [][]byte, lens []int) int {
	n := 0
	for n < len(bufs) {
		m, ok := p.nextFromBacklog(bufs[n])
		if !ok {
			break
		}
		lens[n] = m
		n++
	}
	return n
}

// nextFromBacklog opens the next datagram that waits into b, if any.
func (p *Port) nextFromBacklog(b []byte) (int, bool) {
	s := &p.rbatch
	for {
		if m, ok := p.pending(b); ok {
			return m, true
		}
		if s.next >= s.got {
			return 0, false
		}
		i := s.next
		s.next++
		if m, ok := p.input(s.bufs[i][:s.lens[i]], b); ok {
			return m, true
		}
	}
}
