package link

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/internal/nbio"
	"github.com/aitherion/dpu/noc"
)

// channelReadBatch bounds the datagrams the reader takes from one channel
// per look: small enough that the stripe's reorder buffer holds one batch
// of every channel, large enough that a batch costs one system call for
// many datagrams.
const channelReadBatch = 32

// burstLen is the longest run of a write batch kept on one channel: a
// batch that short costs one system call, whatever the channel count.
const burstLen = 16

// waitSlice bounds one wait of a blocked ReadDatagram, so that a deadline
// moved while it waits is seen in time even without a wake-up.
const waitSlice = 100 * time.Millisecond

// StripedPort is a noc.Port over several channel ports joined by a Stripe:
// a multi-channel link's datagram path. Each channel is itself a noc.Port
// (a UDP socket, an AF_XDP queue, a queue pair, or any of those wrapped).
//
// It is run to completion by its reader, like a single port: a channel
// that can be polled and waited for (noc.Poller and noc.Waitable, as UDP,
// AF_XDP and AF_PACKET ports are) is read by the port's own reader, in
// batches (recvmmsg where the channel has it), and the port's ReadyFD is
// an epoll set of those channels' descriptors, so a driver's loop waits
// for all of them at once and no goroutine or hand-off stands between a
// datagram and its reader. Writes go out in one batch per channel
// (sendmmsg). Only a channel without a descriptor (an in-memory port) has
// a feeder goroutine of its own, and one housekeeping goroutine runs the
// stripe's timers (heartbeats, dead channels, gaps held too long).
//
// It is safe for one concurrent reader and one concurrent writer, like
// every port. Close closes the channels.
type StripedPort struct {
	name  string
	chans []noc.Port
	start time.Time
	log   *slog.Logger

	mu sync.Mutex // guards st
	st *Stripe

	polled  []bool // channel i is read by the port's reader itself
	rd      reader
	wr      writer
	wmu     []sync.Mutex // one writer per channel at a time
	fdmu    sync.RWMutex // held for reading while epfd and bell are used
	epfd    int          // the polled channels' descriptors and bell
	bell    int          // eventfd: the stripe holds datagrams for the reader
	bellSet atomic.Bool  // bell may be readable

	deadline atomic.Int64 // read deadline, UnixNano; 0: none
	waiting  atomic.Bool  // a ReadDatagram waits on epfd
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	writeErrors, readErrors atomic.Uint64
}

// reader is the state of the port's one reader.
type reader struct {
	bufs    [][][]byte // per channel: a batch of receive buffers
	lens    [][]int
	ctlBufs [][]byte // control datagrams owed after a read: their buffers,
	ctl     [][]byte // the datagrams
	ctlC    []int    // and their channels
	one     [1][]byte
	oneN    [1]int
	got     []int             // per channel: datagrams read by the last look
	fds     []int             // per channel: its ready descriptor (polled only)
	evs     []unix.EpollEvent // one look at the epoll set
}

// writer is the state of the port's one writer.
type writer struct {
	bufs  [][]byte // channel datagrams of one batch
	chans []int    // the channel of each (-1: refused)
	group [][]byte
	one   [1][]byte
	via   int // the channel of the current run
	left  int // datagrams the run may still take
}

var (
	_ noc.Port        = (*StripedPort)(nil)
	_ noc.Poller      = (*StripedPort)(nil)
	_ noc.BatchPoller = (*StripedPort)(nil)
	_ noc.BatchWriter = (*StripedPort)(nil)
	_ noc.Waitable    = (*StripedPort)(nil)
	_ noc.Flusher     = (*StripedPort)(nil)
)

// StripedPortOption changes how NewStripedPort builds a port.
type StripedPortOption func(*StripedPort)

// WithChannelLog logs every channel that comes up or is dropped.
func WithChannelLog(log *slog.Logger) StripedPortOption {
	return func(p *StripedPort) { p.log = log }
}

// NewStripedPort joins chans (two or more) into one port named name. A zero
// cfg.Channels, MTU or Session is filled in: the number of channels, the
// smallest channel MTU and a random session. The port owns the channels
// from then on, also when it fails.
func NewStripedPort(name string, chans []noc.Port, cfg StripeConfig, opts ...StripedPortOption) (*StripedPort, error) {
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
		name:   name,
		chans:  chans,
		start:  time.Now(),
		st:     st,
		polled: make([]bool, len(chans)),
		wmu:    make([]sync.Mutex, len(chans)),
		epfd:   -1,
		bell:   -1,
		done:   make(chan struct{}),
	}
	for _, o := range opts {
		o(p)
	}
	if err := p.openWait(); err != nil {
		p.closeFDs()
		closeAll()
		return nil, err
	}
	batch := max(1, min(channelReadBatch, cfg.Reorder/(2*len(chans))))
	p.rd.bufs = make([][][]byte, len(chans))
	p.rd.lens = make([][]int, len(chans))
	p.rd.got = make([]int, len(chans))
	p.rd.evs = make([]unix.EpollEvent, len(chans)+1)
	for i, c := range chans {
		if !p.polled[i] {
			continue
		}
		p.rd.bufs[i] = make([][]byte, batch)
		for k := range p.rd.bufs[i] {
			p.rd.bufs[i][k] = make([]byte, c.MTU())
		}
		p.rd.lens[i] = make([]int, batch)
	}
	p.wg.Add(1)
	for i := range chans {
		if !p.polled[i] {
			p.wg.Add(1)
			go p.feed(i)
		}
	}
	go p.housekeep()
	return p, nil
}

// openWait builds the epoll set the reader waits on: the bell and every
// channel that can be polled and has a ready descriptor.
func (p *StripedPort) openWait() error {
	var err error
	if p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("link: %s: epoll: %w", p.name, err)
	}
	if p.bell, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("link: %s: eventfd: %w", p.name, err)
	}
	add := func(fd int) error {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("link: %s: epoll add: %w", p.name, err)
		}
		return nil
	}
	if err := add(p.bell); err != nil {
		return err
	}
	p.rd.fds = make([]int, len(p.chans))
	for i, c := range p.chans {
		p.rd.fds[i] = -1
		_, isPoller := c.(noc.Poller)
		w, ok := c.(noc.Waitable)
		if !ok || !isPoller {
			continue
		}
		fd, err := w.ReadyFD()
		if err != nil {
			continue // read by a feeder
		}
		if err := add(fd); err != nil {
			return err
		}
		p.polled[i], p.rd.fds[i] = true, fd
	}
	return nil
}

func (p *StripedPort) closeFDs() {
	for _, fd := range []*int{&p.epfd, &p.bell} {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

func (p *StripedPort) now() time.Duration { return time.Since(p.start) }

// Name implements noc.Port.
func (p *StripedPort) Name() string { return p.name }

// MTU implements noc.Port: the smallest channel MTU less the channel
// header.
func (p *StripedPort) MTU() int { return p.st.MTU() }

// Channels returns the channel ports, in channel order.
func (p *StripedPort) Channels() []noc.Port { return p.chans }

// ReadyFD implements noc.Waitable: an epoll set that polls readable while
// a channel the port reads itself holds a datagram, or the stripe holds
// datagrams in order for the reader (from a feeder, from a gap given up,
// or left over from a batch that filled the caller's buffers).
func (p *StripedPort) ReadyFD() (int, error) { return p.epfd, nil }

// WriteDatagram implements noc.Port: b goes out on the channel the
// stripe's policy picks. With no channel up, or every window full, the
// datagram is refused (ErrNoChannel, ErrChannelsFull) and the link above
// sends it again later.
func (p *StripedPort) WriteDatagram(b []byte) error {
	p.wr.one[0] = b
	err := p.WriteDatagrams(p.wr.one[:])
	p.wr.one[0] = nil
	return err
}

// WriteDatagrams implements noc.BatchWriter: each datagram goes to the
// channel the stripe's policy picks, and each channel's share goes out in
// one batch (one sendmmsg on UDP). A datagram the stripe refuses (no
// channel up, every window full) is dropped and the first such error
// returned, after the others were written.
func (p *StripedPort) WriteDatagrams(bufs [][]byte) error {
	w := &p.wr
	mtu := p.st.cfg.MTU
	for len(w.bufs) < len(bufs) {
		w.bufs = append(w.bufs, make([]byte, mtu))
		w.chans = append(w.chans, -1)
	}
	var refused error
	var used uint64 // channels with datagrams of this batch
	// Runs of burstLen datagrams, across calls, stay on one channel: a
	// burst costs one batch write, and the receiver finds it on one
	// channel, in order. A batch longer than the channels' share of
	// burstLen each is spread over every channel in runs of its share.
	run := max(burstLen, (len(bufs)+len(p.chans)-1)/len(p.chans))
	p.mu.Lock()
	now := p.now()
	for i, b := range bufs {
		if w.left <= 0 || len(bufs) > run && i%run == 0 {
			w.via, w.left = -1, run // the policy picks the run's channel
		}
		c, n, err := p.st.SendVia(now, w.via, b, w.bufs[i][:mtu])
		if err != nil {
			w.chans[i] = -1
			if refused == nil {
				refused = fmt.Errorf("link: %s: %w", p.name, err)
			}
			continue
		}
		if c != w.via {
			w.via, w.left = c, run // a new run (the policy's pick, or the old channel was full)
		}
		w.chans[i], w.bufs[i] = c, w.bufs[i][:n]
		w.left--
		used |= 1 << c
	}
	// The channels' writer locks are taken before the stripe's lock is
	// let go: a control datagram made after this (an ack, a heartbeat)
	// says which stripe places were sent, and goes out on its channel only
	// after the datagrams of those places, so the receiver never gives up
	// a place whose datagram is still on its way.
	for c := range p.chans {
		if used&(1<<c) != 0 {
			p.wmu[c].Lock()
		}
	}
	p.mu.Unlock()
	var errs []error
	for c := range p.chans {
		if used&(1<<c) == 0 {
			continue
		}
		w.group = w.group[:0]
		for i := range bufs {
			if w.chans[i] == c {
				w.group = append(w.group, w.bufs[i])
			}
		}
		err := p.writeLocked(c, w.group)
		p.wmu[c].Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("link: %s channel %d: %w", p.name, c, err))
		}
	}
	clear(w.group[:cap(w.group)])
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return refused
}

// writeChannel writes datagrams on channel c (in one batch where it has
// batch writes), counting a failure.
func (p *StripedPort) writeChannel(c int, group [][]byte) error {
	p.wmu[c].Lock()
	defer p.wmu[c].Unlock()
	return p.writeLocked(c, group)
}

// writeLocked is writeChannel under wmu[c].
func (p *StripedPort) writeLocked(c int, group [][]byte) error {
	var err error
	if bw, ok := p.chans[c].(noc.BatchWriter); ok {
		err = bw.WriteDatagrams(group)
	} else {
		for _, d := range group {
			if e := p.chans[c].WriteDatagram(d); e != nil && err == nil {
				err = e
			}
		}
	}
	if err != nil {
		p.writeErrors.Add(1)
	}
	return err
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

// TryReadDatagrams implements noc.BatchPoller: it fills up to len(bufs)
// buffers with link datagrams in stripe order, without waiting: first
// those the stripe already holds in order, then, while room is left, what
// one look at the channels brings (one epoll look says which channels the
// port reads itself have datagrams; each of those is read in one batch).
// What is in order but did not fit waits in the stripe (and keeps ReadyFD
// readable) for the next call.
func (p *StripedPort) TryReadDatagrams(bufs [][]byte, lens []int) (int, error) {
	return p.tryRead(bufs, lens, true)
}

// tryRead is TryReadDatagrams; with announce, what is left in order rings
// the bell (for a driver that waits on ReadyFD); ReadDatagram, which looks
// at the stripe itself before it waits, does without.
func (p *StripedPort) tryRead(bufs [][]byte, lens []int, announce bool) (int, error) {
	want := min(len(bufs), len(lens))
	if want == 0 {
		return 0, nil
	}
	p.fdmu.RLock()
	defer p.fdmu.RUnlock()
	if p.epfd < 0 {
		return 0, noc.ErrPortClosed
	}
	p.drainBell()
	r := &p.rd
	p.mu.Lock()
	n := p.receiveLocked(bufs[:want], lens)
	room := p.st.Room()
	p.mu.Unlock()
	if n == want {
		if announce {
			p.ringBell() // there may be more
		}
		return n, nil
	}
	k := len(p.chans)
	// A look reads no more from each channel than its share of what the
	// caller has room for, and than its share of half the order buffer's
	// room: channels interleave their places, so what a look brings
	// stays within the buffer, and nothing in order waits there long.
	perChannel := min(channelReadBatch, (want-n+k-1)/k, room/(2*k))
	for c := range r.got {
		r.got[c] = 0
	}
	drained := perChannel > 0 // no channel was left with datagrams unread
	if perChannel > 0 {
		ev, err := nbio.EpollPoll(p.epfd, r.evs)
		if err != nil && !errors.Is(err, unix.EINTR) {
			p.readErrors.Add(1)
		}
		for _, e := range r.evs[:max(ev, 0)] {
			c := p.channelOf(int(e.Fd))
			if c < 0 {
				continue // the bell
			}
			ask := min(perChannel, len(r.bufs[c]))
			m, err := p.readChannel(c, r.bufs[c][:ask], r.lens[c])
			r.got[c] = m
			drained = drained && m < ask
			if err != nil {
				// a channel that failed or closed under the port is one
				// channel less (the stripe drops it when it stays silent),
				// not the end of the port
				p.readErrors.Add(1)
			}
		}
	}
	r.ctl, r.ctlC = r.ctl[:0], r.ctlC[:0]
	p.mu.Lock()
	now := p.now()
	for c, m := range r.got {
		for i := range m {
			_ = p.st.Input(now, c, r.bufs[c][i][:r.lens[c][i]]) // refused datagrams are counted
		}
		if m > 0 {
			p.controlLocked(now, c)
		}
	}
	// A gap held past ReorderHold is given up here, by the reader, and
	// only after a look that left no channel with datagrams unread: the
	// datagram that fills it is not waiting in a channel.
	if drained {
		p.st.Tick(now)
	} else {
		p.st.TickChannels(now)
	}
	n += p.receiveLocked(bufs[n:want], lens[n:])
	left := p.st.Ready()
	evs, nev := p.takeEventsLocked()
	p.mu.Unlock()
	p.writeControl()
	p.report(evs[:nev])
	if left && announce {
		p.ringBell()
	}
	if n == 0 {
		select {
		case <-p.done:
			return 0, noc.ErrPortClosed
		default:
		}
	}
	return n, nil
}

// receiveLocked copies the datagrams the stripe holds in order into bufs.
func (p *StripedPort) receiveLocked(bufs [][]byte, lens []int) int {
	n := 0
	for n < len(bufs) {
		d, ok := p.st.Receive()
		if !ok {
			break
		}
		lens[n] = copy(bufs[n], d)
		n++
	}
	return n
}

// channelOf is the polled channel whose ready descriptor is fd (-1: none,
// the bell).
func (p *StripedPort) channelOf(fd int) int {
	for c, f := range p.rd.fds {
		if f == fd && p.polled[c] {
			return c
		}
	}
	return -1
}

// readChannel reads up to len(bufs) datagrams from polled channel c
// without waiting.
func (p *StripedPort) readChannel(c int, bufs [][]byte, lens []int) (int, error) {
	ch := p.chans[c]
	if bp, ok := ch.(noc.BatchPoller); ok {
		return bp.TryReadDatagrams(bufs, lens)
	}
	poller := ch.(noc.Poller)
	n := 0
	for n < len(bufs) {
		m, ok, err := poller.TryReadDatagram(bufs[n])
		if err != nil {
			return n, err
		}
		if !ok {
			break
		}
		lens[n] = m
		n++
	}
	return n, nil
}

// controlLocked takes channel c's owed control datagrams (acks, greetings)
// into the reader's scratch, for writeControl.
func (p *StripedPort) controlLocked(now time.Duration, c int) {
	r := &p.rd
	mtu := p.st.cfg.MTU
	for {
		i := len(r.ctl)
		if i == len(r.ctlBufs) {
			r.ctlBufs = append(r.ctlBufs, make([]byte, mtu))
		}
		n, ok := p.st.Output(now, c, r.ctlBufs[i][:mtu])
		if !ok {
			return
		}
		r.ctl = append(r.ctl, r.ctlBufs[i][:n])
		r.ctlC = append(r.ctlC, c)
	}
}

// writeControl writes what controlLocked took, flushing the channels that
// batch (nobody else would).
func (p *StripedPort) writeControl() {
	r := &p.rd
	for i, d := range r.ctl {
		c := r.ctlC[i]
		r.one[0] = d
		_ = p.writeChannel(c, r.one[:]) // counted
		if f, ok := p.chans[c].(noc.Flusher); ok && (i+1 == len(r.ctl) || r.ctlC[i+1] != c) {
			p.wmu[c].Lock()
			if err := f.Flush(); err != nil {
				p.writeErrors.Add(1)
			}
			p.wmu[c].Unlock()
		}
	}
	r.one[0] = nil
}

// TryReadDatagram implements noc.Poller.
func (p *StripedPort) TryReadDatagram(b []byte) (int, bool, error) { return p.tryOne(b, true) }

func (p *StripedPort) tryOne(b []byte, announce bool) (int, bool, error) {
	r := &p.rd
	r.one[0] = b
	n, err := p.tryRead(r.one[:], r.oneN[:], announce)
	r.one[0] = nil
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		select {
		case <-p.done:
			return 0, false, noc.ErrPortClosed
		default:
		}
		return 0, false, nil
	}
	return r.oneN[0], true, nil
}

// ReadDatagram implements noc.Port: a look at the stripe and the
// channels, then a wait on ReadyFD, until a datagram comes or the
// deadline passes.
func (p *StripedPort) ReadDatagram(b []byte) (int, error) {
	evs := make([]unix.EpollEvent, 1)
	for {
		n, ok, err := p.tryOne(b, false)
		if err != nil {
			return 0, err
		}
		if ok {
			return n, nil
		}
		// waiting is raised before the deadline is read: a deadline set
		// after that read finds it raised and rings the bell
		p.waiting.Store(true)
		slice := waitSlice
		if dl := p.deadline.Load(); dl != 0 {
			left := time.Until(time.Unix(0, dl))
			if left <= 0 {
				p.waiting.Store(false)
				return 0, os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		err = p.wait(evs, slice)
		p.waiting.Store(false)
		if err != nil {
			return 0, err
		}
	}
}

// wait blocks until ReadyFD polls readable, d passes or the port closes.
func (p *StripedPort) wait(evs []unix.EpollEvent, d time.Duration) error {
	p.fdmu.RLock()
	defer p.fdmu.RUnlock()
	select {
	case <-p.done:
		return noc.ErrPortClosed
	default:
	}
	if p.epfd < 0 {
		return noc.ErrPortClosed
	}
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	if _, err := unix.EpollWait(p.epfd, evs, ms); err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("link: %s: wait: %w", p.name, err)
	}
	return nil
}

// SetReadDeadline implements noc.Port.
func (p *StripedPort) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		p.deadline.Store(0)
	} else {
		p.deadline.Store(max(t.UnixNano(), 1))
	}
	if p.waiting.Load() {
		p.ringBell() // the blocked reader looks at the new deadline
	}
	return nil
}

// ringBell makes ReadyFD readable (from any goroutine). It always writes:
// the reader drains the bell before it looks at the stripe, so a datagram
// put there before a ring is never missed.
func (p *StripedPort) ringBell() {
	p.fdmu.RLock()
	if p.bell >= 0 {
		one := [8]byte{1}
		_, _ = nbio.Write(p.bell, one[:])
		p.bellSet.Store(true)
	}
	p.fdmu.RUnlock()
}

// drainBell empties the bell if it may have rung (under fdmu).
func (p *StripedPort) drainBell() {
	if p.bellSet.Swap(false) {
		var b [8]byte
		_, _ = nbio.Read(p.bell, b[:])
	}
}

// Close implements noc.Port: it closes every channel, waits for the
// port's goroutines and releases its descriptors. A driver that waits on
// ReadyFD removes it before Close.
func (p *StripedPort) Close() error {
	var errs []error
	p.once.Do(func() {
		close(p.done)
		p.ringBell()
		for i, c := range p.chans {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("channel %d: %w", i, err))
			}
		}
		p.wg.Wait()
		p.fdmu.Lock()
		p.closeFDs()
		p.fdmu.Unlock()
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("link: %s: close: %w", p.name, err)
	}
	return nil
}

// feed is the goroutine of a channel the reader cannot poll itself: it
// puts the channel's datagrams into the stripe and rings the bell when the
// stripe has datagrams in order for the reader.
func (p *StripedPort) feed(c int) {
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
		now := p.now()
		_ = p.st.Input(now, c, buf[:n]) // refused datagrams are counted
		p.st.Tick(now)
		ready := p.st.Ready()
		evs, nev := p.takeEventsLocked()
		p.outputLocked(c, ctl)
		p.mu.Unlock()
		p.report(evs[:nev])
		if ready {
			p.ringBell()
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
		case <-p.done:
			return
		}
		p.mu.Lock()
		now := p.now()
		// gaps are the reader's to give up (after it read the channels);
		// one that is due only wakes the reader
		p.st.TickChannels(now)
		for c := range p.chans {
			p.outputLocked(c, ctl)
		}
		ready := p.st.Ready() || p.st.GapDue(now)
		evs, nev := p.takeEventsLocked()
		wait := p.st.NextDeadline() - p.now()
		p.mu.Unlock()
		p.report(evs[:nev])
		if ready {
			p.ringBell()
		}
		t.Reset(max(wait, 50*time.Microsecond))
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

// takeEventsLocked takes the stripe's channel transitions, to report once
// the lock is released.
func (p *StripedPort) takeEventsLocked() (evs [eventQueue]ChannelEvent, n int) {
	for n < len(evs) {
		ev, ok := p.st.PollEvent()
		if !ok {
			break
		}
		evs[n] = ev
		n++
	}
	return evs, n
}

// report logs channel transitions (outside every lock of the port).
func (p *StripedPort) report(evs []ChannelEvent) {
	if p.log == nil {
		return
	}
	for _, ev := range evs {
		if ev.Up {
			p.log.Info("link channel up", "port", p.name, "channel", ev.Channel, "via", p.chans[ev.Channel].Name())
		} else {
			p.log.Warn("link channel down", "port", p.name, "channel", ev.Channel, "via", p.chans[ev.Channel].Name(),
				"reason", ev.Reason.String())
		}
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
	var up, ups, downs uint64
	for _, c := range cs {
		if c.Up {
			up++
		}
		ups += c.Ups
		downs += c.Downs
	}
	return map[string]uint64{
		"stripe_channels_up":   up,
		"stripe_channel_ups":   ups,
		"stripe_channel_downs": downs,
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
