package ctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/internal/backoff"
	"github.com/aitherion/dpu/internal/quota"
	"github.com/aitherion/dpu/internal/rundir"
)

// MaxMessageSize is the largest message of the protocol, request or reply.
// Clients read replies into a buffer of this size.
const MaxMessageSize = 64 << 10

// Limits bound what one client can make the server hold. Zero fields take
// the value of DefaultLimits.
type Limits struct {
	// MaxMessage is the largest request accepted and reply sent, in bytes
	// (at most MaxMessageSize). A larger request is answered EMSGSIZE.
	MaxMessage int
	// MaxConns is the most connections served at once; more are answered
	// EBUSY and closed.
	MaxConns int
	// IdleTimeout closes a connection that sends no request for this long.
	// It does not apply to monitor subscribers.
	IdleTimeout time.Duration
	// WriteTimeout closes a connection that does not take a reply or an
	// event within this time.
	WriteTimeout time.Duration
	// MonitorQueue is how many events may wait for one subscriber. A
	// subscriber that falls this far behind is dropped.
	MonitorQueue int
}

// DefaultLimits are the limits of a server made without WithLimits.
var DefaultLimits = Limits{
	MaxMessage:   MaxMessageSize,
	MaxConns:     64,
	IdleTimeout:  2 * time.Minute,
	WriteTimeout: 5 * time.Second,
	MonitorQueue: 1024,
}

// noticeTimeout bounds the write of a last notice (overrun, busy) to a
// connection that is being closed.
const noticeTimeout = 100 * time.Millisecond

// Option configures a Server.
type Option func(*Server)

// WithLimits sets the server's limits; zero fields keep their defaults.
func WithLimits(l Limits) Option {
	return func(s *Server) {
		if l.MaxMessage > 0 {
			s.limits.MaxMessage = min(l.MaxMessage, MaxMessageSize)
		}
		if l.MaxConns > 0 {
			s.limits.MaxConns = l.MaxConns
		}
		if l.IdleTimeout > 0 {
			s.limits.IdleTimeout = l.IdleTimeout
		}
		if l.WriteTimeout > 0 {
			s.limits.WriteTimeout = l.WriteTimeout
		}
		if l.MonitorQueue > 0 {
			s.limits.MonitorQueue = l.MonitorQueue
		}
	}
}

// ErrSocketInUse is returned by Listen when a server already answers on
// the socket path.
var ErrSocketInUse = errors.New("ctl: control socket in use")

// Server serves the control protocol over SOCK_SEQPACKET UNIX sockets.
type Server struct {
	src    Source
	log    *slog.Logger
	limits Limits

	mu       sync.Mutex
	conns    map[*conn]struct{} // every open connection
	subs     map[*conn]struct{} // members of the monitor group
	refusing int                // connections being refused
	quota    *quota.Ledger      // connections and subscriptions per uid

	acceptErrs atomic.Uint64 // failed accepts (Serve backs off and serves on)
	captureGID int           // the capture group (WithCaptureGroup); -1: none
}

// AcceptErrors returns how many accepts failed (each one backed off and
// served on).
func (s *Server) AcceptErrors() uint64 { return s.acceptErrs.Load() }

// NewServer returns a server answering from src. log may be nil.
func NewServer(src Source, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		src:    src,
		log:    log,
		limits: DefaultLimits,
		conns:  make(map[*conn]struct{}),
		subs:   make(map[*conn]struct{}),

		captureGID: -1,
	}
	for _, o := range opts {
		o(s)
	}
	if s.quota == nil {
		s.quota = defaultQuota(s.limits.MaxConns)
	}
	return s
}

// ListenAndServe listens on the UNIX socket path (see Listen) and serves it
// until ctx is done; the socket file is removed when it returns.
func (s *Server) ListenAndServe(ctx context.Context, path string) error {
	l, err := Listen(path)
	if err != nil {
		return err
	}
	return s.Serve(ctx, l)
}

// Listen opens a SOCK_SEQPACKET UNIX socket at path with mode 0660 and the
// caller's group; see ListenGroup.
func Listen(path string) (*rundir.Listener, error) { return ListenGroup(path, -1) }

// ListenGroup opens a SOCK_SEQPACKET UNIX socket at path with mode 0660
// and group gid (-1: the caller's). A stale socket file (no server answers
// on it) is replaced; a live one is refused with ErrSocketInUse; any other
// file is left alone and refused. The socket is bound in a private
// directory and renamed into place once its mode and group are set
// (rundir.Listen), so no symlink swapped in can redirect the chmod/chown.
// Closing the listener removes the socket file if it is still this one.
func ListenGroup(path string, gid int) (*rundir.Listener, error) {
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := rundir.Listen(path, 0o660, gid)
	if err != nil {
		return nil, fmt.Errorf("ctl: %w", err)
	}
	return l, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ctl: listen: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("ctl: listen: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unixpacket", path, noticeTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s", ErrSocketInUse, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctl: listen: remove stale socket: %w", err)
	}
	return nil
}

// Serve accepts connections on l until ctx is done, then closes l and every
// connection it accepted and waits for their goroutines. It returns nil
// after ctx is done, or the listener's error if l fails first. Each
// connection must preserve message boundaries (SOCK_SEQPACKET). Shutdown
// waits for Source calls in progress: a Source must not block.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer l.Close()

	var (
		wg   sync.WaitGroup
		mine = make(map[*conn]struct{})
		wait backoff.Accept
		err  error
	)
accept:
	for {
		var nc net.Conn
		nc, err = l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = nil
				break
			}
			if errors.Is(err, net.ErrClosed) {
				break
			}
			// Out of descriptors or similar: back off, bounded.
			s.acceptErrs.Add(1)
			delay := wait.Failed()
			s.log.Warn("control socket accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-ctx.Done():
				err = nil
				break accept
			}
		}
		wait.Succeeded()
		c := s.admit(nc, &wg)
		if c == nil {
			continue
		}
		s.mu.Lock()
		mine[c] = struct{}{}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.serve()
			s.mu.Lock()
			delete(mine, c)
			s.mu.Unlock()
		}()
	}

	s.mu.Lock()
	open := make([]*conn, 0, len(mine))
	for c := range mine {
		open = append(open, c)
	}
	s.mu.Unlock()
	for _, c := range open {
		c.nc.Close()
	}
	wg.Wait()
	if err != nil {
		return fmt.Errorf("ctl: accept: %w", err)
	}
	return nil
}

// admit registers a new connection, or returns nil when the server is
// full: the connection is then refused in the background.
func (s *Server) admit(nc net.Conn, wg *sync.WaitGroup) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) >= s.limits.MaxConns {
		s.log.Warn("control connection refused: too many connections", "max", s.limits.MaxConns)
		if s.refusing >= maxRefusing {
			nc.Close()
			return nil
		}
		s.refusing++
		wg.Add(1)
		go func() {
			defer wg.Done()
			refuse(nc)
			s.mu.Lock()
			s.refusing--
			s.mu.Unlock()
		}()
		return nil
	}
	cred, known := peerCred(nc)
	uid := cred.uid
	if known {
		if err := s.quota.Take(uid, quota.Conns, 1); err != nil {
			s.log.Warn("control connection refused", "uid", uid, "err", err)
			nc.Close()
			return nil
		}
	}
	c := &conn{
		s:       s,
		nc:      nc,
		uid:     uid,
		cred:    cred,
		known:   known,
		done:    make(chan struct{}),
		overrun: make(chan struct{}),
	}
	s.conns[c] = struct{}{}
	return c
}

// maxRefusing bounds the connections being refused at once; beyond it a
// connection is closed without a word.
const maxRefusing = 16

// refuse tells a connection the server is full (NLMSG_ERROR -EBUSY, seq 0)
// and closes it. It first takes the client's request, if one comes within
// noticeTimeout: closing a socket with unread data would reset the
// connection and lose the notice.
func refuse(nc net.Conn) {
	defer nc.Close()
	b, err := encodeError(netlink.Header{}, syscall.EBUSY, "too many control connections")
	if err != nil {
		return
	}
	nc.SetDeadline(time.Now().Add(noticeTimeout))
	if _, err := nc.Write(b); err != nil {
		return
	}
	var req [headerLen]byte
	nc.Read(req[:])
}

// Publish sends ev to every member of the monitor group. It never blocks:
// a member whose queue is full is dropped (told ENOBUFS and disconnected).
// A zero ev.Time is set to the current time.
func (s *Server) Publish(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	attrs, err := encodeObject(&ev)
	if err == nil {
		var b []byte
		b, err = encodeMessage(netlink.Header{}, CmdEvent, attrs)
		if err == nil {
			s.deliver(b)
			return
		}
	}
	s.log.Error("monitor event not published", "kind", ev.KindName(), "err", err)
}

func (s *Server) deliver(b []byte) {
	s.mu.Lock()
	members := make([]*conn, 0, len(s.subs))
	for c := range s.subs {
		members = append(members, c)
	}
	s.mu.Unlock()
	for _, c := range members {
		select {
		case c.events <- b:
		default:
			c.drop()
		}
	}
}

// Subscribers is the number of members of the monitor group.
func (s *Server) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// conn is one client connection.
type conn struct {
	s     *Server
	nc    net.Conn
	uid   uint32 // the client's (SO_PEERCRED), when known
	cred  peer   // and its groups
	known bool

	wmu sync.Mutex // one writer at a time: replies and events

	events      chan []byte   // set on first join, under s.mu
	overrun     chan struct{} // closed when the member is dropped
	overrunOnce sync.Once
	done        chan struct{} // closed when the connection ends
	pumps       sync.WaitGroup
}

// serve reads requests and answers them until the connection fails, idles
// out or is closed.
func (c *conn) serve() {
	defer c.close()
	lim := c.s.limits
	buf := make([]byte, lim.MaxMessage+1)
	for {
		deadline := time.Now().Add(lim.IdleTimeout)
		if c.member() {
			deadline = time.Time{}
		}
		if err := c.nc.SetReadDeadline(deadline); err != nil {
			return
		}
		n, err := c.nc.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.s.log.Debug("control connection idle, closed")
			}
			return
		}
		if n > lim.MaxMessage {
			hdr, _ := parseHeader(buf[:n])
			werr := &wireError{errno: syscall.EMSGSIZE,
				reason: fmt.Sprintf("request exceeds the %d-byte message limit", lim.MaxMessage)}
			if c.s.replyError(c, hdr, werr) != nil {
				return
			}
			continue
		}
		if err := c.s.handle(buf[:n], c); err != nil {
			return
		}
	}
}

// emit writes one message, bounded by the write timeout.
func (c *conn) emit(b []byte) error {
	return c.write(b, c.s.limits.WriteTimeout)
}

func (c *conn) write(b []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.nc.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := c.nc.Write(b)
	return err
}

func (c *conn) member() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, ok := c.s.subs[c]
	return ok
}

// join makes the connection a member of group (only MonitorGroup exists).
func (c *conn) join(uint32) error {
	select {
	case <-c.overrun:
		return &wireError{errno: syscall.ENOBUFS, reason: "dropped from the monitor group"}
	default:
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, member := s.subs[c]; !member && c.known {
		if err := s.quota.Take(c.uid, quota.Subs, 1); err != nil {
			return &wireError{errno: syscall.EBUSY, reason: err.Error()}
		}
	}
	if c.events == nil {
		c.events = make(chan []byte, s.limits.MonitorQueue)
		c.pumps.Add(1)
		go func() {
			defer c.pumps.Done()
			c.pump(c.events)
		}()
	}
	s.subs[c] = struct{}{}
	return nil
}

func (c *conn) leave(uint32) {
	c.s.mu.Lock()
	c.unsubscribe()
	c.s.mu.Unlock()
}

// unsubscribe drops the membership and its quota. Called with s.mu held.
func (c *conn) unsubscribe() {
	if _, member := c.s.subs[c]; member {
		delete(c.s.subs, c)
		if c.known {
			c.s.quota.Release(c.uid, quota.Subs, 1)
		}
	}
}

func (c *conn) peer() (uint32, bool) { return c.uid, c.known }

func (c *conn) inGroup(gid uint32) bool { return c.known && c.cred.inGroup(gid) }

// pump writes queued events to a member until the connection ends or the
// member is dropped.
func (c *conn) pump(events <-chan []byte) {
	for {
		select {
		case <-c.done:
			return
		case <-c.overrun:
			c.sendOverrun()
			return
		case b := <-events:
			if err := c.emit(b); err != nil {
				c.s.log.Warn("monitor subscriber dropped: write failed", "err", err)
				c.nc.Close()
				return
			}
		}
	}
}

// drop removes a member that fell behind; its pump tells it and closes the
// connection.
func (c *conn) drop() {
	c.overrunOnce.Do(func() {
		c.leave(MonitorGroup)
		close(c.overrun)
		c.s.log.Warn("monitor subscriber dropped: too slow", "queue", c.s.limits.MonitorQueue)
	})
}

func (c *conn) sendOverrun() {
	b, err := encodeError(netlink.Header{}, syscall.ENOBUFS, "monitor subscriber too slow: events lost")
	if err == nil {
		c.write(b, noticeTimeout)
	}
	c.nc.Close()
}

func (c *conn) close() {
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	c.unsubscribe()
	if c.known {
		s.quota.Release(c.uid, quota.Conns, 1)
	}
	s.mu.Unlock()
	close(c.done)
	c.nc.Close()
	c.pumps.Wait()
}
