package hostif

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// TestPeerCredentialsOfAClosedConnAreAnError: when the socket cannot be
// reached (the conn closed), peerCredentials fails; it never hands back
// zero credentials (UID 0, root's) as if they were read.
func TestPeerCredentialsOfAClosedConnAreAnError(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fds[1])
	f := os.NewFile(uintptr(fds[0]), "peer")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	uc := c.(*net.UnixConn)
	if cr, err := peerCredentials(uc); err != nil || cr.UID != uint32(os.Getuid()) {
		t.Fatalf("open conn: credentials %+v, %v; want this process's", cr, err)
	}
	uc.Close()
	if cr, err := peerCredentials(uc); err == nil {
		t.Fatalf("closed conn: credentials %+v and no error", cr)
	}
}
