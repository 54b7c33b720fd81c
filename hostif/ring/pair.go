package ring

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Pair is the agent's side of a ring pair: it consumes the submission ring
// and produces the completion ring. One goroutine drives it at a time (the
// agent's loop); it is not safe for concurrent use.
//
// A loop turn: Pop until it reports nothing (or a batch is full), Push a
// reply per finished request, then Flush once. Before sleeping, the loop
// calls SetNeedWakeup(true) and sleeps only if that reports nothing
// pending, with Bell in its poll set; after waking it calls DrainBell and
// SetNeedWakeup(false).
type Pair struct {
	cfg  Config
	mem  []byte
	fd   int // the memfd (the agent's copy; -1 once handed over and closed)
	bell int // the agent's end of the bell
	// hostFD and hostBell are the host's descriptors until TakeHostFDs.
	hostFD, hostBell int

	sq consumer
	cq producer

	needWakeup bool
	err        error // sticky: ErrCorrupt or ErrClosed
}

// New creates a ring pair of cfg (see Fit) in a new sealed memfd, and its
// bell.
func New(cfg Config) (*Pair, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	fd, mem, err := createMemfd(cfg)
	if err != nil {
		return nil, err
	}
	p := &Pair{cfg: cfg, mem: mem, fd: fd, bell: -1, hostFD: -1, hostBell: -1}
	if p.bell, p.hostBell, err = newBell(); err != nil {
		p.Close()
		return nil, err
	}
	if p.hostFD, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		p.Close()
		return nil, fmt.Errorf("ring: dup memfd: %w", err)
	}
	sw, err := ringWords(mem, offSQProducer, offSQConsumer, offSQFlags)
	if err != nil {
		p.Close()
		return nil, err
	}
	cw, err := ringWords(mem, offCQProducer, offCQConsumer, offCQFlags)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.sq = newConsumer(sw, newSlots(mem[cfg.sqOff():cfg.cqOff()], cfg))
	p.cq = newProducer(cw, newSlots(mem[cfg.cqOff():], cfg))
	return p, nil
}

// Config returns the pair's sizes (for the RINGS reply).
func (p *Pair) Config() Config { return p.cfg }

// TakeHostFDs hands over the descriptors the host needs, in the order of
// the RINGS reply: the memfd and the host's end of the bell. The caller
// owns them from then on (passes them with SCM_RIGHTS and closes its
// copies). A second call returns -1s.
func (p *Pair) TakeHostFDs() (memfd, bell int) {
	memfd, bell = p.hostFD, p.hostBell
	p.hostFD, p.hostBell = -1, -1
	return memfd, bell
}

// Bell returns the agent's end of the bell: readable when the host rang.
// Put it in the loop's poll set; call DrainBell when it is readable.
func (p *Pair) Bell() int { return p.bell }

// DrainBell consumes the pending wakeups (bounded) and returns how many
// there were.
func (p *Pair) DrainBell() int {
	if p.bell < 0 {
		return 0
	}
	return drain(p.bell, 64)
}

// Err returns the sticky error, if any.
func (p *Pair) Err() error { return p.err }

// Pop copies the next submitted message into dst (which should hold
// MaxMessage bytes of the config; wire.MaxMessage with the default) and
// returns its length. ok is false when nothing is pending. An error other
// than ErrShortBuffer is sticky and means the ring is unusable: the caller
// closes it.
func (p *Pair) Pop(dst []byte) (n int, ok bool, err error) {
	if p.err != nil {
		return 0, false, p.err
	}
	if p.sq.available() == 0 {
		if p.sq.unreleased() {
			p.sq.release()
		}
		return 0, false, nil
	}
	if n, err = p.sq.take(dst); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return 0, false, p.fail(err)
		}
		return 0, false, err
	}
	return n, true, nil
}

// Push queues reply on the completion ring; Flush publishes it. ErrFull
// means the host has not reaped enough: the caller keeps the reply and
// retries after a Flush.
func (p *Pair) Push(reply []byte) error {
	if p.err != nil {
		return p.err
	}
	if len(reply) == 0 || len(reply) > p.cfg.MaxMessage() {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(reply), p.cfg.MaxMessage())
	}
	free, err := p.cq.free()
	if err != nil {
		return p.fail(err)
	}
	if free == 0 {
		return ErrFull
	}
	p.cq.put(reply)
	return nil
}

// Flush hands the popped submission slots back to the host and publishes
// the pushed replies, ringing the bell if the host said it waits.
func (p *Pair) Flush() error {
	if p.err != nil {
		return p.err
	}
	if p.sq.unreleased() {
		p.sq.release()
	}
	if p.cq.unpublished() {
		p.cq.publish()
		if p.cq.flags.Load()&HostWaiting != 0 {
			ring(p.bell)
		}
	}
	return nil
}

// SetNeedWakeup raises or lowers NEED_WAKEUP. Raising it returns whether
// submissions are pending already (the caller must not sleep then): the
// flag is stored before the producer index is loaded again, the other half
// of the host's publish-then-check, so no submission goes unnoticed.
func (p *Pair) SetNeedWakeup(on bool) (pending bool) {
	if p.err != nil {
		return true // let the caller's next Pop see the error
	}
	if on != p.needWakeup {
		v := uint32(0)
		if on {
			v = NeedWakeup
		}
		p.sq.flags.Store(v)
		p.needWakeup = on
	}
	if !on {
		return false
	}
	if p.sq.ready != p.sq.next {
		return true
	}
	n, err := p.sq.refresh()
	if err != nil {
		p.fail(err)
		return true
	}
	return n > 0
}

// Close unmaps the memory and closes every descriptor the pair still owns.
// The host's mapping stays valid (the memfd lives until its last user).
func (p *Pair) Close() error {
	if p.mem != nil {
		_ = unix.Munmap(p.mem)
		p.mem = nil
	}
	for _, fd := range []*int{&p.fd, &p.bell, &p.hostFD, &p.hostBell} {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
	p.sq, p.cq = consumer{}, producer{}
	if p.err == nil {
		p.err = ErrClosed
	}
	return nil
}

func (p *Pair) fail(err error) error {
	if p.err == nil {
		p.err = err
	}
	return p.err
}
