package ring

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client is the host's side of a ring pair: it produces the submission
// ring and consumes the completion ring. Submit and Reap may run on two
// goroutines at once (each ring has one producer and one consumer), but
// each of them on one goroutine at a time; Close only when neither runs.
type Client struct {
	cfg  Config
	mem  []byte
	fd   int
	bell *os.File // the host's end of the bell, in the runtime's poller
	rc   syscall.RawConn

	sq producer
	cq consumer
}

// Attach maps the ring pair the agent passed (the memfd and the host's end
// of the bell, as in the RINGS reply), after checking the memfd's seals,
// size and control page. It takes ownership of both descriptors, also on
// failure.
func Attach(memfd, bell int) (*Client, error) {
	cfg, mem, err := mapMemfd(memfd)
	if err != nil {
		_ = unix.Close(memfd)
		_ = unix.Close(bell)
		return nil, err
	}
	c := &Client{cfg: cfg, mem: mem, fd: memfd}
	if err := unix.SetNonblock(bell, true); err != nil {
		_ = unix.Close(bell)
		c.Close()
		return nil, fmt.Errorf("ring: bell: %w", err)
	}
	c.bell = os.NewFile(uintptr(bell), "dpu-ring-bell")
	if c.rc, err = c.bell.SyscallConn(); err != nil {
		c.Close()
		return nil, fmt.Errorf("ring: bell: %w", err)
	}
	sw, err := ringWords(mem, offSQProducer, offSQConsumer, offSQFlags)
	if err != nil {
		c.Close()
		return nil, err
	}
	cw, err := ringWords(mem, offCQProducer, offCQConsumer, offCQFlags)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.sq = newProducer(sw, newSlots(mem[cfg.sqOff():cfg.cqOff()], cfg))
	c.cq = newConsumer(cw, newSlots(mem[cfg.cqOff():], cfg))
	if _, err := c.sq.free(); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := c.cq.refresh(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Config returns the pair's sizes.
func (c *Client) Config() Config { return c.cfg }

// Submit publishes msg on the submission ring and rings the bell if the
// agent asked for a wakeup. ErrFull: the agent has not consumed enough
// yet; ErrTooLarge: msg does not fit a slot.
func (c *Client) Submit(msg []byte) error {
	if c.mem == nil {
		return ErrClosed
	}
	if len(msg) == 0 || len(msg) > c.cfg.MaxMessage() {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(msg), c.cfg.MaxMessage())
	}
	free, err := c.sq.free()
	if err != nil {
		return err
	}
	if free == 0 {
		return ErrFull
	}
	c.sq.put(msg)
	c.sq.publish()
	if c.sq.flags.Load()&NeedWakeup != 0 {
		_ = c.rc.Write(func(fd uintptr) bool {
			ring(int(fd))
			return true
		})
	}
	return nil
}

// Reap copies the next completion into dst (wire.MaxMessage bytes hold any)
// and hands its slot back. ok is false when none is ready.
func (c *Client) Reap(dst []byte) (n int, ok bool, err error) {
	if c.mem == nil {
		return 0, false, ErrClosed
	}
	if c.cq.available() == 0 {
		return 0, false, nil
	}
	if n, err = c.cq.take(dst); err != nil {
		return 0, false, err
	}
	c.cq.release()
	return n, true, nil
}

// Ready reports whether a completion is ready to reap.
func (c *Client) Ready() (bool, error) {
	if c.mem == nil {
		return false, ErrClosed
	}
	return c.cq.available() > 0, nil
}

// Wait blocks until a completion is ready or timeout passes, and reports
// whether one is ready. It raises HOST_WAITING, checks the ring once more
// (the other half of the agent's publish-then-check), sleeps on the bell,
// and lowers the flag before it returns. Only the reaping goroutine calls
// it.
func (c *Client) Wait(timeout time.Duration) (bool, error) {
	if ok, err := c.Ready(); ok || err != nil {
		return ok, err
	}
	c.cq.flags.Store(HostWaiting)
	defer c.cq.flags.Store(0)
	if n, err := c.cq.refresh(); n > 0 || err != nil {
		return n > 0, err
	}
	if err := c.bell.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return false, fmt.Errorf("ring: bell: %w", err)
	}
	err := c.rc.Read(func(fd uintptr) bool {
		return drain(int(fd), 64) > 0
	})
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return false, fmt.Errorf("ring: bell: %w", err)
	}
	n, err := c.cq.refresh()
	return n > 0, err
}

// Close unmaps the pair and closes its descriptors.
func (c *Client) Close() error {
	if c.mem != nil {
		_ = unix.Munmap(c.mem)
		c.mem = nil
	}
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	if c.bell != nil {
		_ = c.bell.Close()
		c.bell = nil
	}
	c.sq, c.cq = producer{}, consumer{}
	return nil
}
