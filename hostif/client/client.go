package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/internal/seqpacket"
	"github.com/aitherion/dpu/hostif/wire"
)

// Options tune a Client. Zero fields mean their defaults.
type Options struct {
	// Name is sent in HELLO for the server's logs.
	Name string
	// Timeout bounds every call whose context has no deadline, and every
	// write to the socket (default 30s).
	Timeout time.Duration
	// EventQueue is how many events may wait for Events' reader (default
	// 256); beyond it they are dropped and an EventLost is delivered.
	EventQueue int
	// NoRings keeps every request on the socket even when the server
	// offers a shared-memory ring pair (so does DPU_RINGS=0).
	NoRings bool
	// RingSpin is how long a call on the ring spins for its reply before
	// it sleeps (default 50µs).
	RingSpin time.Duration
}

// Client is one connection to a node's host interface. It is safe for
// concurrent use; concurrent calls are pipelined on the connection.
type Client struct {
	uc    *net.UnixConn // until HELLO (and RINGS) are done; then s
	s     *sock
	path  string // the socket, for an Area's private connection
	opts  Options
	hello wire.Hello

	status []byte // the replica status table, mapped read-only
	rings  *rings // the ring pair, if the server offered one
	bulk   bulkState

	sem     chan struct{} // one token per request in flight
	out     *seqpacket.Outbox
	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]*call
	maps    map[*Mapping]struct{}
	closed  bool
	ended   bool // done is closed

	// The read turn: who reads the socket (PROTOCOL.md's replies and
	// events), guarded by mu. A caller waiting for a reply on the socket
	// takes it when free and reads for everybody (handing the others
	// theirs) until its own reply comes, then passes it to the first
	// follower; the listener takes it only for a batch, while no call
	// waits. Whoever holds it owns rd.
	turn    *call
	follow  []*call // callers waiting for their reply, not reading
	rd      *seqpacket.Batch
	sockOps atomic.Uint64 // socket calls started (the listener backs off while it moves)

	done    chan struct{} // closed when the connection is gone
	doneErr error         // why (set before done closes)
	reader  chan struct{} // closed when the listener goroutine ends
	kick    chan struct{} // wakes the writer goroutine
	helpers sync.WaitGroup

	events chan Event // fed by the event pump
	evMu   sync.Mutex
	evQ    []Event // events waiting for the pump
	evLost bool    // events were dropped since the last EventLost
	evWake chan struct{}

	closeOnce sync.Once
}

// Errors.
var (
	// ErrClosed is returned by calls on a closed client or after the
	// server went away.
	ErrClosed = errors.New("hostif client: connection closed")
	// ErrProtocol is returned when the server breaks the protocol.
	ErrProtocol = errors.New("hostif client: protocol violation")
)

// Error is a failure the server reported: an errno and its text.
// errors.Is(err, syscall.EACCES) and the like work on it.
type Error struct {
	Op    wire.Op
	Errno syscall.Errno
	Text  string
}

func (e *Error) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("dpu %s: %v", e.Op, e.Errno)
	}
	return fmt.Sprintf("dpu %s: %v: %s", e.Op, e.Errno, e.Text)
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// Location is where a page lives (WHERE).
type Location = wire.Location

// Event is an asynchronous event from the server.
type Event = wire.Event

// DefaultSocket is the socket path used when none is given: $DPU_SOCKET,
// else $DPU_RUN_DIR/dpu0.sock, else /run/dpu/dpu0.sock.
func DefaultSocket() string {
	if p := os.Getenv("DPU_SOCKET"); p != "" {
		return p
	}
	if d := os.Getenv("DPU_RUN_DIR"); d != "" {
		return filepath.Join(d, "dpu0.sock")
	}
	return "/run/dpu/dpu0.sock"
}

// Dial connects to the host interface at path (DefaultSocket when empty)
// and says hello. ctx bounds the whole exchange.
func Dial(ctx context.Context, path string, opts Options) (*Client, error) {
	if path == "" {
		path = DefaultSocket()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.EventQueue <= 0 {
		opts.EventQueue = 256
	}
	ctx, cancel := bound(ctx, opts.Timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("hostif client: %w", err)
	}
	uc := nc.(*net.UnixConn)
	c := &Client{uc: uc, path: path, opts: opts, pending: make(map[uint64]*call), maps: make(map[*Mapping]struct{}),
		done: make(chan struct{}), reader: make(chan struct{}), kick: make(chan struct{}, 1),
		events: make(chan Event, 1), evWake: make(chan struct{}, 1)}
	if err := c.greet(ctx); err != nil {
		_ = uc.Close()
		return nil, err
	}
	if !opts.NoRings && !ringsOff() {
		if err := c.askRings(ctx); err != nil {
			_ = unix.Munmap(c.status)
			_ = uc.Close()
			return nil, err
		}
	}
	c.sem = make(chan struct{}, c.hello.MaxOutstanding)
	c.s, err = detach(uc)
	if err == nil {
		c.rd, err = seqpacket.NewBatch(c.s, readBatch)
	}
	if err == nil {
		c.out, err = seqpacket.NewOutbox(c.s, opts.Timeout)
	}
	if err != nil {
		_ = unix.Munmap(c.status)
		if c.s != nil {
			c.s.close()
		} else {
			_ = uc.Close()
		}
		if c.rings != nil {
			c.rings.close()
		}
		return nil, fmt.Errorf("hostif client: %w", err)
	}
	for i := range c.rd.Bufs {
		c.rd.Bufs[i] = make([]byte, wire.MaxMessage)
		c.rd.OOB[i] = make([]byte, unix.CmsgSpace(wire.MaxMapPages*4))
	}
	go c.listen()
	if c.rings != nil {
		c.helpers.Go(c.reaper)
	}
	c.helpers.Go(c.write)
	c.helpers.Go(c.watch)
	c.helpers.Go(c.pump)
	return c, nil
}

// greet sends HELLO and maps the status table from its reply.
func (c *Client) greet(ctx context.Context) error {
	r := wire.Request{Header: wire.Header{Op: wire.OpHello, ID: c.nextID.Add(1)}, Min: wire.VersionMin, Max: wire.VersionMax}
	copy(r.Name[:], c.opts.Name)
	dl, _ := ctx.Deadline()
	_ = c.uc.SetDeadline(dl)
	defer c.uc.SetDeadline(time.Time{})
	if _, err := c.uc.Write(wire.AppendRequest(nil, &r)); err != nil {
		return fmt.Errorf("hostif client: hello: %w", err)
	}
	buf := make([]byte, wire.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fmt.Errorf("hostif client: hello: %w", err)
	}
	fds := parseRights(oob[:oobn])
	defer closeAll(fds)
	h, body, err := wire.DecodeReply(buf[:n])
	if err != nil || h.Kind != wire.KindReply || h.Op != wire.OpHello {
		return fmt.Errorf("%w: hello reply %+v: %v", ErrProtocol, h, err)
	}
	if err := c.hello.Decode(body); err != nil {
		if h.Status != 0 {
			return &Error{Op: wire.OpHello, Errno: syscall.Errno(h.Status), Text: string(body)}
		}
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if h.Status != 0 {
		return &Error{Op: wire.OpHello, Errno: syscall.Errno(h.Status), Text: string(body[wire.HelloLen:])}
	}
	if c.hello.Version < wire.VersionMin || c.hello.Version > wire.VersionMax || len(fds) != 1 ||
		c.hello.MaxOutstanding == 0 || c.hello.StatusSlots < 2 {
		return fmt.Errorf("%w: hello %+v with %d descriptors", ErrProtocol, c.hello, len(fds))
	}
	c.status, err = unix.Mmap(fds[0], 0, int(c.hello.StatusSlots)*wire.SlotSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("hostif client: mapping the status table: %w", err)
	}
	return nil
}

// Hello returns what the server said in HELLO.
func (c *Client) Hello() wire.Hello { return c.hello }

// Close ends the connection: the server releases every ref, lock and
// acquisition it held, and every Mapping of c is unmapped locally. Calls in
// flight fail with ErrClosed.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		maps := c.maps
		c.maps = nil
		c.mu.Unlock()
		for m := range maps {
			m.release()
		}
		c.fail(net.ErrClosed)
		<-c.reader
		c.helpers.Wait()
		if c.rings != nil {
			c.rings.close()
		}
		c.bulk.once.Do(func() {}) // waits for an ask in progress; no ask after
		if c.bulk.area != nil {
			c.bulk.area.close()
		}
		if c.status != nil {
			_ = unix.Munmap(c.status)
		}
	})
	return nil
}

// Events returns the stream of events the client subscribed to. It is
// closed when the connection ends.
func (c *Client) Events() <-chan Event { return c.events }

// call is one request in flight. Calls are pooled: the caller puts its
// call back once it has read the reply; an abandoned call is dropped by the
// reader instead.
type call struct {
	req  wire.Request // what was asked (Data not kept)
	done chan struct{}
	lead chan struct{} // the read turn was passed to this call
	h    wire.Header
	body []byte
	fds  []int
	msg  []byte // encoding buffer

	// Guarded by Client.mu.
	deadline  time.Time // when the watchdog gives up on it (no ctx deadline)
	abandoned bool
	timedOut  bool // given up by the watchdog
	ready     bool // its reply (or its timeout) was delivered
	following bool // in Client.follow
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1), lead: make(chan struct{}, 1)} }}

func putCall(cl *call) {
	cl.fds = nil
	select {
	case <-cl.lead: // a turn passed as the call ended (passed on since)
	default:
	}
	callPool.Put(cl)
}

// result is a reply: header, body and passed descriptors. body is valid
// until release.
type result struct {
	h    wire.Header
	body []byte
	fds  []int
	cl   *call
}

// release recycles the call behind a result.
func (r result) release() {
	if r.cl != nil {
		putCall(r.cl)
	}
}

// readBatch is the most replies read with one system call.
const readBatch = 16

// do sends r and waits for its reply, bounded by ctx, or by the client's
// Timeout (enforced by the watchdog) when ctx has no deadline. A reply that
// comes after the caller gave up is undone (see undo). The caller releases
// the result.
func (c *Client) do(ctx context.Context, r *wire.Request) (result, error) {
	select {
	case c.sem <- struct{}{}:
	default:
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return result{}, fmt.Errorf("hostif client: %s: waiting for a request slot: %w", r.Op, ctx.Err())
		case <-c.done:
			return result{}, c.closedErr()
		case <-time.After(c.opts.Timeout):
			return result{}, fmt.Errorf("hostif client: %s: waiting for a request slot: %w", r.Op, syscall.ETIMEDOUT)
		}
	}
	r.ID = c.nextID.Add(1)
	cl := callPool.Get().(*call)
	cl.req = *r
	cl.req.Data = nil
	cl.abandoned, cl.timedOut, cl.ready, cl.following, cl.deadline = false, false, false, false, time.Time{}
	if _, ok := ctx.Deadline(); !ok {
		cl.deadline = time.Now().Add(c.opts.Timeout)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.sem
		putCall(cl)
		return result{}, c.closedErr()
	}
	c.pending[r.ID] = cl
	c.mu.Unlock()

	cl.msg = wire.AppendRequest(cl.msg[:0], r)
	var err error
	viaRing := c.rings != nil && onRing(r.Op) && c.rings.submit(cl.msg)
	if !viaRing {
		err = c.send(cl.msg)
	}
	if err != nil {
		c.mu.Lock()
		_, still := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.mu.Unlock()
		if still {
			<-c.sem
			putCall(cl)
		}
		c.fail(err) // a failed write leaves the connection unusable
		return result{}, fmt.Errorf("hostif client: %s: %w", r.Op, err)
	}
	if viaRing {
		c.spin(cl)
		err = c.wait(ctx, cl)
	} else {
		err = c.sockWait(ctx, cl)
	}
	if err != nil {
		return result{}, err
	}
	if cl.timedOut {
		// The watchdog gave up; the reader owns the call now.
		return result{}, fmt.Errorf("hostif client: %s: no reply within %v: %w", r.Op, c.opts.Timeout, syscall.ETIMEDOUT)
	}
	if cl.h.Status != 0 {
		closeAll(cl.fds)
		err := &Error{Op: r.Op, Errno: syscall.Errno(cl.h.Status), Text: string(cl.body)}
		putCall(cl)
		return result{}, err
	}
	if r.Op != wire.OpMap && r.Op != wire.OpBulk { // only MAP and BULK replies carry descriptors
		closeAll(cl.fds)
		cl.fds = nil
	}
	return result{h: cl.h, body: cl.body, fds: cl.fds, cl: cl}, nil
}

// wait waits on cl.done for a reply someone else reads (the ring's
// reapers), bounded by ctx and the watchdog. nil: cl.done came.
func (c *Client) wait(ctx context.Context, cl *call) error {
	select {
	case <-cl.done:
	case <-c.done:
		select {
		case <-cl.done:
		default:
			return c.closedErr()
		}
	case <-ctx.Done():
		return c.abandon(ctx, cl)
	}
	return nil
}

// abandon gives up on cl after ctx ended: a reply that comes later is
// undone. nil if the reply (or the watchdog's verdict) came first.
func (c *Client) abandon(ctx context.Context, cl *call) error {
	c.mu.Lock()
	_, still := c.pending[cl.req.ID]
	if still {
		cl.abandoned = true
	}
	c.leave(cl)
	c.mu.Unlock()
	if still {
		return fmt.Errorf("hostif client: %s: %w", cl.req.Op, ctx.Err())
	}
	<-cl.done // the reader or the watchdog took it and is about to deliver
	return nil
}

// Waits of a caller holding the read turn, in poll(2): while its context
// can be cancelled it looks at it every leadSlice; else it wakes every
// idleSlice (Close and the watchdog are seen at once or by then).
const (
	leadSlice = 5 * time.Millisecond
	idleSlice = 100 * time.Millisecond
)

// sockWait waits for the reply of cl, sent on the socket. The first caller
// to wait takes the read turn and reads replies (and events) for everyone,
// handing the others theirs, until its own comes; then it passes the turn
// to the first caller still waiting, who carries on. Meanwhile the others
// sleep on their calls. So a lone caller reads its own reply from its own
// thread: one wake-up per round trip, as a blocking recv(2) has.
func (c *Client) sockWait(ctx context.Context, cl *call) error {
	c.sockOps.Add(1)
	c.mu.Lock()
	switch {
	case cl.ready:
	case c.turn == nil && !c.closed:
		c.turn = cl
	default:
		cl.following = true
		c.follow = append(c.follow, cl)
	}
	lead := c.turn == cl
	c.mu.Unlock()
	for {
		if !lead {
			select {
			case <-cl.done:
				c.mu.Lock()
				c.leave(cl)
				c.mu.Unlock()
				return nil
			case <-cl.lead:
				lead = true
				continue
			case <-c.done:
				select {
				case <-cl.done:
					return nil
				default:
					return c.closedErr()
				}
			case <-ctx.Done():
				return c.abandon(ctx, cl)
			}
		}
		// Holding the turn: nobody else reads the socket.
		slice := idleSlice
		if ctx.Done() != nil {
			slice = leadSlice
			if dl, ok := ctx.Deadline(); ok {
				slice = min(slice, time.Until(dl))
			}
		}
		if len(c.sem) > 1 {
			// Others have calls in flight: let the goroutines this
			// turn woke run (and send) before this thread blocks.
			runtime.Gosched()
		}
		if slice > 0 {
			if _, err := c.s.waitIn(slice); err != nil {
				c.fail(err)
			}
		}
		if err := c.readSock(); err != nil {
			c.fail(err)
		}
		select {
		case <-cl.done:
			c.mu.Lock()
			c.leave(cl)
			c.mu.Unlock()
			return nil
		default:
		}
		select {
		case <-c.done:
			c.mu.Lock()
			c.leave(cl)
			c.mu.Unlock()
			select {
			case <-cl.done:
				return nil
			default:
				return c.closedErr()
			}
		default:
		}
		if ctx.Err() != nil {
			return c.abandon(ctx, cl)
		}
	}
}

// leave takes cl out of the followers and passes the read turn on if cl
// holds it. Called with mu held.
func (c *Client) leave(cl *call) {
	if cl.following {
		cl.following = false
		if i := slices.Index(c.follow, cl); i >= 0 {
			c.follow = slices.Delete(c.follow, i, i+1)
		}
	}
	if c.turn == cl {
		c.passTurn()
	}
}

// passTurn gives the read turn to the first follower, or frees it. Called
// with mu held by the turn's holder.
func (c *Client) passTurn() {
	c.turn = nil
	if c.closed {
		return
	}
	for len(c.follow) > 0 {
		next := c.follow[0]
		c.follow[0] = nil
		c.follow = c.follow[1:]
		next.following = false
		if next.ready || next.abandoned {
			continue
		}
		c.turn = next
		select {
		case next.lead <- struct{}{}:
		default:
		}
		return
	}
}

// readSock reads what the socket holds, up to readBatch messages, without
// waiting, and hands each out. The caller holds the read turn.
func (c *Client) readSock() error {
	n, err := c.rd.Read(readBatch)
	if err == errAgain {
		return nil
	}
	if err != nil {
		return err
	}
	for i := range n {
		c.take(c.rd.Bufs[i][:c.rd.Len[i]], parseRights(c.rd.OOB[i][:c.rd.OOBN[i]]))
	}
	return nil
}

// send writes a request. Alone, the caller writes it at once (the shortest
// path); with other requests in flight it queues it for the writer
// goroutine, which sends whatever has queued with one system call.
func (c *Client) send(msg []byte) error {
	if len(c.sem) <= 1 {
		return c.out.Send(msg, nil)
	}
	if err := c.out.Queue(msg, nil); err != nil {
		return err
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// write is the writer goroutine: it flushes queued requests when kicked.
func (c *Client) write() {
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
			if err := c.out.Flush(); err != nil {
				c.fail(err)
				return
			}
		}
	}
}

// watch is the watchdog: it times out calls whose context has no deadline
// once the client's Timeout has passed. Such a call stays pending, so that
// a late reply is undone.
func (c *Client) watch() {
	tick := time.NewTicker(min(c.opts.Timeout/10+time.Millisecond, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-tick.C:
			c.mu.Lock()
			for _, cl := range c.pending {
				if !cl.abandoned && !cl.deadline.IsZero() && now.After(cl.deadline) {
					cl.abandoned, cl.timedOut, cl.ready = true, true, true
					cl.done <- struct{}{}
				}
			}
			c.mu.Unlock()
		}
	}
}

func (c *Client) closedErr() error {
	<-c.done
	if c.doneErr != nil {
		return fmt.Errorf("%w: %w", ErrClosed, c.doneErr)
	}
	return ErrClosed
}

// Waits of the listener: it looks at the socket only once no socket call
// has started for listenGap (while calls come, their readers deliver the
// events too), in waits of up to idleSlice.
const listenGap = 2 * time.Millisecond

// listen is the listener goroutine: while no call waits on the socket it
// reads it, for events and for the replies of abandoned calls. It takes the
// read turn only to read a batch, never to wait, and keeps off the socket
// while calls come (it would wake with every reply for nothing).
func (c *Client) listen() {
	defer close(c.reader)
	t := time.NewTimer(listenGap)
	defer t.Stop()
	seen := c.sockOps.Load()
	for {
		c.mu.Lock()
		busy, ended := c.turn != nil || len(c.follow) > 0, c.ended
		c.mu.Unlock()
		if ended {
			return
		}
		if now := c.sockOps.Load(); busy || now != seen {
			seen = now
			t.Reset(listenGap)
			select {
			case <-t.C:
			case <-c.done:
				return
			}
			continue
		}
		ready, err := c.s.waitIn(idleSlice)
		if err != nil {
			c.fail(err)
			return
		}
		if !ready {
			continue
		}
		c.mu.Lock()
		free := c.turn == nil && !c.closed
		if free {
			c.turn = bgTurn
		}
		c.mu.Unlock()
		if !free {
			seen-- // a caller reads: back off
			continue
		}
		err = c.readSock()
		c.mu.Lock()
		c.passTurn()
		c.mu.Unlock()
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// bgTurn stands for the listener in Client.turn.
var bgTurn = &call{}

// fail ends the connection (once): the socket is shut down and closed,
// every call waiting fails with ErrClosed (err says why), slots come back.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.closed, c.ended = true, true
	c.doneErr = err
	pending := c.pending
	c.pending = map[uint64]*call{}
	c.follow = nil
	c.mu.Unlock()
	close(c.done)
	c.s.close()
	for range pending {
		<-c.sem
	}
}

// take handles one message from the server.
func (c *Client) take(msg []byte, fds []int) {
	h, body, err := wire.DecodeReply(msg)
	if err != nil {
		closeAll(fds)
		return
	}
	if h.Kind == wire.KindEvent {
		closeAll(fds)
		if ev, err := wire.DecodeEvent(&h, body); err == nil {
			c.deliver(ev)
		}
		return
	}
	c.mu.Lock()
	cl := c.pending[h.ID]
	delete(c.pending, h.ID)
	abandoned := cl != nil && cl.abandoned
	if cl != nil {
		cl.ready = true
	}
	c.mu.Unlock()
	if cl == nil {
		closeAll(fds)
		return
	}
	<-c.sem
	if abandoned {
		c.undo(cl, h, fds)
		return
	}
	cl.h, cl.body, cl.fds = h, append(cl.body[:0], body...), fds
	cl.done <- struct{}{}
}

// deliver queues an event for the pump without ever blocking: beyond
// EventQueue waiting events it drops ev and the pump reports EventLost.
func (c *Client) deliver(ev Event) {
	c.evMu.Lock()
	if len(c.evQ) >= c.opts.EventQueue {
		c.evLost = true
	} else {
		c.evQ = append(c.evQ, ev)
	}
	c.evMu.Unlock()
	select {
	case c.evWake <- struct{}{}:
	default:
	}
}

// pump feeds Events' reader, an EventLost first whenever events were
// dropped, and closes the stream when the connection ends.
func (c *Client) pump() {
	defer close(c.events)
	for {
		c.evMu.Lock()
		var ev Event
		have := true
		switch {
		case c.evLost:
			ev, c.evLost = Event{Type: wire.EventLost}, false
		case len(c.evQ) > 0:
			ev = c.evQ[0]
			c.evQ = c.evQ[1:]
		default:
			have = false
		}
		c.evMu.Unlock()
		if !have {
			select {
			case <-c.evWake:
				continue
			case <-c.done:
				return
			}
		}
		select {
		case c.events <- ev:
		case <-c.done:
			return
		}
	}
}

// undo reverses what a successful request did after its caller gave up on
// it, so nothing leaks: a MAP is unmapped, a LOCK unlocked, an ACQUIRE
// released, an ALLOC freed. Descriptors are closed.
func (c *Client) undo(cl *call, h wire.Header, fds []int) {
	closeAll(fds)
	if h.Status != 0 {
		return
	}
	var r wire.Request
	switch cl.req.Op {
	case wire.OpMap:
		r = wire.Request{Header: wire.Header{Op: wire.OpUnmap, GVA: cl.req.GVA}, LVA: cl.req.LVA, Bytes: cl.req.Bytes}
	case wire.OpLock:
		r = wire.Request{Header: wire.Header{Op: wire.OpUnlock, GVA: cl.req.GVA}}
	case wire.OpAcquire:
		r = wire.Request{Header: wire.Header{Op: wire.OpRelease, GVA: cl.req.GVA}}
	case wire.OpAlloc:
		r = wire.Request{Header: wire.Header{Op: wire.OpFree, GVA: h.GVA}}
	default:
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		defer cancel()
		if res, err := c.do(ctx, &r); err == nil {
			res.release()
		}
	}()
}

// bound gives ctx a deadline of d from now if it has none.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

func parseRights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// Alloc allocates bytes (rounded up to pages) owned by this node, with the
// given permission bits (0: the server's default, 0600).
func (c *Client) Alloc(ctx context.Context, bytes int, mode os.FileMode) (gva.GVA, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpAlloc}, Bytes: uint64(bytes), Mode: uint32(mode.Perm())})
	if err != nil {
		return gva.GVA{}, err
	}
	defer res.release()
	return res.h.GVA, nil
}

// Free deletes the allocation that starts at g.
func (c *Client) Free(ctx context.Context, g gva.GVA) error {
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpFree, GVA: g}})
	return err
}

// Load reads len(dst) bytes at addr (within one page) through the node and
// returns the version they were read at.
func (c *Client) Load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpLoad, GVA: addr}, Len: uint32(len(dst))})
	if err != nil {
		return 0, err
	}
	defer res.release()
	if len(res.body) != 8+len(dst) {
		return 0, fmt.Errorf("%w: load reply of %d bytes", ErrProtocol, len(res.body))
	}
	copy(dst, res.body[8:])
	return gva.Version(wire.U64(res.body, 0)), nil
}

// Load64 reads the little-endian 64-bit word at addr through the node.
func (c *Client) Load64(ctx context.Context, addr gva.GVA) (uint64, error) {
	var b [8]byte
	if _, err := c.Load(ctx, addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Store writes src at addr (within one page) and returns the version the
// write created.
func (c *Client) Store(ctx context.Context, addr gva.GVA, src []byte) (gva.Version, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpStore, GVA: addr}, Data: src})
	if err != nil {
		return 0, err
	}
	defer res.release()
	return versionOf(res, 0)
}

// Store64 writes v as a little-endian 64-bit word at addr.
func (c *Client) Store64(ctx context.Context, addr gva.GVA, v uint64) (gva.Version, error) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return c.Store(ctx, addr, b[:])
}

// CompareAndSwap replaces the 64-bit word at addr by desired if it equals
// expected, at the page's owner. It returns the word found there.
func (c *Client) CompareAndSwap(ctx context.Context, addr gva.GVA, expected, desired uint64) (old uint64, swapped bool, err error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpCAS, GVA: addr}, Expected: expected, Desired: desired})
	if err != nil {
		return 0, false, err
	}
	defer res.release()
	if len(res.body) != 16 {
		return 0, false, fmt.Errorf("%w: cas reply of %d bytes", ErrProtocol, len(res.body))
	}
	old = wire.U64(res.body, 0)
	return old, old == expected, nil
}

// FetchAdd adds delta to the 64-bit word at addr and returns the old word.
func (c *Client) FetchAdd(ctx context.Context, addr gva.GVA, delta uint64) (uint64, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpFetchAdd, GVA: addr}, Delta: delta})
	if err != nil {
		return 0, err
	}
	defer res.release()
	if len(res.body) != 16 {
		return 0, fmt.Errorf("%w: fetch-add reply of %d bytes", ErrProtocol, len(res.body))
	}
	return wire.U64(res.body, 0), nil
}

// Acquire makes this node the owner of the page of g. timeout bounds the
// wait (0: the server's default).
// It is an acquire point of the process's Areas.
func (c *Client) Acquire(ctx context.Context, g gva.GVA, timeout time.Duration) error {
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpAcquire, GVA: g}, TimeoutMS: ms(timeout)})
	if err == nil {
		syncAll(SyncRelease | SyncAcquire)
	}
	return err
}

// Release gives up this connection's acquisition of the page of g. It is a
// release point of the process's Areas.
func (c *Client) Release(ctx context.Context, g gva.GVA) error {
	syncAll(SyncRelease)
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpRelease, GVA: g}})
	return err
}

// Lock takes ownership of the page of g and pins it. timeout bounds the
// wait (0: the server's default); a lock held by another process of this
// host or another node makes it wait, up to timeout (ETIMEDOUT). It is an
// acquire point of the process's Areas.
func (c *Client) Lock(ctx context.Context, g gva.GVA, timeout time.Duration) error {
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpLock, GVA: g}, TimeoutMS: ms(timeout)})
	if err == nil {
		lockHeld(g, true)
		syncAll(SyncRelease | SyncAcquire)
	}
	return err
}

// TryLock is Lock that fails with EBUSY at once when another process of
// this host holds the lock.
func (c *Client) TryLock(ctx context.Context, g gva.GVA) error {
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpLock, GVA: g}, Flags: wire.LockTry})
	if err == nil {
		lockHeld(g, true)
		syncAll(SyncRelease | SyncAcquire)
	}
	return err
}

// Unlock lowers the pin Lock raised. It is a release point of the process's
// Areas.
func (c *Client) Unlock(ctx context.Context, g gva.GVA) error {
	syncAll(SyncRelease)
	lockHeld(g, false)
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpUnlock, GVA: g}})
	return err
}

// Where says where the page of g lives.
func (c *Client) Where(ctx context.Context, g gva.GVA) (Location, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpWhere, GVA: g}})
	if err != nil {
		return Location{}, err
	}
	defer res.release()
	var l Location
	if err := l.Decode(res.body); err != nil {
		return Location{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return l, nil
}

// ClusterTime is a reading of the fabric's cluster clock: the reference
// node's clock (Ref), within Error of the truth as the agent knows it when
// it answered.
type ClusterTime struct {
	Time, Error time.Duration
	Ref         uint32
}

// Clock reads the cluster clock through the agent (dpu_clock in C).
func (c *Client) Clock(ctx context.Context) (ClusterTime, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpClock}})
	if err != nil {
		return ClusterTime{}, err
	}
	defer res.release()
	var t wire.ClusterTime
	if err := t.Decode(res.body); err != nil {
		return ClusterTime{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return ClusterTime{Time: time.Duration(t.Time), Error: time.Duration(t.Error), Ref: t.Ref}, nil
}

// TranslateLVA returns the GVA this process mapped at lva.
func (c *Client) TranslateLVA(ctx context.Context, lva gva.LVA) (gva.GVA, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpTranslate}, Dir: wire.TranslateToGVA, LVA: uint64(lva)})
	if err != nil {
		return gva.GVA{}, err
	}
	defer res.release()
	return res.h.GVA, nil
}

// TranslateGVA returns the lowest LVA at which this process maps g.
func (c *Client) TranslateGVA(ctx context.Context, g gva.GVA) (gva.LVA, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpTranslate, GVA: g}, Dir: wire.TranslateToLVA})
	if err != nil {
		return 0, err
	}
	defer res.release()
	if len(res.body) != 8 {
		return 0, fmt.Errorf("%w: translate reply of %d bytes", ErrProtocol, len(res.body))
	}
	return gva.LVA(wire.U64(res.body, 0)), nil
}

// Subscribe sets which events the server sends (a mask of
// wire.EventType.Mask bits; wire.AllEvents for all, 0 for none).
func (c *Client) Subscribe(ctx context.Context, mask uint32) error {
	err := c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpSubscribe}, Mask: mask})
	return err
}

// Raw sends a request of any op with a raw body (for the GPU accounting
// ops, whose bodies are the CUDA hook's) and returns the reply body.
func (c *Client) Raw(ctx context.Context, op wire.Op, g gva.GVA, body []byte) ([]byte, error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: op, GVA: g}, Data: body})
	if err != nil {
		return nil, err
	}
	defer res.release()
	closeAll(res.fds)
	return append([]byte(nil), res.body...), nil
}

// simple runs a request whose reply carries nothing but its status.
func (c *Client) simple(ctx context.Context, r *wire.Request) error {
	res, err := c.do(ctx, r)
	if err == nil {
		closeAll(res.fds)
		res.release()
	}
	return err
}

func versionOf(res result, off int) (gva.Version, error) {
	if len(res.body) < off+8 {
		return 0, fmt.Errorf("%w: reply of %d bytes", ErrProtocol, len(res.body))
	}
	return gva.Version(wire.U64(res.body, off)), nil
}

func ms(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min(max(d.Milliseconds(), 1), 1<<31))
}
