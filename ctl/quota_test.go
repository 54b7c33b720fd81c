package ctl

import (
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"
)

// doAs runs cmd with attrs as uid and returns the errno of its answer.
func doAs(t *testing.T, s *Server, uid uint32, cmd Cmd, o Object) syscall.Errno {
	t.Helper()
	r := &as{uid: uid}
	ae := netlink.NewAttributeEncoder()
	o.EncodeAttrs(ae)
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := encodeMessage(netlink.Header{Flags: flagRequest | flagAck, Sequence: 9, PID: 1}, cmd, attrs)
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

// TestQuotaSetIsRootOnly: no ordinary user sets a quota, not even where
// the source lets owners run its other commands; root does.
func TestQuotaSetIsRootOnly(t *testing.T) {
	src := &commandSource{allow: func(uint32) error { return nil }}
	s := NewServer(authorizingSource{src}, nil)
	q := &Quota{UID: 1000, PagesLimit: 1 << 20}
	if got := doAs(t, s, 1000, CmdQuotaSet, q); got != syscall.EPERM || src.done != 0 {
		t.Fatalf("uid 1000 raises its own quota: %v (done %d), want EPERM", got, src.done)
	}
	if got := doAs(t, s, 1001, CmdQuotaSet, q); got != syscall.EPERM || src.done != 0 {
		t.Fatalf("uid 1001 sets uid 1000's quota: %v, want EPERM", got)
	}
	if got := doAs(t, s, 0, CmdQuotaSet, q); got != 0 || src.done != 1 {
		t.Fatalf("root sets a quota: %v (done %d)", got, src.done)
	}
}

func TestQuotaRoundTrip(t *testing.T) {
	for _, q := range []Quota{
		{UID: 7, PagesLimit: 5, BytesLimit: 1 << 30, PagesUsed: 3, BytesUsed: 12288},
		{Default: true, PagesLimit: 100, BytesLimit: 409600},
		{UID: 0, Privileged: true, PagesUsed: 9},
	} {
		ae := netlink.NewAttributeEncoder()
		q.EncodeAttrs(ae)
		b, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeQuota(b)
		if err != nil || got != q {
			t.Fatalf("%+v: decoded %+v, %v", q, got, err)
		}
	}
	for _, bad := range []Quota{{Default: true}} {
		ae := netlink.NewAttributeEncoder()
		ae.Uint32(attrQuotaUID, bad.UID)
		ae.Uint32(attrQuotaFlags, quotaDefault)
		b, _ := ae.Encode()
		if _, err := DecodeQuota(b); err == nil {
			t.Fatal("a quota with a uid and the default flag decoded")
		}
	}
	if _, err := DecodeQuota(nil); err == nil {
		t.Fatal("an empty quota decoded")
	}
}

// FuzzQuota: the quota decoder (a request from any client of the control
// socket) never panics, and what it accepts encodes to attributes that
// decode to the same quota.
func FuzzQuota(f *testing.F) {
	ae := netlink.NewAttributeEncoder()
	(&Quota{UID: 7, PagesLimit: 5}).EncodeAttrs(ae)
	b, _ := ae.Encode()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeQuota(b)
		if err != nil {
			return
		}
		ae := netlink.NewAttributeEncoder()
		q.EncodeAttrs(ae)
		out, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeQuota(out)
		if err != nil || again != q {
			t.Fatalf("%+v re-decoded as %+v, %v", q, again, err)
		}
	})
}

// TestCommandNumbersAreDistinct: no two commands share a number (a
// command defined in a file of its own included).
func TestCommandNumbersAreDistinct(t *testing.T) {
	seen := map[Cmd]string{}
	for _, c := range []Cmd{CmdRouteGet, CmdLinkGet, CmdNeighGet, CmdStatsGet, CmdTopoGet, CmdSubscribe, CmdUnsubscribe,
		CmdEvent, CmdPathGet, CmdOwnerGet, CmdGPUGet, CmdGPUSetLimit, CmdGPULimitGet, CmdCapture, CmdQuotaGet, CmdQuotaSet} {
		if other, ok := seen[c]; ok {
			t.Fatalf("command %d is both %s and %s", c, other, c)
		}
		seen[c] = c.String()
	}
}
