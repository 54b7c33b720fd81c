//go:build !linux

package udp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// poller reads without blocking by reading with an expired deadline and
// then restoring the caller's.
type poller struct {
	conn     *net.UDPConn
	mu       sync.Mutex
	deadline time.Time
}

func (q *poller) init(p *Port) { q.conn = p.conn }

func (q *poller) setDeadline(t time.Time) {
	q.mu.Lock()
	q.deadline = t
	q.mu.Unlock()
}

func (q *poller) try(b []byte) (int, netip.AddrPort, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.conn.SetReadDeadline(time.Now()); err != nil {
		return 0, netip.AddrPort{}, false, err
	}
	n, from, err := q.conn.ReadFromUDPAddrPort(b)
	if rerr := q.conn.SetReadDeadline(q.deadline); rerr != nil && err == nil {
		err = rerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, from, false, nil
	}
	return n, from, err == nil, err
}
