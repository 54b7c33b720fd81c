package ctl

import (
	"fmt"
	"net"
	"os"
	"syscall"

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

// peerUID reads a UNIX connection's peer uid (SO_PEERCRED).
func peerUID(nc net.Conn) (uint32, bool) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return cred.Uid, true
}
