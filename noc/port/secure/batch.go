package secure

import (
	"errors"

	"github.com/aitherion/dpu/noc"
)

// batchScratch is the sealed datagrams of one TryReadDatagrams call.
type batchScratch struct {
	bufs [][]byte
	lens []int
}

// TryReadDatagrams implements noc.BatchPoller: one batch read of the inner
// port (one recvmmsg on UDP), each datagram opened into bufs in order;
// handshake messages are answered and anything not authentic is dropped on
// the way, as TryReadDatagram does. An inner port without a batch read is
// read one datagram at a time.
func (p *Port) TryReadDatagrams(bufs [][]byte, lens []int) (int, error) {
	bp, ok := p.inner.(noc.BatchPoller)
	if !ok {
		if _, ok := p.inner.(noc.Poller); !ok {
			return 0, errors.New("secure: inner port cannot be polled")
		}
		n := 0
		for n < min(len(bufs), len(lens)) {
			m, ok, err := p.TryReadDatagram(bufs[n])
			if err != nil || !ok {
				return n, err
			}
			lens[n] = m
			n++
		}
		return n, nil
	}
	want := min(len(bufs), len(lens))
	s := &p.rbatch
	for len(s.bufs) < want {
		s.bufs = append(s.bufs, make([]byte, len(p.rbuf)))
		s.lens = append(s.lens, 0)
	}
	got, err := bp.TryReadDatagrams(s.bufs[:want], s.lens[:want])
	n := 0
	for i := range got {
		if m, ok := p.input(s.bufs[i][:s.lens[i]], bufs[n]); ok {
			lens[n] = m
			n++
		}
	}
	return n, err
}
