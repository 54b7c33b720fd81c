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
//	gpu set    root or the agent's own user: any limit on any process;
//	           the process's owner: only tighten its own process's limits
//	           (lower a limit, or set one where there was none); lifting
//	           or raising a limit needs root; anyone else: EPERM
//
// The caller is identified by the connection's SO_PEERCRED. Each uid may
// hold at most DefaultQuota's connections and monitor subscriptions; root
// and the agent's user have a reserve of both.

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

// authorizeGPULimit decides whether uid may set lim (see the table above).
func authorizeGPULimit(gs GPUSource, uid uint32, known bool, lim GPULimit) *wireError {
	if !known {
		return &wireError{errno: syscall.EPERM, reason: "gpu set: caller unknown"}
	}
	if uid == 0 || uid == uint32(os.Geteuid()) {
		return nil
	}
	for _, p := range gs.GPUProcesses() {
		if p.PID != lim.PID || p.Device != lim.Device {
			continue
		}
		if p.UID != uid {
			return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("gpu set: process %d belongs to uid %d", p.PID, p.UID)}
		}
		if loosens(p.MemoryLimit, lim.MemoryLimit) || loosens(uint64(p.KernelQuota), uint64(lim.KernelQuota)) {
			return &wireError{errno: syscall.EPERM, reason: "gpu set: only root may raise or lift a limit"}
		}
		return nil
	}
	return &wireError{errno: syscall.EPERM, reason: fmt.Sprintf("gpu set: no process %d on device %d of yours", lim.PID, lim.Device)}
}

// loosens reports whether going from limit cur to next (0: unlimited)
// allows more.
func loosens(cur, next uint64) bool {
	switch {
	case cur == 0:
		return false // anything is tighter than unlimited
	case next == 0:
		return true
	default:
		return next > cur
	}
}
