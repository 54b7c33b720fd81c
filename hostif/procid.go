package hostif

import (
	"net"

	"github.com/aitherion/dpu/internal/procid"
)

// The process behind a connection. SO_PEERCRED's pid names the process
// that connected only while it lives: once it exits, the pid may go to
// another process, while the connection (handed to a child, say) goes on.
// So the server reads the process's identity (pid and start time,
// internal/procid) as it accepts the connection, and those who keep
// accounts per process (the GPU accounting) key them by it.

// ProcessOf returns the identity of the process that opened connection
// conn (a hookwire.Peer's Conn), read when the server accepted it; false
// when the connection is not open, or the process was gone already then.
func (s *Server) ProcessOf(conn uint64) (procid.ID, bool) {
	v, ok := s.procs.Load(conn)
	if !ok {
		return procid.ID{}, false
	}
	return v.(procid.ID), true
}

// peerProcess reads the identity of uc's peer, whose pid is pid.
func peerProcess(uc *net.UnixConn, pid int32) (procid.ID, bool) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return procid.ID{}, false
	}
	var id procid.ID
	var perr error
	if err := rc.Control(func(fd uintptr) { id, perr = procid.OfPeer(int(fd), pid) }); err != nil || perr != nil {
		return procid.ID{}, false
	}
	return id, true
}
