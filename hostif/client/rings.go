package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/hostif/ring"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/nbio"
)

// rings is the client's side of a ring pair (PROTOCOL.md §12), when the
// server offered one. Requests whose replies carry no descriptor go on the
// submission ring; their callers spin on the completion ring for a while
// (reaping for everyone), then park; one reaper goroutine sleeps on the
// bell for parked callers and for replies nobody waits for any more
// (abandoned calls, to be undone).
type rings struct {
	spin time.Duration

	subMu sync.Mutex // serialises submitters (the ring has one producer)
	// reapMu serialises reapers (the ring has one consumer); buf is theirs.
	reapMu sync.Mutex
	buf    []byte
	rc     *ring.Client // nil once closed (guarded by both mutexes)

	spinning atomic.Int32 // callers spinning on the completion ring
	inflight atomic.Int32 // submitted, not yet reaped
	kick     chan struct{}
}

// ringsOff reports whether the environment forbids rings (DPU_RINGS=0).
func ringsOff() bool { return os.Getenv("DPU_RINGS") == "0" }

// askRings asks the server for a ring pair on the fresh connection (before
// the reader runs). A server without rings (ENOSYS, EOPNOTSUPP, or EINVAL
// from one that does not know the op) leaves the client on the socket; a
// broken offer is a protocol violation.
func (c *Client) askRings(ctx context.Context) error {
	r := wire.Request{Header: wire.Header{Op: wire.OpRings, ID: c.nextID.Add(1)},
		RingEntries: max(c.hello.MaxOutstanding, ring.DefaultEntries)}
	h, body, fds, err := c.exchange(ctx, &r)
	if err != nil {
		return err
	}
	if h.Status != 0 {
		closeAll(fds)
		switch syscall.Errno(h.Status) {
		case syscall.ENOSYS, syscall.EOPNOTSUPP, syscall.EINVAL:
			return nil
		}
		return &Error{Op: wire.OpRings, Errno: syscall.Errno(h.Status), Text: string(body)}
	}
	var rep wire.Rings
	if err := rep.Decode(body); err != nil || len(fds) != 2 {
		closeAll(fds)
		return fmt.Errorf("%w: rings reply %+v with %d descriptors: %v", ErrProtocol, rep, len(fds), err)
	}
	rc, err := ring.Attach(fds[0], fds[1])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if cfg := rc.Config(); cfg.Entries != rep.Entries || cfg.SlotSize != rep.SlotSize || uint64(cfg.MapSize()) != rep.MapSize {
		rc.Close()
		return fmt.Errorf("%w: rings reply %+v for a ring of %+v", ErrProtocol, rep, cfg)
	}
	spin := c.opts.RingSpin
	if spin == 0 {
		spin = 50 * time.Microsecond
	}
	c.rings = &rings{spin: spin, rc: rc, buf: make([]byte, rc.Config().MaxMessage()), kick: make(chan struct{}, 1)}
	return nil
}

// Rings reports whether the client talks to the server through a ring
// pair.
func (c *Client) Rings() bool { return c.rings != nil }

// onRing reports whether a request of op travels on the ring.
func onRing(op wire.Op) bool {
	return !op.SocketOnly()
}

// submit puts msg on the submission ring. false: it did not fit (a full
// ring or a closed one), and the caller sends it on the socket instead.
func (g *rings) submit(msg []byte) bool {
	g.subMu.Lock()
	defer g.subMu.Unlock()
	if g.rc == nil {
		return false
	}
	g.inflight.Add(1)
	if err := g.rc.Submit(msg); err != nil {
		g.inflight.Add(-1)
		return false
	}
	return true
}

// reap hands every ready completion to its call. Called with reapMu held.
func (c *Client) reap() {
	g := c.rings
	for g.rc != nil {
		n, ok, err := g.rc.Reap(g.buf)
		if err != nil {
			c.fail(err) // a broken ring: the connection is unusable
			return
		}
		if !ok {
			return
		}
		g.inflight.Add(-1)
		c.take(g.buf[:n], nil)
	}
}

// spin reaps for up to the spin budget, until cl's reply came (true).
func (c *Client) spin(cl *call) bool {
	g := c.rings
	g.spinning.Add(1)
	defer func() {
		if g.spinning.Add(-1) == 0 && g.inflight.Load() > 0 {
			select {
			case g.kick <- struct{}{}:
			default:
			}
		}
	}()
	end := time.Now().Add(g.spin)
	for i := 0; ; i++ {
		if g.reapMu.TryLock() {
			c.reap()
			g.reapMu.Unlock()
		}
		select {
		case <-cl.done:
			cl.done <- struct{}{} // leave it for the caller's wait
			return true
		default:
		}
		if i%16 == 15 && time.Now().After(end) {
			return false
		}
		if i < 256 {
			// a PAUSE per look, and now and then the other goroutines of
			// this P (a round through the scheduler per look cost more
			// than the agent's whole answer)
			nbio.Pause()
			if i%16 == 15 {
				runtime.Gosched()
			}
		} else {
			// On a machine with fewer cores than busy threads the agent
			// may need this core: let the kernel run it.
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
}

// reaper sleeps on the bell while ring requests are in flight and nobody
// spins for them, and delivers what comes.
func (c *Client) reaper() {
	g := c.rings
	for {
		if g.spinning.Load() > 0 || g.inflight.Load() == 0 {
			select {
			case <-g.kick:
				continue
			case <-c.done:
				return
			}
		}
		select {
		case <-c.done:
			return
		default:
		}
		g.reapMu.Lock()
		if g.rc != nil {
			c.reap()
			if g.spinning.Load() == 0 && g.inflight.Load() > 0 {
				if _, err := g.rc.Wait(100 * time.Millisecond); err != nil && !errors.Is(err, ring.ErrClosed) {
					c.fail(err)
				}
				c.reap()
			}
		}
		g.reapMu.Unlock()
	}
}

// close unmaps the ring pair; no reaper or submitter runs any more.
func (g *rings) close() {
	g.subMu.Lock()
	g.reapMu.Lock()
	if g.rc != nil {
		g.rc.Close()
		g.rc = nil
	}
	g.reapMu.Unlock()
	g.subMu.Unlock()
}

// exchange sends r and reads its reply synchronously, on a connection
// whose reader does not run yet; ctx bounds it.
func (c *Client) exchange(ctx context.Context, r *wire.Request) (wire.Header, []byte, []int, error) {
	dl, _ := ctx.Deadline()
	_ = c.uc.SetDeadline(dl)
	defer c.uc.SetDeadline(time.Time{})
	if _, err := c.uc.Write(wire.AppendRequest(nil, r)); err != nil {
		return wire.Header{}, nil, nil, fmt.Errorf("hostif client: %s: %w", r.Op, err)
	}
	buf := make([]byte, wire.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := c.uc.ReadMsgUnix(buf, oob)
		if err != nil {
			return wire.Header{}, nil, nil, fmt.Errorf("hostif client: %s: %w", r.Op, err)
		}
		fds := parseRights(oob[:oobn])
		h, body, err := wire.DecodeReply(buf[:n])
		if err == nil && h.Kind == wire.KindReply && h.ID == r.ID && h.Op == r.Op {
			return h, body, fds, nil
		}
		closeAll(fds)
		if err != nil || h.Kind != wire.KindEvent {
			return h, nil, nil, fmt.Errorf("%w: %s reply %+v: %v", ErrProtocol, r.Op, h, err)
		}
	}
}
