package hostif

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/host/admit"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/backoff"
	"github.com/aitherion/dpu/internal/quota"
	"github.com/aitherion/dpu/internal/rundir"
)

// SocketName is the host interface socket's name inside the run directory.
const SocketName = "dpu0.sock"

// Options tune a Server. The zero value of each field means its default.
type Options struct {
	// SocketMode is the permission of the socket file (default 0660).
	SocketMode os.FileMode
	// SocketGroup is the group (name or number) of the socket file; empty
	// leaves the group the process creates files with.
	SocketGroup string
	// DefaultMode is the mode of pages allocated with mode 0 (default 0600).
	DefaultMode uint32
	// MaxConns bounds the open connections (default 1024).
	MaxConns int
	// MaxOutstanding bounds the requests in flight on one connection
	// (default 64); the server stops reading a connection at the bound.
	MaxOutstanding int
	// OpTimeout bounds every Backend call (default 10s).
	OpTimeout time.Duration
	// LockTimeout is the wait of a LOCK or ACQUIRE that names none
	// (default 5s); MaxLockTimeout caps the ones that do (default 30s).
	LockTimeout, MaxLockTimeout time.Duration
	// ReleaseTimeout bounds releasing what a closed connection held
	// (default 5s).
	ReleaseTimeout time.Duration
	// WriteTimeout is how long a reply or event may wait for a client to
	// read; a client slower than that is disconnected (default 5s).
	WriteTimeout time.Duration
	// MaxGarbage is how many malformed requests a connection may send;
	// the next one disconnects it (default 8).
	MaxGarbage int
	// StatusSlots is the size of each connection's replica status table
	// (entry 0 unused): one connection maps at most StatusSlots-1 pages at
	// once, and so does the node (default 65536).
	StatusSlots int
	// EventQueue is the events a connection may have waiting (default 256);
	// beyond it events are dropped and the client told so (EventLost).
	EventQueue int
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
	// Observe, when set, is told of every answered request: its op, the
	// time from its arrival to its reply and its errno (0: success). It
	// must not block (the metrics exporter's is a few atomic adds).
	Observe func(op wire.Op, d time.Duration, errno syscall.Errno)
	// RingBell, when set, makes the server offer shared-memory ring pairs
	// (op RINGS): it is told each ring's bell descriptor as the ring
	// opens (add) and before it closes, for the driver's poll set; the
	// driver serves the rings with ServeRings, ParkRings and WakeRings.
	RingBell func(fd int, add bool)
	// GPU serves the CUDA hook's GPU accounting ops (a hookwire.Handler);
	// nil answers them ENOSYS.
	GPU hookwire.Handler
	// HelloTimeout closes a connection that has not said hello this long
	// after it connected (default 10s).
	HelloTimeout time.Duration
	// MaxBulkArea bounds a connection's bulk area (BULK; default 4 MiB,
	// at most wire.MaxBulkArea): shared memory the agent makes for the
	// client's bulk transfers.
	MaxBulkArea int
	// Quota counts connections per uid (nil: a ledger of 64 connections
	// per uid with the last 64 of MaxConns kept for root and the agent's
	// user). Pages are the core's to charge (coherence.Config.Quota).
	Quota *quota.Ledger
}

func (o *Options) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.SocketMode == 0 {
		o.SocketMode = 0o660
	}
	if o.DefaultMode == 0 {
		o.DefaultMode = 0o600
	}
	def(&o.MaxConns, 1024)
	def(&o.MaxOutstanding, 64)
	def(&o.MaxBulkArea, 4<<20)
	o.MaxBulkArea = min(o.MaxBulkArea, wire.MaxBulkArea)
	def(&o.MaxGarbage, 8)
	def(&o.StatusSlots, 1<<16)
	def(&o.EventQueue, 256)
	defDur(&o.OpTimeout, 10*time.Second)
	defDur(&o.LockTimeout, 5*time.Second)
	defDur(&o.MaxLockTimeout, 30*time.Second)
	defDur(&o.ReleaseTimeout, 5*time.Second)
	defDur(&o.WriteTimeout, 5*time.Second)
	defDur(&o.HelloTimeout, 10*time.Second)
	if o.Quota == nil {
		o.Quota = quota.New(map[quota.Kind]quota.Limit{
			quota.Conns: {PerUID: 64, Total: o.MaxConns, Reserve: min(64, o.MaxConns/4)},
		}, uint32(os.Geteuid()))
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Server serves the host interface of one node over a SOCK_SEQPACKET UNIX
// socket. A Server serves once: NewServer, then ListenAndServe or Serve.
type Server struct {
	be   Backend
	call verbs // be's one verb in the server's own session (ServerSession)
	opts Options
	log  *slog.Logger
	// bounds: what the server puts on the requests it admits (opts')
	bounds admit.Bounds

	pipe    Pipeline      // the backend's
	await   Awaiter       // the pipeline's, if it has one
	nextReq atomic.Uint64 // the last pipelined request id
	rings   ringSet
	// ringOps is ServeRings' batch of pipelined requests (only the
	// driver's loop serves rings, so one buffer serves every pass).
	ringOps [16]coherence.Request
	// ringTaken is ServeRings' list of the submissions one ring's pass
	// took (only the driver's loop uses it).
	ringTaken []takenSub

	spaces *addressSpaces

	maps mapsTable // dpu_mmap areas the host's processes report (maps.go)

	// Set by Serve.
	replicas *replicaTable
	served   atomic.Bool
	// acceptErrs counts failed accepts (Serve backs off and serves on)
	acceptErrs atomic.Uint64
	// procs is the identity of each open connection's process, read as
	// it was accepted (procid.go): conn id → procid.ID
	procs sync.Map

	connMu   sync.Mutex
	conns    map[*conn]struct{}
	bySess   map[Session]*conn // the open connections by session (events name one)
	nextConn uint64
	connWG   sync.WaitGroup
}

// Errors returned by the Server.
var (
	// ErrServed is returned by a second Serve or ListenAndServe.
	ErrServed = errors.New("hostif: server already served")
	// ErrSocketInUse is returned when another server answers on the path.
	ErrSocketInUse = errors.New("hostif: socket in use by a live server")
)

// NewServer returns a Server in front of be.
func NewServer(be Backend, opts Options) (*Server, error) {
	if be == nil {
		return nil, errors.New("hostif: nil backend")
	}
	opts.setDefaults()
	if opts.StatusSlots < 2 || opts.StatusSlots > 1<<24 {
		return nil, fmt.Errorf("hostif: StatusSlots %d out of range 2..2^24", opts.StatusSlots)
	}
	if opts.DefaultMode&^wire.ModeMask != 0 {
		return nil, fmt.Errorf("hostif: DefaultMode %#o has bits beyond %#o", opts.DefaultMode, wire.ModeMask)
	}
	s := &Server{
		be: be, call: verbs{be: be, session: ServerSession}, opts: opts, log: opts.Logger,
		bounds: admit.Bounds{Op: opts.OpTimeout, Lock: opts.LockTimeout, MaxLock: opts.MaxLockTimeout, DefaultMode: opts.DefaultMode},
		spaces: newAddressSpaces(), conns: make(map[*conn]struct{}),
		bySess: make(map[Session]*conn),
	}
	s.pipe = be
	be.Attach(s.Complete)
	s.await, _ = be.(Awaiter)
	return s, nil
}

// SocketPath returns the host interface socket path of run directory dir.
func SocketPath(dir string) string { return filepath.Join(dir, SocketName) }

// ListenAndServe creates the socket at path (mode and group from Options;
// a stale socket file is replaced, a live one is ErrSocketInUse) and serves
// it until ctx ends. It removes the socket file before it returns.
func (s *Server) ListenAndServe(ctx context.Context, path string) error {
	l, fi, err := listen(path, s.opts.SocketMode, s.opts.SocketGroup)
	if err != nil {
		return err
	}
	defer func() {
		_ = l.Close()
		// Remove the file only if it is still ours: another server may
		// have replaced it.
		if cur, err := os.Lstat(path); err == nil && os.SameFile(cur, fi) {
			_ = os.Remove(path)
		}
	}()
	return s.Serve(ctx, l)
}

// Serve serves connections accepted from l until ctx ends, then closes l,
// disconnects every client, releases what they held and returns nil. A
// failed accept does not end it (it backs off, logs and counts,
// AcceptErrors); only l closed by someone else does, with an error.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	if s.served.Swap(true) {
		return ErrServed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := s.openSession(ctx); err != nil {
		return err
	}
	defer s.closeSession()
	s.replicas = newReplicaTable(s.pipe, s.opts.StatusSlots-1, s.opts.OpTimeout, s.opts.Quota)

	var bg sync.WaitGroup
	bg.Go(func() { s.dispatchEvents(ctx) })
	bg.Go(func() { s.replicas.runReloads(ctx) })
	bg.Go(func() {
		<-ctx.Done()
		_ = l.Close()
	})

	var acceptErr error
	var wait backoff.Accept
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				acceptErr = fmt.Errorf("hostif: accept: %w", err)
				cancel()
				break
			}
			// Out of descriptors (EMFILE, ENFILE), out of memory, a
			// connection reset before it was taken: none ends the server.
			// It backs off (bounded), logs and counts, and serves on; the
			// connection the kernel queued is taken on the next try.
			s.acceptErrs.Add(1)
			delay := wait.Failed()
			s.log.Warn("host socket accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		wait.Succeeded()
		s.admit(ctx, uc)
	}

	s.connMu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.connMu.Unlock()
	s.connWG.Wait()
	cancel()
	bg.Wait()
	return acceptErr
}

// AcceptErrors returns how many accepts failed since the server started
// (each one backed off and served on).
func (s *Server) AcceptErrors() uint64 { return s.acceptErrs.Load() }

// connFiles is what a connection costs its user in descriptors: its
// socket and its status table.
const connFiles = 2

// admit starts serving a new connection, or closes it at once when the
// server has MaxConns already.
func (s *Server) admit(ctx context.Context, uc *net.UnixConn) {
	cred, err := peerCredentials(uc)
	if err != nil {
		s.log.Warn("rejecting connection", "err", err)
		_ = uc.Close()
		return
	}
	proc, procOK := peerProcess(uc, cred.PID) // before the lock: it reads /proc
	s.connMu.Lock()
	if len(s.conns) >= s.opts.MaxConns {
		s.connMu.Unlock()
		s.log.Warn("rejecting connection: too many", "pid", cred.PID, "uid", cred.UID)
		_ = uc.Close()
		return
	}
	if err := s.takeConn(cred.UID); err != nil {
		s.connMu.Unlock()
		s.log.Warn("rejecting connection", "pid", cred.PID, "uid", cred.UID, "err", err)
		_ = uc.Close()
		return
	}
	s.nextConn++
	id := s.nextConn
	if procOK {
		s.procs.Store(id, proc)
	}
	c := newConn(ctx, s, uc, cred, id)
	s.conns[c] = struct{}{}
	s.bySess[c.call.session] = c
	s.connWG.Add(1)
	s.connMu.Unlock()
	go func() {
		defer s.connWG.Done()
		c.serve()
		s.connMu.Lock()
		delete(s.conns, c)
		delete(s.bySess, c.call.session)
		s.connMu.Unlock()
		s.procs.Delete(id)
		s.releaseConn(cred.UID)
	}()
}

// takeConn charges uid for a connection: one of its connections, and
// its socket and status table as two of its descriptors.
func (s *Server) takeConn(uid uint32) error {
	if err := s.opts.Quota.Take(uid, quota.Conns, 1); err != nil {
		return err
	}
	if err := s.opts.Quota.Take(uid, quota.Files, connFiles); err != nil {
		s.opts.Quota.Release(uid, quota.Conns, 1)
		return err
	}
	return nil
}

// releaseConn gives back what takeConn charged.
func (s *Server) releaseConn(uid uint32) {
	s.opts.Quota.Release(uid, quota.Files, connFiles)
	s.opts.Quota.Release(uid, quota.Conns, 1)
}

// openSession opens the server's own session in the Backend.
func (s *Server) openSession(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OpTimeout)
	defer cancel()
	if err := s.call.Open(ctx); err != nil {
		return fmt.Errorf("hostif: opening the server's session: %w", err)
	}
	return nil
}

// closeSession closes the server's own session (the server stops).
func (s *Server) closeSession() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReleaseTimeout)
	defer cancel()
	if err := s.call.Close(ctx); err != nil {
		s.log.Warn("closing the server's session", "err", err)
	}
}

// connOf returns the open connection of session id, or nil.
func (s *Server) connOf(id Session) *conn {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	return s.bySess[id]
}

// listen binds a SOCK_SEQPACKET socket at path with the given mode and
// group (rundir.Listen: bound in a private directory, mode and group set
// there, renamed into place), so path never has a looser mode and no
// symlink swapped into the run directory can redirect the chmod/chown.
func listen(path string, mode os.FileMode, group string) (*net.UnixListener, os.FileInfo, error) {
	if err := clearStaleSocket(path); err != nil {
		return nil, nil, err
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, nil, err
		}
		gid = g
	}
	l, err := rundir.Listen(path, mode, gid)
	if err != nil {
		return nil, nil, fmt.Errorf("hostif: %w", err)
	}
	return l.UnixListener, l.FileInfo(), nil
}

// clearStaleSocket removes a socket file nobody answers on; a live one is
// ErrSocketInUse and anything that is not a socket is left alone.
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hostif: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("hostif: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("%w: %s", ErrSocketInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("hostif: probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("hostif: %w", err)
	}
	return nil
}

func lookupGroup(group string) (int, error) {
	if n, err := strconv.Atoi(group); err == nil {
		return n, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("hostif: socket group: %w", err)
	}
	return strconv.Atoi(g.Gid)
}
