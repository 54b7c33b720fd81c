package ctl

import (
	"fmt"
	"net"
	"os"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/internal/quota"
)

// Authorisation on the control socket. The socket's mode (0660, the
// socket group) decides who may connect; every connected client may read
// (every *Get command, dumps, the monitor group). Commands that change
// something are allowed per command:
//
//	gpu set-limit   root or the agent's own user; another caller only
//	                where the CommandSource implements CommandAuthorizer
//	                and allows it (e.g. an owner tightening its own
//	                process's limits); anyone else: EPERM
//	quota set       root or the agent's own user; anyone else: EPERM
//	                (a CommandAuthorizer must not allow it)
//	capture         root or the agent's own user (with Plaintext or
//	                without); a member of the capture group
//	                (WithCaptureGroup) without Plaintext only, so it sees
//	                the datagrams as they cross the wire (sealed where the
//	                link is secured), with their payloads zeroed where
//	                the wire is plaintext (CaptureRequest.Redact: headers
//	                only, no page's bytes); anyone else: EPERM. A capture copies
//	                every node's traffic through the port, other users'
//	                pages included: it is never an ordinary reader's.
//
// The caller is identified by the connection's SO_PEERCRED. Each uid may
// hold at most DefaultQuota's connections and monitor subscriptions; root
// and the agent's user have a reserve of both.

// CommandAuthorizer is implemented by a CommandSource that lets callers
// other than root and the agent's user run some of its commands (on what
// they own). A nil error allows the command; wrap a syscall.Errno to choose
// the refusal's errno (EPERM otherwise).
type CommandAuthorizer interface {
	AuthorizeCommand(cmd Cmd, attrs []byte, uid uint32) error
}

// authorizeWrite decides whether the caller may run a command that
// changes something.
func authorizeWrite(cs CommandSource, r replier, cmd Cmd, attrs []byte) *wireError {
	uid, known := r.peer()
	if !known {
		return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("%s: caller unknown", cmd)}
	}
	if uid == 0 || uid == uint32(os.Geteuid()) {
		return nil
	}
	if cmd == CmdQuotaSet {
		return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("%s: only root or the agent's user may (uid %d)", cmd, uid)}
	}
	if a, ok := cs.(CommandAuthorizer); ok {
		if err := a.AuthorizeCommand(cmd, attrs, uid); err != nil {
			werr := errnoError(err)
			if werr.errno == syscall.EIO {
				werr.errno = syscall.EPERM
			}
			return werr
		}
		return nil
	}
	return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("%s: only root or the agent's user may (uid %d)", cmd, uid)}
}

// WithCaptureGroup lets the members of group gid (primary or
// supplementary, SO_PEERGROUPS) capture a port's datagrams as they cross
// the wire, never in plaintext. gid < 0: no capture group (the default).
func WithCaptureGroup(gid int) Option { return func(s *Server) { s.captureGID = gid } }

// authorizeCapture decides whether the caller may run req.
func (s *Server) authorizeCapture(r replier, req *CaptureRequest) *wireError {
	uid, known := r.peer()
	switch {
	case !known:
		return &wireError{errno: syscall.EPERM, reason: "capture: caller unknown"}
	case uid == 0 || uid == uint32(os.Geteuid()):
		return nil
	case s.captureGID >= 0 && r.inGroup(uint32(s.captureGID)):
		if req.Plaintext {
			return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("capture in plaintext: only root or the agent's user may (uid %d)", uid)}
		}
		req.Redact = true
		return nil
	}
	return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("capture: only root, the agent's user or the capture group may (uid %d)", uid)}
}

// DefaultQuota are the per-uid limits of the control socket: 8 connections
// and 4 monitor subscriptions per ordinary user, the last 8 connections
// and 8 subscriptions of the server kept for root and the agent's user.
func defaultQuota(maxConns int) *quota.Ledger {
	return quota.New(map[quota.Kind]quota.Limit{
		quota.Conns: {PerUID: 8, Total: maxConns, Reserve: min(8, maxConns/4)},
		quota.Subs:  {PerUID: 4, Total: maxConns, Reserve: min(8, maxConns/4)},
	}, uint32(os.Geteuid()))
}

// WithQuota replaces the server's per-uid connection and subscription
// ledger.
func WithQuota(l *quota.Ledger) Option { return func(s *Server) { s.quota = l } }

// peerCred reads a UNIX connection's peer uid, primary group and
// supplementary groups (SO_PEERCRED, SO_PEERGROUPS) as they were when it
// connected.
func peerCred(nc net.Conn) (cred peer, ok bool) {
	uc, isUnix := nc.(*net.UnixConn)
	if !isUnix {
		return peer{}, false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return peer{}, false
	}
	var uerr, gerr error
	if err := rc.Control(func(fd uintptr) {
		var u *unix.Ucred
		if u, uerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); uerr == nil {
			cred.uid, cred.gid = u.Uid, u.Gid
		}
		cred.groups, gerr = peerGroups(int(fd))
	}); err != nil || uerr != nil {
		return peer{}, false
	}
	if gerr != nil {
		cred.groups = nil // the primary group still counts
	}
	return cred, true
}

// peer is a client's identity.
type peer struct {
	uid, gid uint32
	groups   []uint32
}

func (p peer) inGroup(gid uint32) bool {
	return p.gid == gid || slices.Contains(p.groups, gid)
}

// peerGroups reads SO_PEERGROUPS: the supplementary groups of the peer
// when it connected.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for range 2 {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE:
			buf = make([]uint32, n/4+1) // n is the size it needs
			continue
		case e != 0:
			return nil, e
		}
		return buf[:n/4], nil
	}
	return nil, unix.ERANGE
}
