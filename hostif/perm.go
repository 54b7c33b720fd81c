package hostif

import (
	"context"
	"fmt"
	"net"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
)

// Access bits of a page mode, as in a file mode.
const (
	accessRead  = gva.AccessRead
	accessWrite = gva.AccessWrite
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

// allowed reports whether cr may access a page with attributes a as need
// (accessRead, accessWrite or both), by the product's one permission rule
// (gva.Allows).
func (cr *credentials) allowed(a Attr, need uint32) bool {
	return gva.Allows(a, gva.Cred{UID: cr.UID, GID: cr.GID, Groups: cr.Groups}, need)
}

// check fails with EACCES unless c may access page key as need. The
// attributes come from the server's cache, or from the Backend (VerbStat). It
// returns ctx carrying c's credentials for the Backend call (withCred):
// the nodes that serve the call check them again.
func (s *Server) check(ctx context.Context, c *conn, key gva.GVA, need uint32) (context.Context, error) {
	if c.cred.UID != 0 && !(bugsCompiled && bugSkipChecks(s.be.Machine())) {
		a, err := s.attr(ctx, key)
		if err != nil {
			return ctx, err
		}
		if !c.cred.allowed(a, need) {
			return ctx, fmt.Errorf("page %v mode %#o owner %d:%d: %w", key, a.Mode, a.UID, a.GID, syscall.EACCES)
		}
	}
	return withCred(ctx, s.credFor(c, key)), nil
}

// maxCredGroups is the most supplementary groups a Cred carries (the
// engine's wire bound).
const maxCredGroups = 16

// credFor is c's Cred for a request on page key: the page's group
// first among the supplementary groups when c is in it (its attributes
// are cached once check has passed).
func (s *Server) credFor(c *conn, key gva.GVA) Cred {
	cr := Cred{UID: c.cred.UID, GID: c.cred.GID, Groups: c.cred.Groups}
	if cr.UID == 0 || len(cr.Groups) <= maxCredGroups {
		return cr
	}
	a, ok := s.attrs.Get(key)
	if !ok {
		return cr
	}
	i := slices.Index(cr.Groups, a.GID)
	if i < maxCredGroups {
		return cr // not a member, or among the groups that travel
	}
	gs := make([]uint32, 0, maxCredGroups)
	gs = append(gs, a.GID)
	cr.Groups = append(gs, cr.Groups[:maxCredGroups-1]...)
	return cr
}

// attr returns the attributes of page key. They never change after Alloc,
// so the cache is only ever emptied by Free.
func (s *Server) attr(ctx context.Context, key gva.GVA) (Attr, error) {
	if a, ok := s.attrs.Get(key); ok {
		return a, nil
	}
	a, err := s.call.Stat(ctx, key)
	if err != nil {
		return Attr{}, fmt.Errorf("stat %v: %w", key, err)
	}
	s.attrs.Add(key, a)
	return a, nil
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
