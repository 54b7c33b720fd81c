package ctl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/internal/quota"
)

// commandSource serves the extension commands and counts what it did.
type commandSource struct {
	fuzzSource
	done  int
	allow func(uid uint32) error // nil: no CommandAuthorizer
}

func (c *commandSource) DumpObjects(Cmd) ([]Object, error) { return nil, nil }
func (c *commandSource) DoCommand(Cmd, []byte) error       { c.done++; return nil }

type authorizingSource struct{ *commandSource }

func (a authorizingSource) AuthorizeCommand(_ Cmd, _ []byte, uid uint32) error { return a.allow(uid) }

// as is a replier with a given peer uid.
type as struct {
	recorder
	uid uint32
}

func (a *as) peer() (uint32, bool) { return a.uid, true }

func setLimit(t *testing.T, s *Server, uid uint32) syscall.Errno {
	t.Helper()
	r := &as{uid: uid}
	b, err := encodeMessage(netlink.Header{Flags: flagRequest | flagAck, Sequence: 9, PID: 1}, CmdGPUSetLimit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.handle(b, r); err != nil {
		t.Fatal(err)
	}
	if len(r.sent) != 1 {
		t.Fatalf("%d replies", len(r.sent))
	}
	m, werr := decodeMessage(r.sent[0])
	if werr != nil {
		t.Fatal(werr)
	}
	errno, _, err := decodeErrorPayload(m.hdr, m.payload)
	if err != nil {
		t.Fatal(err)
	}
	return errno
}

// TestGPUSetIsAuthorised (attack 7): a member of the socket group cannot
// set GPU limits (another user's process's, or lift root's); root can; a
// source may let owners act on what they own (CommandAuthorizer).
func TestGPUSetIsAuthorised(t *testing.T) {
	src := &commandSource{}
	s := NewServer(src, nil)
	if got := setLimit(t, s, 1000); got != syscall.EPERM {
		t.Fatalf("uid 1000 sets a GPU limit: %v, want EPERM", got)
	}
	if got := setLimit(t, s, 0); got != 0 || src.done != 1 {
		t.Fatalf("root sets a GPU limit: %v (done %d)", got, src.done)
	}
	src.allow = func(uid uint32) error {
		if uid == 1000 {
			return nil
		}
		return fmt.Errorf("not yours: %w", syscall.EACCES)
	}
	s = NewServer(authorizingSource{src}, nil)
	if got := setLimit(t, s, 1000); got != 0 || src.done != 2 {
		t.Fatalf("uid 1000 allowed by the source: %v", got)
	}
	if got := setLimit(t, s, 1001); got != syscall.EACCES || src.done != 2 {
		t.Fatalf("uid 1001 refused by the source: %v", got)
	}
}

// TestMonitorSlotsPerUser (attack 4, control socket): one user cannot
// hold every connection and subscription; root still gets in.
func TestMonitorSlotsPerUser(t *testing.T) {
	l := quota.New(map[quota.Kind]quota.Limit{
		quota.Conns: {PerUID: 8, Total: 64, Reserve: 8},
		quota.Subs:  {PerUID: 4, Total: 64, Reserve: 8},
	})
	s := NewServer(fuzzSource{}, nil, WithQuota(l))
	// subscriptions of one ordinary user
	var conns []*conn
	for i := range 5 {
		c := &conn{s: s, uid: 1000, known: true, done: make(chan struct{}), overrun: make(chan struct{})}
		err := c.join(MonitorGroup)
		if i < 4 && err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
		if i == 4 {
			var werr *wireError
			if !errors.As(err, &werr) || werr.errno != syscall.EBUSY {
				t.Fatalf("fifth subscription of uid 1000: %v, want EBUSY", err)
			}
		}
		conns = append(conns, c)
	}
	root := &conn{s: s, uid: 0, known: true, done: make(chan struct{}), overrun: make(chan struct{})}
	if err := root.join(MonitorGroup); err != nil {
		t.Fatalf("root's subscription: %v", err)
	}
	for _, c := range append(conns, root) {
		c.leave(MonitorGroup)
		close(c.done)
		c.pumps.Wait()
	}
	if u := l.Usage(); len(u) != 0 {
		t.Fatalf("left after every leave: %+v", u)
	}

	// connections over a real socket: the server counts them by uid
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l2 := quota.New(map[quota.Kind]quota.Limit{quota.Conns: {PerUID: 2, Total: 64}}, uint32(os.Getuid())) // privileged: no per-uid cap
	s2 := NewServer(fuzzSource{}, nil, WithQuota(l2))
	go s2.Serve(t.Context(), ln)
	for i := range 12 {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = i
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u := l2.Usage()
		if len(u) == 1 && u[0].Used == 12 && u[0].UID == uint32(os.Getuid()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage %+v, want 12 of this uid's", u)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
