package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
)

// DefaultTimeout bounds a request whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Client speaks the control protocol to one agent. Its methods are safe for
// concurrent use; requests on one client are sent one at a time. A request
// whose context ends, or whose connection fails, abandons the connection;
// the next request dials again.
type Client struct {
	path string
	pid  uint32

	mu     sync.Mutex
	conn   net.Conn // nil: dial on the next request
	closed bool
	seq    uint32
	buf    []byte
}

// Dial connects to the control socket at path.
func Dial(path string) (*Client, error) {
	conn, err := dial(path)
	if err != nil {
		return nil, err
	}
	return &Client{
		path: path,
		pid:  uint32(os.Getpid()),
		conn: conn,
		buf:  make([]byte, MaxMessageSize+1),
	}, nil
}

func dial(path string) (net.Conn, error) {
	conn, err := net.DialTimeout("unixpacket", path, DefaultTimeout)
	if err != nil {
		return nil, fmt.Errorf("ctl: dial: %w", err)
	}
	return conn, nil
}

// Close closes the client's connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// Routes dumps the routing table.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	return dumpOf[Route](ctx, c, CmdRouteGet)
}

// Links dumps the ports and their links.
func (c *Client) Links(ctx context.Context) ([]Link, error) {
	return dumpOf[Link](ctx, c, CmdLinkGet)
}

// Neighbours dumps the neighbours heard on the ports.
func (c *Client) Neighbours(ctx context.Context) ([]Neighbour, error) {
	return dumpOf[Neighbour](ctx, c, CmdNeighGet)
}

// Topology dumps the fabric as the agent sees it.
func (c *Client) Topology(ctx context.Context) (Topology, error) {
	nodes, err := dumpOf[TopoNode](ctx, c, CmdTopoGet)
	if err != nil {
		return Topology{}, err
	}
	t := Topology{Nodes: nodes}
	for _, n := range nodes {
		if n.Self {
			t.Self = n.ID
		}
	}
	return t, nil
}

// PathCache dumps the path cache. An agent that does not serve it answers
// an *Error matching syscall.EOPNOTSUPP.
func (c *Client) PathCache(ctx context.Context) ([]PathEntry, error) {
	return dumpOf[PathEntry](ctx, c, CmdPathGet)
}

// OwnedPages dumps the pages owned by the agent's host.
func (c *Client) OwnedPages(ctx context.Context) ([]OwnedPage, error) {
	return dumpOf[OwnedPage](ctx, c, CmdOwnerGet)
}

// Stats returns the agent's global counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := c.exchange(ctx, CmdStatsGet, 0, nil, func(attrs []byte) error {
		return decodeObject(attrs, &st)
	})
	return st, err
}

func dumpOf[T any, P interface {
	*T
	object
}](ctx context.Context, c *Client, cmd Cmd) ([]T, error) {
	items := []T{}
	err := c.exchange(ctx, cmd, flagDump, nil, func(attrs []byte) error {
		var v T
		if err := decodeObject(attrs, P(&v)); err != nil {
			return err
		}
		items = append(items, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// exchange sends one request and hands the attributes of each reply of the
// Family to each, until the reply is complete: NLMSG_DONE for a dump, the
// acknowledgement for a request with NLM_F_ACK, the single reply otherwise.
func (c *Client) exchange(ctx context.Context, cmd Cmd, flags netlink.HeaderFlags, req object, each func(attrs []byte) error) error {
	op := cmd.String()
	if flags&flagDump == flagDump {
		op += " dump"
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ctl: %s: %w", op, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for attempt := 0; ; attempt++ {
		fresh := c.conn == nil
		if fresh {
			conn, err := dial(c.path)
			if err != nil {
				return err
			}
			c.conn = conn
		}
		answered, err := c.attempt(ctx, op, cmd, flags, req, each)
		// A kept connection the server has since closed (idle timeout,
		// restart) fails before any answer: try once more on a new one.
		// Every request of the protocol may be repeated.
		if err != nil && !fresh && !answered && attempt == 0 && ctx.Err() == nil && connLost(err) {
			continue
		}
		return err
	}
}

// attempt sends the request once on c.conn. answered reports whether any
// reply to it arrived.
func (c *Client) attempt(ctx context.Context, op string, cmd Cmd, flags netlink.HeaderFlags, req object, each func([]byte) error) (answered bool, err error) {
	conn := c.conn
	c.seq++
	if c.seq == 0 {
		c.seq = 1 // sequence 0 is the server's own notices
	}
	seq := c.seq

	deadline := time.Now().Add(DefaultTimeout)
	d, ctxDeadline := ctx.Deadline()
	if ctxDeadline {
		deadline = d
	}
	if err := conn.SetDeadline(deadline); err != nil {
		c.abandon()
		return false, fmt.Errorf("ctl: %s: %w", op, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	answered, err = c.roundTrip(conn, op, cmd, flags, seq, req, each)
	interrupted := !stop()

	var refused *Error
	if interrupted {
		c.abandon() // its deadline was poisoned
	} else if err == nil || errors.As(err, &refused) && !refused.conn {
		return answered, err // the connection is in step: keep it
	}
	if err == nil {
		return answered, nil
	}
	c.abandon()
	if ctx.Err() != nil {
		return answered, fmt.Errorf("ctl: %s: %w", op, ctx.Err())
	}
	if ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket's deadline is the context's: it may fire first.
		return answered, fmt.Errorf("ctl: %s: %w", op, context.DeadlineExceeded)
	}
	return answered, err
}

// connLost reports an error of a connection the server closed.
func connLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

func (c *Client) roundTrip(conn net.Conn, op string, cmd Cmd, flags netlink.HeaderFlags, seq uint32, req object, each func([]byte) error) (answered bool, err error) {
	var attrs []byte
	if req != nil {
		if attrs, err = encodeObject(req); err != nil {
			return false, err
		}
	}
	b, err := encodeMessage(netlink.Header{Flags: flagRequest | flags, Sequence: seq, PID: c.pid}, cmd, attrs)
	if err != nil {
		return false, err
	}
	if _, err := conn.Write(b); err != nil {
		return false, c.closedWith(conn, op, err)
	}
	for {
		m, err := readMessage(conn, c.buf)
		if err != nil {
			return answered, fmt.Errorf("ctl: %s: %w", op, err)
		}
		if m.hdr.Type == netlink.Error && m.hdr.Sequence == 0 {
			// A notice about the connection itself (too many connections).
			return true, connNotice(op, m)
		}
		if m.hdr.Sequence != seq {
			continue // not ours (an event of a monitor member)
		}
		answered = true
		switch m.hdr.Type {
		case netlink.Error:
			return true, errorReply(op, m)
		case netlink.Done:
			if flags&flagDump != flagDump {
				return true, fmt.Errorf("%w: %s: NLMSG_DONE answering a request that is not a dump", ErrProtocol, op)
			}
			return true, nil
		case Family:
			if m.cmd != cmd {
				return true, fmt.Errorf("%w: %s: reply carries command %s", ErrProtocol, op, m.cmd)
			}
			if each == nil {
				return true, fmt.Errorf("%w: %s: unexpected reply", ErrProtocol, op)
			}
			if err := each(m.attrs); err != nil {
				return true, fmt.Errorf("%w: %s: %v", ErrProtocol, op, err)
			}
			if m.hdr.Flags&flagMulti == 0 && flags&flagAck == 0 {
				return true, nil
			}
		default:
			return true, fmt.Errorf("%w: %s: message type %#x", ErrProtocol, op, uint16(m.hdr.Type))
		}
	}
}

// closedWith explains a failed write: a server that refused the
// connection (too many connections) left a notice to read.
func (c *Client) closedWith(conn net.Conn, op string, werr error) error {
	conn.SetReadDeadline(time.Now().Add(noticeTimeout))
	if m, err := readMessage(conn, c.buf); err == nil && m.hdr.Type == netlink.Error && m.hdr.Sequence == 0 {
		return connNotice(op, m)
	}
	return fmt.Errorf("ctl: %s: %w", op, werr)
}

// abandon drops the connection after a failed or interrupted request.
func (c *Client) abandon() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// Monitor joins the monitor group on a connection of its own and calls each
// for every event, in order, until ctx is done (it returns ctx's error),
// each fails (its error), or the server ends the subscription: an *Error
// matching syscall.ENOBUFS when this monitor fell behind and was dropped,
// io.EOF when the server closed.
func (c *Client) Monitor(ctx context.Context, each func(Event) error) error {
	return c.MonitorSubscribed(ctx, nil, each)
}

// MonitorSubscribed is Monitor that calls subscribed (if not nil) once
// the server has acknowledged the subscription: every event published
// after it reaches each.
func (c *Client) MonitorSubscribed(ctx context.Context, subscribed func(), each func(Event) error) error {
	conn, err := dial(c.path)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	buf := make([]byte, MaxMessageSize+1)
	const op = "monitor"
	fail := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("ctl: %s: %w", op, err)
	}
	deadline := time.Now().Add(DefaultTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	b, err := encodeMessage(netlink.Header{Flags: flagRequest | flagAck, Sequence: 1, PID: c.pid},
		CmdSubscribe, mustAttrs(&group{id: MonitorGroup}))
	if err != nil {
		return err
	}
	if _, err := conn.Write(b); err != nil {
		return fail(err)
	}
	for acked := false; ; {
		m, err := readMessage(conn, buf)
		if err != nil {
			return fail(err)
		}
		switch {
		case m.hdr.Type == netlink.Error:
			if err := errorReply(op, m); err != nil {
				return err
			}
			if m.hdr.Sequence == 1 && !acked {
				acked = true
				if ctx.Err() == nil {
					conn.SetDeadline(time.Time{}) // events come when they come
				}
				if subscribed != nil {
					subscribed()
				}
			}
		case m.hdr.Type == Family && m.cmd == CmdEvent:
			var ev Event
			if err := decodeObject(m.attrs, &ev); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrProtocol, op, err)
			}
			if err := each(ev); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: %s: message type %#x cmd %s", ErrProtocol, op, uint16(m.hdr.Type), m.cmd)
		}
	}
}

// readMessage reads one datagram into buf and decodes it.
func readMessage(conn net.Conn, buf []byte) (message, error) {
	n, err := conn.Read(buf)
	if err != nil {
		return message{}, err
	}
	if n == 0 {
		return message{}, io.EOF
	}
	if n > MaxMessageSize {
		return message{}, fmt.Errorf("%w: message longer than %d bytes", ErrProtocol, MaxMessageSize)
	}
	m, werr := decodeMessage(buf[:n])
	if werr != nil {
		return message{}, fmt.Errorf("%w: %s", ErrProtocol, werr.reason)
	}
	return m, nil
}

// errorReply turns an NLMSG_ERROR into nil (an acknowledgement) or *Error.
func errorReply(op string, m message) error {
	errno, reason, err := decodeErrorPayload(m.hdr, m.payload)
	if err != nil {
		return err
	}
	if errno == 0 {
		return nil
	}
	return &Error{Op: op, Errno: errno, Reason: reason}
}

// connNotice is the server's word on the connection itself: it closes it.
func connNotice(op string, m message) error {
	errno, reason, err := decodeErrorPayload(m.hdr, m.payload)
	if err != nil {
		return err
	}
	if errno == 0 {
		errno = syscall.ECONNRESET
	}
	return &Error{Op: op, Errno: errno, Reason: reason, conn: true}
}

func mustAttrs(o object) []byte {
	b, err := encodeObject(o)
	if err != nil {
		panic(err) // fixed-size objects only
	}
	return b
}
