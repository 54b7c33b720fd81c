package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/aitherion/dpu/noc"
)

// ErrClosed is returned by a closed Conn.
var ErrClosed = errors.New("link: conn closed")

// pollBatch bounds the datagrams a Conn reads without blocking before it
// answers (so one ack covers a burst).
const pollBatch = 64

// portErrorPause is how long the reader waits after a port error other than
// a deadline, so that a failing port cannot spin it.
const portErrorPause = time.Millisecond

// Conn runs an Endpoint over a real noc.Port with the real clock: one
// goroutine reads the port and runs the timers; Send and Receive may be
// called from any goroutine. Conn owns the port: Close closes it.
type Conn struct {
	port  noc.Port
	start time.Time

	mu     sync.Mutex
	ep     *Endpoint
	out    [][]byte // a batch of datagrams to write
	outN   int
	armed  time.Time     // the port's read deadline
	wake   chan struct{} // closed when state changes; nil while nobody waits
	closed bool
	extra  ConnStats

	events    chan Event
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// ConnStats are a Conn's endpoint counters plus the driver's own.
type ConnStats struct {
	Stats
	PortWriteErrors, PortReadErrors uint64
	// EventsDropped counts transitions nobody read from Events in time.
	EventsDropped uint64
}

// NewConn starts driving an endpoint over p. A zero cfg.MTU takes the
// port's MTU.
func NewConn(p noc.Port, cfg Config) (*Conn, error) {
	if cfg.MTU == 0 {
		cfg.MTU = p.MTU()
	}
	if cfg.MTU > p.MTU() {
		return nil, fmt.Errorf("%w: MTU %d larger than port %s's %d", ErrConfig, cfg.MTU, p.Name(), p.MTU())
	}
	ep, err := NewEndpoint(cfg, 0)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		port:   p,
		start:  time.Now(),
		ep:     ep,
		out:    make([][]byte, pollBatch),
		events: make(chan Event, eventQueue),
		done:   make(chan struct{}),
	}
	for i := range c.out {
		c.out[i] = make([]byte, cfg.MTU)
	}
	c.wg.Add(1)
	go c.run()
	return c, nil
}

func (c *Conn) now() time.Duration { return time.Since(c.start) }

// Send queues msg, waiting while the link is down or the queue is full,
// until ctx ends or the Conn closes.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return ErrClosed
		}
		now := c.now()
		err := c.ep.Send(now, msg)
		if err == nil {
			c.flushLocked(now)
			c.armLocked(c.ep.NextDeadline(), true)
			return nil
		}
		if !errors.Is(err, ErrBackpressure) && !errors.Is(err, ErrDown) {
			return err
		}
		if err := c.waitLocked(ctx); err != nil {
			return fmt.Errorf("link: send: %w", err)
		}
	}
}

// Receive copies the next message into buf and returns its length, waiting
// until one arrives, ctx ends or the Conn closes. A message longer than buf
// is truncated and reported with io.ErrShortBuffer.
func (c *Conn) Receive(ctx context.Context, buf []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return 0, ErrClosed
		}
		if msg, ok := c.ep.Receive(); ok {
			n := copy(buf, msg)
			c.flushLocked(c.now())
			if n < len(msg) {
				return n, fmt.Errorf("link: receive: %d-byte message: %w", len(msg), io.ErrShortBuffer)
			}
			return n, nil
		}
		if err := c.waitLocked(ctx); err != nil {
			return 0, fmt.Errorf("link: receive: %w", err)
		}
	}
}

// WaitUp waits until the link is up, ctx ends or the Conn closes.
func (c *Conn) WaitUp(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.ep.Up() {
		if c.closed {
			return ErrClosed
		}
		if err := c.waitLocked(ctx); err != nil {
			return fmt.Errorf("link: wait up: %w", err)
		}
	}
	return nil
}

// Up reports whether the link is up.
func (c *Conn) Up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ep.Up()
}

// Events delivers link transitions; one not read in time is dropped and
// counted. It is closed by Close.
func (c *Conn) Events() <-chan Event { return c.events }

// Stats returns the counters.
func (c *Conn) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.extra
	s.Stats = c.ep.Stats()
	return s
}

// Close stops the reader, closes the port and wakes every waiter. It
// returns the port's Close error.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.notifyLocked()
		c.mu.Unlock()
		close(c.done)
		c.closeErr = c.port.Close()
		c.wg.Wait()
		close(c.events)
	})
	return c.closeErr
}

// run is the reader: it blocks on the port until a datagram arrives or the
// endpoint's next deadline passes.
func (c *Conn) run() {
	defer c.wg.Done()
	buf := make([]byte, c.port.MTU())
	batch := newBatch(c.port)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		now := c.now()
		c.ep.Tick(now)
		c.flushLocked(now)
		c.armLocked(c.ep.NextDeadline(), false)
		c.mu.Unlock()

		n, err := c.port.ReadDatagram(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if errors.Is(err, noc.ErrPortClosed) {
				return
			}
			c.mu.Lock()
			c.extra.PortReadErrors++
			c.mu.Unlock()
			select {
			case <-c.done:
				return
			case <-time.After(portErrorPause):
			}
			continue
		}
		c.mu.Lock()
		now = c.now()
		_ = c.ep.Input(now, buf[:n]) // refused datagrams are counted
		c.pollLocked(now, buf, batch)
		c.flushLocked(now)
		c.mu.Unlock()
	}
}

// batch is the reader's receive batch, for a port that reads many
// datagrams per system call.
type batch struct {
	bp   noc.BatchPoller
	bufs [][]byte
	lens []int
}

func newBatch(p noc.Port) batch {
	bp, ok := p.(noc.BatchPoller)
	if !ok {
		return batch{}
	}
	b := batch{bp: bp, bufs: make([][]byte, pollBatch), lens: make([]int, pollBatch)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, p.MTU())
	}
	return b
}

// pollLocked reads what else waits on the port without blocking (up to
// pollBatch datagrams, so that one ack covers a burst).
func (c *Conn) pollLocked(now time.Duration, buf []byte, b batch) {
	if b.bp != nil {
		n, _ := b.bp.TryReadDatagrams(b.bufs, b.lens)
		for i := range n {
			_ = c.ep.Input(now, b.bufs[i][:b.lens[i]])
		}
		return
	}
	poller, _ := c.port.(noc.Poller)
	for i := 0; poller != nil && i < pollBatch; i++ {
		n, ok, err := poller.TryReadDatagram(buf)
		if err != nil || !ok {
			break
		}
		_ = c.ep.Input(now, buf[:n])
	}
}

// flushLocked writes every datagram the endpoint has, forwards events and
// wakes waiters.
func (c *Conn) flushLocked(now time.Duration) {
	n := 0
	for {
		m, ok := c.ep.Output(now, c.out[n][:cap(c.out[n])])
		if !ok {
			break
		}
		c.out[n] = c.out[n][:m]
		n++
		if n == len(c.out) {
			c.writeLocked(n)
			n = 0
		}
	}
	c.writeLocked(n)
	for {
		ev, ok := c.ep.PollEvent()
		if !ok {
			break
		}
		select {
		case c.events <- ev:
		default:
			c.extra.EventsDropped++
		}
	}
	c.notifyLocked()
}

// writeLocked writes the first n datagrams of the batch: in one system
// call where the port has batch writes.
func (c *Conn) writeLocked(n int) {
	if n == 0 {
		return
	}
	if bw, ok := c.port.(noc.BatchWriter); ok {
		if err := bw.WriteDatagrams(c.out[:n]); err != nil {
			c.extra.PortWriteErrors++
		}
		return
	}
	for _, d := range c.out[:n] {
		if err := c.port.WriteDatagram(d); err != nil {
			c.extra.PortWriteErrors++
		}
	}
}

// armLocked sets the port's read deadline to the endpoint time d; with
// earlier it only moves the deadline closer (a sender's new timer).
func (c *Conn) armLocked(d time.Duration, earlier bool) {
	t := c.start.Add(d)
	if t.Equal(c.armed) || earlier && t.After(c.armed) {
		return
	}
	c.armed = t
	_ = c.port.SetReadDeadline(t)
}

func (c *Conn) notifyLocked() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// waitLocked releases the lock until the state changes, ctx ends or the
// Conn closes.
func (c *Conn) waitLocked(ctx context.Context) error {
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	w := c.wake
	c.mu.Unlock()
	defer c.mu.Lock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}
