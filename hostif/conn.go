package hostif

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/admit"
	"github.com/aitherion/dpu/hostif/internal/seqpacket"
	"github.com/aitherion/dpu/hostif/wire"
)

// conn is one open of the host interface: one client connection.
type conn struct {
	s      *Server
	uc     *net.UnixConn
	id     uint64
	call   verbs // the Backend in the connection's session (its id)
	cred   credentials
	ctx    context.Context // ends when the connection closes
	cancel context.CancelFunc

	sem      chan struct{} // one token per request in flight
	inflight sync.WaitGroup
	out      *seqpacket.Outbox // replies and events, batched

	// status is the connection's replica status table, made at HELLO
	// (before any MAP) and closed with the connection, after its last
	// entry was taken off the replica files.
	status *statusTable

	// Owned by the reading goroutine.
	hello   bool
	garbage int

	subs     atomic.Uint32 // SUBSCRIBE mask
	events   chan wire.Event
	lost     atomic.Bool // events were dropped since the last EventLost
	evStart  sync.Once
	evDone   chan struct{} // closed when the event writer ends (if started)
	evActive atomic.Bool
	aborted  atomic.Bool
	gpuUsed  atomic.Bool // a GPU op was served: tell the GPU handler at close

	ringMu  sync.Mutex
	ring    *connRing // the connection's ring pair, if it asked (RINGS)
	ringFDs []int     // the host's descriptors of ring, ours to close

	bulkMu sync.Mutex
	bulk   *bulkArea       // the connection's bulk area, if it asked (BULK)
	bulkQ  admit.Transfers // the bulk requests in flight and their budget
}

func newConn(ctx context.Context, s *Server, uc *net.UnixConn, cred credentials, id uint64) *conn {
	ctx, cancel := context.WithCancel(ctx)
	return &conn{
		s: s, uc: uc, id: id, cred: cred, ctx: ctx, cancel: cancel, call: verbs{be: s.be, session: Session(id)},
		sem:    make(chan struct{}, s.opts.MaxOutstanding),
		events: make(chan wire.Event, s.opts.EventQueue),
		evDone: make(chan struct{}),
	}
}

// task is one request from its arrival to its reply. Tasks are pooled.
type task struct {
	req wire.Request
	in  [wire.MaxMessage]byte
	out []byte
	rep reply
	ctx opContext
	rg  *connRing // the ring it came on; nil: the socket
	c   *conn     // its connection, while it goes through the Pipeline
	at  time.Time // when it arrived (for Options.Observe)
	end time.Time // when its completion was taken, if known (zero: read the clock)
}

// reply is what an op produces besides its error.
type reply struct {
	gva  gva.GVA
	body []byte // appended after the header in task.out
	fds  []int  // descriptors to pass (the server's own; send dups them)
}

// putTask returns t to the pool.
func putTask(t *task) {
	t.rg, t.c, t.at, t.end = nil, nil, time.Time{}, time.Time{}
	taskPool.Put(t)
}

// readBatch is the most requests read with one system call.
const readBatch = 16

var taskPool = sync.Pool{New: func() any {
	return &task{out: make([]byte, wire.HeaderLen, wire.MaxMessage)}
}}

// serve reads requests until the client goes, then releases everything the
// connection held. It reads up to readBatch requests per system call, never
// more than the free request slots.
func (c *conn) serve() {
	log := c.s.log.With("conn", c.id, "pid", c.cred.PID, "uid", c.cred.UID)
	log.Debug("connected")
	defer func() {
		c.close(log)
		log.Debug("disconnected")
	}()
	var err error
	if c.out, err = seqpacket.NewOutbox(c.uc, c.s.opts.WriteTimeout); err != nil {
		return
	}
	c.out.OnFail = c.abort
	batch, err := seqpacket.NewBatch(c.uc, readBatch)
	if err != nil {
		return
	}
	// a connection that never says hello is closed (see accept's hello)
	_ = c.uc.SetReadDeadline(time.Now().Add(c.s.opts.HelloTimeout))
	var tasks [readBatch]*task
	ops := make([]coherence.Request, 0, readBatch)
	// the connection's requests are not all answered, and it sent no new
	// one: what a reader that lends its goroutine to the backend waits for
	inFlight := func() bool { return len(c.sem) > 0 && !batch.Ready() }
	defer func() {
		for _, t := range tasks {
			if t != nil {
				putTask(t)
			}
		}
	}()
	for {
		slots := c.takeSlots(readBatch)
		if slots == 0 {
			return
		}
		for i := range slots {
			if tasks[i] == nil {
				tasks[i] = taskPool.Get().(*task)
				tasks[i].rg = nil
			}
			batch.Bufs[i] = tasks[i].in[:]
		}
		n, err := batch.Read(slots)
		if err != nil {
			c.giveSlots(slots)
			return
		}
		used := 0
		for i := range n {
			t := tasks[i]
			tasks[i] = nil
			if !c.accept(t, batch.Len[i], batch.Flags[i], log) {
				if c.aborted.Load() {
					c.giveSlots(slots - used)
					return
				}
				continue
			}
			var holds bool
			if ops, holds = c.s.dispatch(c, t, ops); holds {
				used++ // its slot is given back when it is answered
			}
		}
		c.giveSlots(slots - used)
		submitted := len(ops) > 0
		if submitted {
			c.s.pipe.Submit(c.call.session, ops)
			clear(ops)
			ops = ops[:0]
		}
		if c.out.Flush() != nil {
			c.abort()
		}
		if submitted && c.s.await != nil {
			c.s.await.Await(inFlight)
		}
		// Keep the unused tasks at the front for the next read.
		k := 0
		for _, t := range tasks {
			if t != nil {
				tasks[k] = t
				k++
			}
		}
		clear(tasks[k:])
	}
}

// accept checks one received request. It reports true when t is to be
// run; otherwise it has answered (or dropped) it and recycled t.
func (c *conn) accept(t *task, n, flags int, log *slog.Logger) bool {
	if c.s.opts.Observe != nil {
		t.at = time.Now()
	}
	msg := t.in[:n]
	var err error
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0 {
		err = wire.DecodeRequest(msg, &t.req)
	}
	switch {
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		c.refuse(t, wire.PeekID(msg), "message longer than a request or carrying descriptors", log)
	case err != nil:
		c.refuse(t, wire.PeekID(msg), err.Error(), log)
	case !c.hello && t.req.Op != wire.OpHello:
		c.refuse(t, t.req.ID, "the first request must be HELLO", log)
	case !c.hello:
		c.greet(t, log)
		putTask(t)
	case t.req.Op == wire.OpHello:
		c.refuse(t, t.req.ID, "HELLO was already answered", log)
	default:
		return true
	}
	return false
}

// takeSlots waits for one free request slot, then takes up to max-1 more
// without waiting; 0 when the connection ends.
func (c *conn) takeSlots(max int) int {
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		return 0
	}
	n := 1
	for n < max {
		select {
		case c.sem <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (c *conn) giveSlots(n int) {
	for range n {
		<-c.sem
	}
}

// run executes one request of the socket or the ring on its own
// goroutine, through the blocking Backend.Do, and sends its reply.
func (c *conn) run(t *task) {
	defer c.inflight.Done()
	t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
	c.answer(t, c.s.exec(c, &t.req, &t.rep, &t.ctx), true, true)
}

// reply writes (flush) or queues the reply of t: its body, or err's errno
// and text.
func (c *conn) reply(t *task, err error, flush bool) {
	var fds []int
	if err == nil && len(t.rep.fds) > 0 {
		// The outbox may send after the replicas are gone: give it copies.
		if fds, err = dupAll(t.rep.fds); err != nil {
			err = fmt.Errorf("passing replica files: %w", err)
		}
	}
	msg := c.s.encodeReply(t, err)
	werr := c.out.Queue(msg, fds)
	if werr == nil && flush {
		werr = c.out.Flush()
	}
	if werr != nil {
		c.abort()
		c.s.log.Debug("reply not sent", "conn", c.id, "op", t.req.Op, "err", werr)
	}
}

// encodeReply encodes t's reply into t.out: its body, or err's errno and
// text, and tells Options.Observe. The socket and the rings send it.
func (s *Server) encodeReply(t *task, err error) []byte {
	h := wire.Header{Op: t.req.Op, Kind: wire.KindReply, ID: t.req.ID, GVA: t.rep.gva}
	msg := t.out[:wire.HeaderLen]
	if err != nil {
		h.Status = uint32(errnoOf(err))
		msg = wire.AppendErrorText(msg, err.Error())
	} else {
		msg = t.out[:wire.HeaderLen+len(t.rep.body)]
		if len(t.rep.body) > 0 && &t.rep.body[0] != &t.out[:cap(t.out)][wire.HeaderLen] {
			msg = append(t.out[:wire.HeaderLen], t.rep.body...)
		}
	}
	h.Put(msg)
	s.observe(t, h.Status)
	return msg
}

// observe tells Options.Observe that t was answered with status.
func (s *Server) observe(t *task, status uint32) {
	if s.opts.Observe == nil || t.at.IsZero() {
		return
	}
	end := t.end
	if end.IsZero() {
		end = time.Now()
	}
	s.opts.Observe(t.req.Op, end.Sub(t.at), syscall.Errno(status))
}

// flush writes the replies queued on c without waiting (the driver's loop
// calls it for every connection a step answered): what the client has no
// room for is written by the outbox's own goroutine, and a client that
// cannot take it within WriteTimeout is disconnected.
func (c *conn) flush() {
	if c.out.FlushNow() != nil {
		c.abort()
	}
}

// refuse answers a malformed request with EINVAL and counts it; once the
// client has sent more garbage than allowed it ends the connection.
func (c *conn) refuse(t *task, id uint64, why string, log *slog.Logger) {
	defer putTask(t)
	c.garbage++
	log.Debug("malformed request", "why", why, "count", c.garbage)
	if c.garbage > c.s.opts.MaxGarbage {
		c.abort()
		return
	}
	h := wire.Header{Kind: wire.KindReply, Status: uint32(syscall.EINVAL), ID: id}
	if len(t.in) >= 2 {
		h.Op = wire.Op(uint16(t.in[0]) | uint16(t.in[1])<<8)
	}
	msg := h.Append(t.out[:0])
	msg = wire.AppendErrorText(msg, why)
	_ = c.write(msg, nil)
}

// greet answers HELLO: it picks the version and hands over the status
// table. A failed negotiation ends the connection.
func (c *conn) greet(t *task, log *slog.Logger) {
	s := c.s
	hello := wire.Hello{
		Version: wire.Pick(t.req.Min, t.req.Max, wire.VersionMin, wire.VersionMax),
		Min:     wire.VersionMin, Max: wire.VersionMax,
		MaxOutstanding: uint32(s.opts.MaxOutstanding), PageSize: wire.PageSize,
		Machine: s.be.Machine(), StatusSlots: uint32(s.opts.StatusSlots),
		MaxMapPages: wire.MaxMapPages, MaxMessage: wire.MaxMessage, ConnID: c.id,
	}
	h := wire.Header{Op: wire.OpHello, Kind: wire.KindReply, ID: t.req.ID}
	msg := h.Append(t.out[:0])
	msg = hello.Append(msg)
	name := strings.TrimRight(string(t.req.Name[:]), "\x00")
	if hello.Version == 0 {
		h.Status = uint32(syscall.EPROTONOSUPPORT)
		h.Put(msg)
		msg = wire.AppendErrorText(msg, fmt.Sprintf("no common protocol version: client %d..%d, server %d..%d",
			t.req.Min, t.req.Max, wire.VersionMin, wire.VersionMax))
		_ = c.write(msg, nil)
		log.Debug("hello refused", "name", name, "min", t.req.Min, "max", t.req.Max)
		c.abort()
		return
	}
	// The connection's own status table: it describes the pages this
	// connection maps and no other.
	st, err := newStatusTable(s.opts.StatusSlots)
	if err != nil {
		h.Status = uint32(errnoOf(err))
		h.Put(msg)
		_ = c.write(wire.AppendErrorText(msg, fmt.Sprintf("making the connection's status table: %v", err)), nil)
		log.Warn("hello: making the status table", "err", err)
		c.abort()
		return
	}
	c.status = st
	// The connection's session opens before the reply: the requests that
	// follow it are made in the session.
	octx, cancel := context.WithTimeout(c.ctx, s.opts.OpTimeout)
	err = c.call.Open(octx)
	cancel()
	if err != nil {
		h.Status = uint32(errnoOf(err))
		h.Put(msg)
		_ = c.write(wire.AppendErrorText(msg, fmt.Sprintf("opening the connection's session: %v", err)), nil)
		log.Warn("hello: opening the session", "err", err)
		c.abort()
		return
	}
	c.hello = true
	fds, err := dupAll([]int{c.status.file.fd})
	if err != nil || c.write(msg, fds) != nil {
		c.abort()
		return
	}
	_ = c.uc.SetReadDeadline(time.Time{})
	if c.aborted.Load() {
		_ = c.uc.SetReadDeadline(time.Unix(1, 0)) // keep an abort that raced the clear
	}
	s.spaces.join(c.cred.PID)
	log.Debug("hello", "name", name, "version", hello.Version)
}

// write sends one message (and owns fds from then on) through the batching
// outbox, bounded by WriteTimeout; a client too slow to read is
// disconnected.
func (c *conn) write(msg []byte, fds []int) error {
	err := c.out.Send(msg, fds)
	if err != nil {
		c.abort()
	}
	return err
}

// dupAll duplicates fds (close-on-exec).
func dupAll(fds []int) ([]int, error) {
	out := make([]int, 0, len(fds))
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, o := range out {
				_ = unix.Close(o)
			}
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// abort ends the connection: its reader wakes up and releases everything.
func (c *conn) abort() {
	if c.aborted.Swap(true) {
		return
	}
	c.cancel()
	_ = c.uc.SetReadDeadline(time.Unix(1, 0))
}

// close ends the connection's session: the Backend gives back everything
// it held (locks, acquisitions, refs) and abandons its requests still in
// flight, whose tasks the server then takes back.
func (c *conn) close(log *slog.Logger) {
	s := c.s
	c.aborted.Store(true)
	c.cancel()
	s.closeRing(c)
	s.closeBulk(c)
	c.inflight.Wait()
	if c.hello {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReleaseTimeout)
		err := c.call.Close(ctx)
		cancel()
		if err != nil {
			log.Warn("closing the session of a closed connection", "conn", c.id, "err", err)
		}
		s.replicas.dropConn(c)
		s.spaces.leave(c)
	}
	if c.status != nil {
		c.status.close() // no replica file writes its entries any more
	}
	if c.gpuUsed.Load() {
		s.opts.GPU.GPUClosed(c.gpuPeer())
	}
	if c.evActive.Load() {
		<-c.evDone
	}
	_ = c.uc.Close()
}

// subscribe sets the event mask and starts the event writer.
func (c *conn) subscribe(mask uint32) {
	c.subs.Store(mask)
	if mask != 0 {
		c.evStart.Do(func() {
			c.evActive.Store(true)
			go c.writeEvents()
		})
	}
}

// queueEvent queues ev if the client subscribed to its type; it never
// blocks: a full queue drops ev and the client is told events were lost.
func (c *conn) queueEvent(ev wire.Event) {
	subs := c.subs.Load()
	if subs == 0 || (subs&ev.Type.Mask() == 0 && ev.Type != wire.EventLost) {
		return
	}
	select {
	case c.events <- ev:
	default:
		c.lost.Store(true)
	}
}

// writeEvents sends queued events until the connection ends.
func (c *conn) writeEvents() {
	defer close(c.evDone)
	var seq uint64
	buf := make([]byte, 0, wire.EventLen)
	send := func(ev wire.Event) bool {
		seq++
		ev.Seq = seq
		return c.write(ev.Append(buf[:0]), nil) == nil
	}
	for {
		select {
		case <-c.ctx.Done():
			return
		case ev := <-c.events:
			if !send(ev) {
				return
			}
			if c.lost.Swap(false) && !send(wire.Event{Type: wire.EventLost}) {
				return
			}
		}
	}
}

// errnoOf is the errno a host sees for err.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case errors.As(err, &e) && e != 0:
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, context.Canceled):
		return syscall.ECANCELED
	}
	return syscall.EIO
}
