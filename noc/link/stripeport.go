package link

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

// stripeQueue is how many link datagrams a StripedPort holds for its
// reader; more are dropped (StripeStats.Overflow) and resent by the link.
const stripeQueue = 512

// StripedPort is a noc.Port over several channel ports joined by a Stripe:
// a multi-channel link's datagram path. Each channel is itself a noc.Port
// (a UDP socket, an AF_XDP queue, a queue pair, or any of those wrapped),
// read by one goroutine of its own; a housekeeping goroutine runs the
// stripe's timers. It is safe for one concurrent reader and one concurrent
// writer, like every port. Close closes the channels.
type StripedPort struct {
	name  string
	chans []noc.Port
	start time.Time

	mu sync.Mutex // guards st and the control scratch buffers
	st *Stripe

	wmu  []sync.Mutex // one writer per channel at a time
	wbuf []byte       // WriteDatagram's scratch (the one writer)

	ready chan []byte // link datagrams in stripe order
	free  chan []byte // their buffers

	dmu      sync.Mutex
	deadline time.Time
	dkick    chan struct{} // SetReadDeadline moved the deadline
	rtimer   *time.Timer   // the reader's deadline timer
	kick     chan struct{} // the stripe's next deadline moved closer
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	writeErrors, readErrors atomic.Uint64
}

var (
	_ noc.Port    = (*StripedPort)(nil)
	_ noc.Poller  = (*StripedPort)(nil)
	_ noc.Flusher = (*StripedPort)(nil)
)

// NewStripedPort joins chans (two or more) into one port named name. A zero
// cfg.Channels, MTU or Session is filled in: the number of channels, the
// smallest channel MTU and a random session. The port owns the channels
// from then on, also when it fails.
func NewStripedPort(name string, chans []noc.Port, cfg StripeConfig) (*StripedPort, error) {
	closeAll := func() {
		for _, c := range chans {
			c.Close()
		}
	}
	if cfg.Channels == 0 {
		cfg.Channels = len(chans)
	}
	if cfg.Channels != len(chans) {
		closeAll()
		return nil, fmt.Errorf("%w: stripe: %d channels configured, %d given", ErrConfig, cfg.Channels, len(chans))
	}
	if cfg.MTU == 0 {
		cfg.MTU = MaxMTU
		for _, c := range chans {
			cfg.MTU = min(cfg.MTU, c.MTU())
		}
	}
	if cfg.Session == 0 {
		cfg.Session = rand.Uint64() | 1
	}
	st, err := NewStripe(cfg, 0)
	if err != nil {
		closeAll()
		return nil, err
	}
	p := &StripedPort{
		name:  name,
		chans: chans,
		start: time.Now(),
		st:    st,
		wmu:   make([]sync.Mutex, len(chans)),
		wbuf:  make([]byte, cfg.MTU),
		ready: make(chan []byte, stripeQueue),
		free:  make(chan []byte, stripeQueue),
		dkick: make(chan struct{}, 1),
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	p.rtimer = time.NewTimer(time.Hour)
	p.rtimer.Stop()
	for range stripeQueue {
		p.free <- make([]byte, 0, st.MTU())
	}
	p.wg.Add(len(chans) + 1)
	for i := range chans {
		go p.read(i)
	}
	go p.housekeep()
	return p, nil
}

func (p *StripedPort) now() time.Duration { return time.Since(p.start) }

// Name implements noc.Port.
func (p *StripedPort) Name() string { return p.name }

// MTU implements noc.Port: the smallest channel MTU less the channel
// header.
func (p *StripedPort) MTU() int { return p.st.MTU() }

// Channels returns the channel ports, in channel order.
func (p *StripedPort) Channels() []noc.Port { return p.chans }

// WriteDatagram implements noc.Port: b goes out on the channel the
// stripe's policy picks. With no channel up, or every window full, the
// datagram is refused (ErrNoChannel, ErrChannelsFull) and the link above
// sends it again later.
func (p *StripedPort) WriteDatagram(b []byte) error {
	p.mu.Lock()
	c, n, err := p.st.Send(p.now(), b, p.wbuf)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("link: %s: %w", p.name, err)
	}
	p.wmu[c].Lock()
	err = p.chans[c].WriteDatagram(p.wbuf[:n])
	p.wmu[c].Unlock()
	if err != nil {
		p.writeErrors.Add(1)
		return fmt.Errorf("link: %s channel %d: %w", p.name, c, err)
	}
	return nil
}

// Flush implements noc.Flusher: channels that batch their writes send
// what they hold.
func (p *StripedPort) Flush() error {
	var errs []error
	for c, ch := range p.chans {
		if f, ok := ch.(noc.Flusher); ok {
			p.wmu[c].Lock()
			if err := f.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("channel %d: %w", c, err))
			}
			p.wmu[c].Unlock()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("link: %s: flush: %w", p.name, err)
	}
	return nil
}

// ReadDatagram implements noc.Port.
func (p *StripedPort) ReadDatagram(b []byte) (int, error) {
	for {
		select {
		case d := <-p.ready:
			return p.take(b, d), nil
		default:
		}
		p.dmu.Lock()
		dl := p.deadline
		p.dmu.Unlock()
		var expire <-chan time.Time
		if !dl.IsZero() {
			wait := time.Until(dl)
			if wait <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			p.rtimer.Reset(wait)
			expire = p.rtimer.C
		}
		select {
		case d := <-p.ready:
			p.rtimer.Stop()
			return p.take(b, d), nil
		case <-p.dkick:
		case <-expire:
		case <-p.done:
			p.rtimer.Stop()
			return 0, noc.ErrPortClosed
		}
	}
}

// TryReadDatagram implements noc.Poller.
func (p *StripedPort) TryReadDatagram(b []byte) (int, bool, error) {
	select {
	case d := <-p.ready:
		return p.take(b, d), true, nil
	case <-p.done:
		return 0, false, noc.ErrPortClosed
	default:
		return 0, false, nil
	}
}

func (p *StripedPort) take(b, d []byte) int {
	n := copy(b, d)
	p.free <- d[:0]
	return n
}

// SetReadDeadline implements noc.Port.
func (p *StripedPort) SetReadDeadline(t time.Time) error {
	p.dmu.Lock()
	p.deadline = t
	p.dmu.Unlock()
	select {
	case p.dkick <- struct{}{}:
	default:
	}
	return nil
}

// Close implements noc.Port: it closes every channel and waits for the
// port's goroutines.
func (p *StripedPort) Close() error {
	var errs []error
	p.once.Do(func() {
		close(p.done)
		for i, c := range p.chans {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("channel %d: %w", i, err))
			}
		}
		p.wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("link: %s: close: %w", p.name, err)
	}
	return nil
}

// read is channel c's reader.
func (p *StripedPort) read(c int) {
	defer p.wg.Done()
	ch := p.chans[c]
	buf := make([]byte, ch.MTU())
	ctl := make([]byte, p.st.cfg.MTU)
	for {
		n, err := ch.ReadDatagram(buf)
		if err != nil {
			if errors.Is(err, noc.ErrPortClosed) {
				return
			}
			p.readErrors.Add(1)
			select {
			case <-p.done:
				return
			case <-time.After(portErrorPause):
			}
			continue
		}
		p.mu.Lock()
		before := p.st.NextDeadline()
		_ = p.st.Input(p.now(), c, buf[:n]) // refused datagrams are counted
		p.deliverLocked()
		p.outputLocked(c, ctl)
		closer := p.st.NextDeadline() < before
		p.mu.Unlock()
		if closer {
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
	}
}

// housekeep runs the stripe's timers: heartbeats, dead channels and gaps
// held too long.
func (p *StripedPort) housekeep() {
	defer p.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	ctl := make([]byte, p.st.cfg.MTU)
	for {
		select {
		case <-t.C:
		case <-p.kick:
		case <-p.done:
			return
		}
		p.mu.Lock()
		now := p.now()
		p.st.Tick(now)
		p.deliverLocked()
		for c := range p.chans {
			p.outputLocked(c, ctl)
		}
		for {
			if _, ok := p.st.PollEvent(); !ok {
				break
			}
		}
		wait := p.st.NextDeadline() - p.now()
		p.mu.Unlock()
		t.Reset(max(wait, 50*time.Microsecond))
	}
}

// deliverLocked moves the datagrams the stripe has put in order to the
// reader's queue.
func (p *StripedPort) deliverLocked() {
	for {
		d, ok := p.st.Receive()
		if !ok {
			return
		}
		select {
		case b := <-p.free:
			p.ready <- append(b, d...)
		default:
			p.st.stats.Overflow++
		}
	}
}

// outputLocked writes channel c's owed control datagrams (and flushes a
// channel that batches: nobody else would).
func (p *StripedPort) outputLocked(c int, buf []byte) {
	wrote := false
	for {
		n, ok := p.st.Output(p.now(), c, buf)
		if !ok {
			break
		}
		p.wmu[c].Lock()
		err := p.chans[c].WriteDatagram(buf[:n])
		p.wmu[c].Unlock()
		if err != nil {
			p.writeErrors.Add(1)
		}
		wrote = true
	}
	if f, ok := p.chans[c].(noc.Flusher); ok && wrote {
		p.wmu[c].Lock()
		if err := f.Flush(); err != nil {
			p.writeErrors.Add(1)
		}
		p.wmu[c].Unlock()
	}
}

// Stats returns the stripe's counters and each channel's.
func (p *StripedPort) Stats() (StripeStats, []ChannelStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]ChannelStats, len(p.chans))
	for i := range cs {
		cs[i] = p.st.ChannelStats(i)
	}
	return p.st.Stats(), cs
}

// Agreed is the number of channels both ends have (0 before the peer was
// heard).
func (p *StripedPort) Agreed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Agreed()
}

// Counters returns the stripe's counters by name (the agent shows them
// with the link).
func (p *StripedPort) Counters() (map[string]uint64, error) {
	s, cs := p.Stats()
	up := 0
	for _, c := range cs {
		if c.Up {
			up++
		}
	}
	return map[string]uint64{
		"stripe_channels_up":   uint64(up),
		"stripe_held":          s.Held,
		"stripe_skipped":       s.Skipped,
		"stripe_late":          s.Late,
		"stripe_full":          s.Full,
		"stripe_overflow":      s.Overflow,
		"stripe_stale":         s.Stale,
		"stripe_malformed":     s.Malformed,
		"stripe_unsynced":      s.Unsynced,
		"stripe_peer_restarts": s.PeerRestarts,
		"stripe_write_errors":  p.writeErrors.Load(),
		"stripe_read_errors":   p.readErrors.Load(),
	}, nil
}
