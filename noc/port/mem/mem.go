package mem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Config shapes a pair. The zero value is a perfect link with the defaults
// below.
type Config struct {
	// Names of the two ends; "a" and "b" when empty.
	NameA, NameB string
	// MTU is the largest datagram either end accepts (default 1500).
	MTU int
	// Queue bounds the datagrams in flight in each direction (default 1024).
	Queue int
	// Drop, Duplicate and Reorder are probabilities in [0, 1].
	Drop, Duplicate, Reorder float64
	// Delay is added to every datagram, Jitter adds a uniform [0, Jitter).
	Delay, Jitter time.Duration
	// Seed drives every random decision.
	Seed uint64
	// Clock is read only when Delay or Jitter is set (default time.Now).
	Clock func() time.Time
}

// Defaults applied to zero fields.
const (
	DefaultMTU   = 1500
	DefaultQueue = 1024
)

// Errors returned by a Port.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("mem: invalid config")
	// ErrTooLarge is returned for a datagram longer than the MTU.
	ErrTooLarge = errors.New("mem: datagram larger than MTU")
)

// Stats counts what happened to datagrams written by one end.
type Stats struct {
	Written    uint64 // WriteDatagram calls that were accepted
	Dropped    uint64 // dropped by the Drop knob or because the peer is closed
	Overflow   uint64 // dropped because the queue was full
	Duplicated uint64 // extra copies made by the Duplicate knob
	Reordered  uint64 // datagrams held back by the Reorder knob
	Read       uint64 // datagrams this end has read
}

// Port is one end of a pair. It is safe for one concurrent reader and one
// concurrent writer (plus SetReadDeadline and Close from anywhere).
type Port struct {
	name   string
	mtu    int
	in     *pipe // datagrams arriving here
	out    *pipe // datagrams leaving (the peer's in)
	closed atomic.Bool

	// reader-only state
	timer *time.Timer
}

var (
	_ noc.Port   = (*Port)(nil)
	_ noc.Poller = (*Port)(nil)
)

// Pair returns two connected ports.
func Pair(cfg Config) (a, b *Port, err error) {
	if err := cfg.fill(); err != nil {
		return nil, nil, err
	}
	ab := newPipe(&cfg, 1)
	ba := newPipe(&cfg, 2)
	a = &Port{name: cfg.NameA, mtu: cfg.MTU, in: ba, out: ab}
	b = &Port{name: cfg.NameB, mtu: cfg.MTU, in: ab, out: ba}
	return a, b, nil
}

func (c *Config) fill() error {
	if c.NameA == "" {
		c.NameA = "a"
	}
	if c.NameB == "" {
		c.NameB = "b"
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	switch {
	case c.MTU < 1:
		return fmt.Errorf("%w: MTU %d", ErrConfig, c.MTU)
	case c.Queue < 1:
		return fmt.Errorf("%w: Queue %d", ErrConfig, c.Queue)
	case !prob(c.Drop) || !prob(c.Duplicate) || !prob(c.Reorder):
		return fmt.Errorf("%w: probabilities must lie in [0, 1]", ErrConfig)
	case c.Delay < 0 || c.Jitter < 0:
		return fmt.Errorf("%w: negative delay or jitter", ErrConfig)
	}
	return nil
}

func prob(p float64) bool { return p >= 0 && p <= 1 }

// Name implements noc.Port.
func (p *Port) Name() string { return p.name }

// MTU implements noc.Port.
func (p *Port) MTU() int { return p.mtu }

// WriteDatagram implements noc.Port. It never blocks; a datagram the faults
// or a full queue drop still returns nil, as on a real wire.
func (p *Port) WriteDatagram(b []byte) error {
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	if len(b) > p.mtu {
		return fmt.Errorf("%w: %d > %d", ErrTooLarge, len(b), p.mtu)
	}
	if p.out.write(b) {
		p.out.signal()
	}
	return nil
}

// ReadDatagram implements noc.Port.
func (p *Port) ReadDatagram(b []byte) (int, error) {
	q := p.in
	for {
		n, ok, wait, err := q.read(b)
		if err != nil || ok {
			return n, err
		}
		// wait > 0: nothing ready before that long; 0: no bound but
		// the deadline, which read already checked.
		if wait <= 0 {
			select {
			case <-q.notify:
			case <-q.done:
			}
			continue
		}
		if p.timer == nil {
			p.timer = time.NewTimer(wait)
		} else {
			p.timer.Reset(wait)
		}
		select {
		case <-q.notify:
		case <-q.done:
		case <-p.timer.C:
		}
		p.timer.Stop()
	}
}

// TryReadDatagram implements noc.Poller.
func (p *Port) TryReadDatagram(b []byte) (int, bool, error) {
	n, ok, _, err := p.in.read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil // a poll has no deadline of its own
	}
	return n, ok, err
}

// SetReadDeadline implements noc.Port. It may be called while a read is
// blocked; the read then honours the new deadline.
func (p *Port) SetReadDeadline(t time.Time) error {
	q := p.in
	q.mu.Lock()
	q.deadline = t
	q.mu.Unlock()
	q.signal()
	return nil
}

// Close implements noc.Port. Blocked reads return noc.ErrPortClosed; later
// writes by the peer are dropped.
func (p *Port) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	q := p.in
	q.mu.Lock()
	q.closed = true
	if q.fifo {
		clear(q.h)
		q.head = 0
	} else {
		q.h = q.h[:0]
	}
	q.n = 0
	close(q.done)
	q.mu.Unlock()
	return nil
}

// Stats returns what happened to the datagrams this end wrote, and how many
// it read.
func (p *Port) Stats() Stats {
	p.out.mu.Lock()
	s := p.out.stats
	p.out.mu.Unlock()
	p.in.mu.Lock()
	s.Read = p.in.nread
	p.in.mu.Unlock()
	return s
}

// Len returns the number of datagrams waiting to be read at this end.
func (p *Port) Len() int {
	p.in.mu.Lock()
	defer p.in.mu.Unlock()
	return p.in.n
}

// pipe is one direction of a pair: a bounded min-heap of datagrams ordered
// by (deliver time, order key), or a plain ring when neither reordering nor
// delay can change the order.
type pipe struct {
	mu       sync.Mutex
	cfg      *Config
	rng      *rand.Rand
	fifo     bool
	h        []entry // the heap, or the ring from head
	head     int
	n        int // datagrams queued
	free     [][]byte
	ord      uint64
	deadline time.Time
	closed   bool
	stats    Stats
	nread    uint64

	notify chan struct{} // capacity 1: something changed
	done   chan struct{} // closed by Close of the reading end
}

type entry struct {
	at  int64 // deliver time (Clock UnixNano); 0 without delay
	ord uint64
	b   []byte
}

func (e *entry) less(o *entry) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.ord < o.ord
}

func newPipe(cfg *Config, stream uint64) *pipe {
	q := &pipe{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, stream)),
		fifo:   cfg.Reorder == 0 && cfg.Delay == 0 && cfg.Jitter == 0,
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	if q.fifo {
		q.h = make([]entry, cfg.Queue)
	}
	return q
}

func (q *pipe) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *pipe) chance(p float64) bool { return p > 0 && q.rng.Float64() < p }

// write queues b (and maybe a duplicate); it reports whether anything was
// queued.
func (q *pipe) write(b []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stats.Written++
	if q.closed || q.chance(q.cfg.Drop) {
		q.stats.Dropped++
		return false
	}
	copies := 1
	if q.chance(q.cfg.Duplicate) {
		copies = 2
		q.stats.Duplicated++
	}
	queued := false
	for range copies {
		if q.n >= q.cfg.Queue {
			q.stats.Overflow++
			continue
		}
		q.push(b)
		queued = true
	}
	return queued
}

func (q *pipe) push(b []byte) {
	var buf []byte
	if n := len(q.free); n > 0 {
		buf = q.free[n-1][:0]
		q.free = q.free[:n-1]
	} else {
		buf = make([]byte, 0, q.cfg.MTU)
	}
	e := entry{b: append(buf, b...)}
	q.n++
	if q.fifo {
		q.h[(q.head+q.n-1)%len(q.h)] = e
		return
	}
	q.ord += 2
	e.ord = q.ord
	delayed := q.cfg.Delay > 0 || q.cfg.Jitter > 0
	if delayed {
		d := q.cfg.Delay
		if q.cfg.Jitter > 0 {
			d += time.Duration(q.rng.Int64N(int64(q.cfg.Jitter)))
		}
		e.at = q.cfg.Clock().UnixNano() + int64(d)
	}
	if q.chance(q.cfg.Reorder) {
		// Overtaken by the next 1..3 datagrams: sorts just after the
		// one written depth places later.
		depth := 1 + q.rng.Uint64N(3)
		e.ord += 2*depth + 1
		if delayed {
			e.at += int64(q.cfg.Delay)
		}
		q.stats.Reordered++
	}
	q.h = append(q.h, e)
	q.up(len(q.h) - 1)
}

// read pops the next deliverable datagram into b. When none is ready it
// returns how long until the head becomes deliverable (0: unknown), or the
// deadline error.
func (q *pipe) read(b []byte) (n int, ok bool, wait time.Duration, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, false, 0, noc.ErrPortClosed
	}
	var now time.Time
	if q.n > 0 {
		head := &q.h[0]
		if head.at == 0 {
			return q.pop(b), true, 0, nil
		}
		now = q.cfg.Clock()
		if d := head.at - now.UnixNano(); d <= 0 {
			return q.pop(b), true, 0, nil
		} else {
			wait = time.Duration(d)
		}
	}
	if !q.deadline.IsZero() {
		left := time.Until(q.deadline)
		if left <= 0 {
			return 0, false, 0, os.ErrDeadlineExceeded
		}
		if wait == 0 || left < wait {
			wait = left
		}
	}
	return 0, false, wait, nil
}

func (q *pipe) pop(b []byte) int {
	q.n--
	var e entry
	if q.fifo {
		e = q.h[q.head]
		q.h[q.head] = entry{}
		q.head = (q.head + 1) % len(q.h)
	} else {
		e = q.h[0]
		last := len(q.h) - 1
		q.h[0] = q.h[last]
		q.h[last] = entry{}
		q.h = q.h[:last]
		if last > 0 {
			q.down(0)
		}
	}
	n := copy(b, e.b)
	q.free = append(q.free, e.b)
	q.nread++
	return n
}

func (q *pipe) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.h[i].less(&q.h[p]) {
			return
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *pipe) down(i int) {
	n := len(q.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.h[r].less(&q.h[l]) {
			m = r
		}
		if !q.h[m].less(&q.h[i]) {
			return
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
}
