package hostif

import (
	"context"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// credentials identify the process at the other end of a connection, as the
// kernel recorded them when it connected (SO_PEERCRED, SO_PEERGROUPS).
type credentials struct {
	PID      int32
	UID, GID uint32
	Groups   []uint32 // supplementary groups; nil when the kernel cannot say
}

// peerCredentials reads the credentials of uc's peer.
func peerCredentials(uc *net.UnixConn) (credentials, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return credentials{}, err
	}
	var cr credentials
	var opErr error
	err = raw.Control(func(fd uintptr) {
		var u *unix.Ucred
		if u, opErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); opErr != nil {
			return
		}
		cr = credentials{PID: u.Pid, UID: u.Uid, GID: u.Gid}
		cr.Groups = peerGroups(int(fd))
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return credentials{}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return cr, nil
}

// peerGroups reads SO_PEERGROUPS (Linux 4.13+); nil when unavailable.
func peerGroups(fd int) []uint32 {
	buf := make([]uint32, 64)
	for range 2 {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch e {
		case 0:
			return buf[:n/4]
		case unix.ERANGE:
			buf = make([]uint32, n/4+1)
		default:
			return nil
		}
	}
	return nil
}

// credential is the user c's requests are made for, as the core takes
// it: the core checks it against the page's attributes (the one
// permission rule, gva.Allows), and the nodes that serve the request
// check it again.
func (c *conn) credential() Cred {
	return Cred{UID: c.cred.UID, GID: c.cred.GID, Groups: c.cred.Groups}
}

type credKey struct{}

// withCred returns ctx carrying cred: the verbs of the Backend (verbs.go)
// put it in their Call.
func withCred(ctx context.Context, cred Cred) context.Context {
	return context.WithValue(ctx, credKey{}, cred)
}

// credOf returns the Cred ctx carries (zero: none, the node's own call).
func credOf(ctx context.Context) Cred {
	cred, _ := ctx.Value(credKey{}).(Cred)
	return cred
}
