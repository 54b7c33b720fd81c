// Package ringtest is a small stand-in for the agent's host interface,
// for testing clients' use of ring pairs (hostif/ring) end to end without
// the coherence engine: it speaks HELLO and RINGS on a dpu0-style socket
// and serves ALLOC, LOAD, STORE, CAS and FETCH_ADD from in-memory pages,
// over the socket and over the ring pair alike, and counts which way each
// request came. It is a test double: the real agent's server is package
// hostif.
package ringtest

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/ring"
	"github.com/aitherion/dpu/hostif/wire"
)

// Options tune the stand-in.
type Options struct {
	// NoRings makes RINGS fail with ENOSYS, like a server without rings.
	NoRings bool
	// Spin is how many empty polls of the ring the agent makes before it
	// sleeps on the bell (0: sleep at once).
	Spin int
}

// Agent is a running stand-in.
type Agent struct {
	Path string // the socket

	// Requests served, by the way they came.
	OnRing, OnSocket atomic.Int64
	// Ops served on the ring, by op.
	RingOps [wire.OpRings + 1]atomic.Int64
	// Stall stops the agent from taking submissions off rings while set.
	Stall atomic.Bool

	opts Options
	l    *net.UnixListener
	wg   sync.WaitGroup

	mu     sync.Mutex
	pages  map[uint64]*[wire.PageSize]byte // by page number
	next   uint64                          // next page number ALLOC hands out
	conns  map[*net.UnixConn]struct{}
	closed bool
}

// Start serves at a new socket until the test ends.
func Start(tb testing.TB, opts Options) *Agent {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ringtest")
	if err != nil {
		tb.Fatal(err)
	}
	a := &Agent{Path: filepath.Join(dir, "dpu0.sock"), opts: opts, pages: map[uint64]*[wire.PageSize]byte{},
		next: 1, conns: map[*net.UnixConn]struct{}{}}
	if a.l, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: a.Path, Net: "unixpacket"}); err != nil {
		tb.Fatal(err)
	}
	a.wg.Go(a.accept)
	tb.Cleanup(func() {
		a.l.Close()
		a.mu.Lock()
		a.closed = true
		for c := range a.conns {
			c.Close()
		}
		a.mu.Unlock()
		a.wg.Wait()
		os.RemoveAll(dir)
	})
	return a
}

func (a *Agent) accept() {
	for {
		c, err := a.l.AcceptUnix()
		if err != nil {
			return
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			c.Close()
			return
		}
		a.conns[c] = struct{}{}
		a.mu.Unlock()
		a.wg.Go(func() { a.serve(c) })
	}
}

// serve runs one connection: socket requests here, ring requests on a
// second goroutine once RINGS made a pair.
func (a *Agent) serve(c *net.UnixConn) {
	var stop atomic.Bool
	var ringDone sync.WaitGroup
	defer func() {
		stop.Store(true)
		c.Close()
		ringDone.Wait()
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
	}()
	in := make([]byte, wire.MaxMessage+1)
	var out []byte
	hello, rings := false, false
	for {
		n, err := c.Read(in)
		if err != nil || n == 0 {
			return
		}
		var r wire.Request
		var fds []int
		out = out[:0]
		switch err := wire.DecodeRequest(in[:n], &r); {
		case err != nil:
			out = reply(out, wire.PeekID(in[:n]), wire.OpHello, syscall.EINVAL, nil)
		case !hello && r.Op != wire.OpHello:
			out = reply(out, r.ID, r.Op, syscall.EINVAL, nil)
		case r.Op == wire.OpHello:
			hello = true
			var fd int
			out, fd, err = a.hello(out, &r)
			if err != nil {
				return
			}
			fds = []int{fd}
		case r.Op == wire.OpRings:
			switch {
			case a.opts.NoRings:
				out = reply(out, r.ID, r.Op, syscall.ENOSYS, nil)
			case rings:
				out = reply(out, r.ID, r.Op, syscall.EEXIST, nil)
			default:
				p, err := ring.New(ring.Fit(r.RingEntries, r.RingSlotSize))
				if err != nil {
					out = reply(out, r.ID, r.Op, syscall.ENOMEM, nil)
					break
				}
				rings = true
				cfg := p.Config()
				body := (&wire.Rings{Entries: cfg.Entries, SlotSize: cfg.SlotSize, MapSize: uint64(cfg.MapSize())}).Append(nil)
				out = reply(out, r.ID, r.Op, 0, body)
				m, b := p.TakeHostFDs()
				fds = []int{m, b}
				ringDone.Go(func() {
					a.serveRing(p, &stop)
					p.Close()
					c.Close() // a corrupt ring ends the connection
				})
			}
		default:
			a.OnSocket.Add(1)
			out = a.do(out, &r)
		}
		_, _, err = c.WriteMsgUnix(out, unix.UnixRights(fds...), nil)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil {
			return
		}
	}
}

// serveRing is the ring side of a connection: pop a batch, serve it, push
// the replies, flush; spin a while when idle, then sleep on the bell.
func (a *Agent) serveRing(p *ring.Pair, stop *atomic.Bool) {
	in := make([]byte, p.Config().MaxMessage())
	var out []byte
	fds := []unix.PollFd{{Fd: int32(p.Bell()), Events: unix.POLLIN}}
	idle := 0
	for !stop.Load() {
		if a.Stall.Load() {
			time.Sleep(time.Millisecond)
			continue
		}
		served := 0
		for served < 32 {
			n, ok, err := p.Pop(in)
			if err != nil {
				return
			}
			if !ok {
				break
			}
			var r wire.Request
			out = out[:0]
			if err := wire.DecodeRequest(in[:n], &r); err != nil {
				out = reply(out, wire.PeekID(in[:n]), wire.OpHello, syscall.EINVAL, nil)
			} else if r.Op == wire.OpHello || r.Op == wire.OpMap || r.Op == wire.OpRings {
				out = reply(out, r.ID, r.Op, syscall.EINVAL, nil)
			} else {
				a.OnRing.Add(1)
				if r.Op <= wire.OpRings {
					a.RingOps[r.Op].Add(1)
				}
				out = a.do(out, &r)
			}
			if err := p.Push(out); err != nil {
				return // the host does not reap: a real agent would hold the reply
			}
			served++
		}
		if served > 0 {
			if p.Flush() != nil {
				return
			}
			idle = 0
			continue
		}
		if idle++; idle <= a.opts.Spin {
			continue
		}
		if !p.SetNeedWakeup(true) {
			_, _ = unix.Poll(fds, 20)
			p.DrainBell()
		}
		p.SetNeedWakeup(false)
	}
}

// hello answers HELLO with a status table memfd.
func (a *Agent) hello(out []byte, r *wire.Request) ([]byte, int, error) {
	const slots = 16
	fd, err := unix.MemfdCreate("status", unix.MFD_CLOEXEC)
	if err == nil {
		err = unix.Ftruncate(fd, slots*wire.SlotSize)
	}
	if err != nil {
		return nil, -1, err
	}
	h := wire.Hello{Version: wire.Pick(r.Min, r.Max, wire.VersionMin, wire.VersionMax), Min: wire.VersionMin,
		Max: wire.VersionMax, MaxOutstanding: 64, PageSize: wire.PageSize, Machine: 1, StatusSlots: slots,
		MaxMapPages: wire.MaxMapPages, MaxMessage: wire.MaxMessage, ConnID: 1}
	return reply(out, r.ID, wire.OpHello, 0, h.Append(nil)), fd, nil
}

// do serves one data request.
func (a *Agent) do(out []byte, r *wire.Request) []byte {
	le := binary.LittleEndian
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Op == wire.OpAlloc {
		g := gva.GVA{Hi: 1, Lo: a.next * wire.PageSize}
		a.next += uint64(r.Pages())
		h := wire.Header{Op: r.Op, Kind: wire.KindReply, ID: r.ID, GVA: g}
		return le.AppendUint64(h.Append(out), uint64(r.Pages()))
	}
	pg := a.pages[r.GVA.Lo/wire.PageSize]
	if pg == nil {
		pg = new([wire.PageSize]byte)
		a.pages[r.GVA.Lo/wire.PageSize] = pg
	}
	off := int(r.GVA.Offset())
	switch r.Op {
	case wire.OpLoad:
		return reply(out, r.ID, r.Op, 0, append(le.AppendUint64(nil, 1), pg[off:off+int(r.Len)]...))
	case wire.OpStore:
		copy(pg[off:], r.Data)
		return reply(out, r.ID, r.Op, 0, le.AppendUint64(nil, 1))
	case wire.OpCAS:
		old := le.Uint64(pg[off:])
		if old == r.Expected {
			le.PutUint64(pg[off:], r.Desired)
		}
		return reply(out, r.ID, r.Op, 0, le.AppendUint64(le.AppendUint64(nil, old), 1))
	case wire.OpFetchAdd:
		old := le.Uint64(pg[off:])
		le.PutUint64(pg[off:], old+r.Delta)
		return reply(out, r.ID, r.Op, 0, le.AppendUint64(le.AppendUint64(nil, old), 1))
	}
	return reply(out, r.ID, r.Op, syscall.ENOSYS, []byte(fmt.Sprintf("%s: not served by ringtest", r.Op)))
}

func reply(out []byte, id uint64, op wire.Op, errno syscall.Errno, body []byte) []byte {
	h := wire.Header{Op: op, Kind: wire.KindReply, Status: uint32(errno), ID: id}
	return append(h.Append(out), body...)
}
