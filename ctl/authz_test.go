package ctl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// as is a replier with a given peer uid (and groups).
type as struct {
	recorder
	uid    uint32
	groups []uint32
}

func (a *as) peer() (uint32, bool)    { return a.uid, true }
func (a *as) inGroup(gid uint32) bool { return slices.Contains(a.groups, gid) }

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

// TestCaptureIsPrivileged: root (and the agent's user) may capture, in
// plaintext too; a member of the capture group may capture only as the
// datagrams cross the wire; anyone else, and anyone at all without a
// capture group, gets EPERM before the capture starts.
func TestCaptureIsPrivileged(t *testing.T) {
	const group = 4545
	got := make(chan CaptureRequest, 16)
	src := captureOnly{got: got}
	for _, tc := range []struct {
		gid       int
		uid       uint32
		groups    []uint32
		plaintext bool
		want      syscall.Errno
	}{
		{-1, 0, nil, true, 0},
		{-1, 0, nil, false, 0},
		{-1, 1000, []uint32{group}, false, syscall.EPERM}, // no capture group configured
		{group, 1000, nil, false, syscall.EPERM},
		{group, 1000, []uint32{group}, false, 0},
		{group, 1000, []uint32{group}, true, syscall.EPERM},
		{group, 1000, []uint32{7, group + 1}, false, syscall.EPERM},
	} {
		s := NewServer(src, nil, WithCaptureGroup(tc.gid))
		r := &as{uid: tc.uid, groups: tc.groups}
		// a client's Redact is not on the wire: root's stays unredacted
		req := CaptureRequest{Port: "p0", Count: 1, Timeout: time.Second, Plaintext: tc.plaintext, Redact: tc.uid == 0}
		if err := s.handle(request(CmdCapture, flagRequest|flagDump, 3, &req), r); err != nil {
			t.Fatal(err)
		}
		errno := lastErrno(t, r.sent)
		if errno != tc.want {
			t.Errorf("%+v: errno %v, want %v", tc, errno, tc.want)
		}
		select {
		case q := <-got:
			if tc.want != 0 {
				t.Errorf("%+v: a refused capture reached the source", tc)
			}
			if q.Plaintext != tc.plaintext {
				t.Errorf("%+v: plaintext %v reached the source", tc, q.Plaintext)
			}
			// the capture group's captures are redacted, root's are not
			if q.Redact != (tc.uid != 0) {
				t.Errorf("%+v: redact %v reached the source", tc, q.Redact)
			}
		default:
			if tc.want == 0 {
				t.Errorf("%+v: an allowed capture did not reach the source", tc)
			}
		}
	}
}

// captureOnly is a Source that serves captures of nothing.
type captureOnly struct {
	Source
	got chan CaptureRequest
}

func (c captureOnly) Capture(req CaptureRequest) ([]CapturedFrame, error) {
	c.got <- req
	return nil, nil
}

// lastErrno is the errno of the last message a handler sent: an
// NLMSG_ERROR's, or 0 for anything else (a dump's NLMSG_DONE).
func lastErrno(t *testing.T, sent [][]byte) syscall.Errno {
	t.Helper()
	if len(sent) == 0 {
		t.Fatal("no reply")
	}
	m, werr := decodeMessage(sent[len(sent)-1])
	if werr != nil {
		t.Fatal(werr)
	}
	if m.hdr.Type != netlink.Error {
		return 0
	}
	errno, _, err := decodeErrorPayload(m.hdr, m.payload)
	if err != nil {
		t.Fatal(err)
	}
	return errno
}
