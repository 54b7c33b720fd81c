package xdp

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/aitherion/dpu/noc/port/xdp/bpf"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

func TestUnavailable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("bpf: load program: %w", unix.EPERM), true},
		{fmt.Errorf("xdp: open AF_XDP socket: %w", unix.EAFNOSUPPORT), true},
		{fmt.Errorf("xdp: bind: %w", unix.EOPNOTSUPP), true},
		{fmt.Errorf("xdp: setsockopt XDP_UMEM_REG: %w", unix.ENOBUFS), true},
		{fmt.Errorf("bpf: %w", errnoENOTSUPP), true},
		{fmt.Errorf("bpf: %w", ebpf.ErrNotSupported), true},
		{fmt.Errorf("x: %w", bpf.ErrForeignProgram), true},
		{fmt.Errorf("xdp: device %q: %w", "p9", unix.ENODEV), false},
		{fmt.Errorf("xdp: bind: %w", unix.EBUSY), false},
		{errors.New("xdp: ring size 3 is not a power of two"), false},
		{os.ErrNotExist, false},
		{nil, false},
	}
	for _, c := range cases {
		reason, ok := Unavailable(c.err)
		if ok != c.want || (ok && reason == "") {
			t.Errorf("Unavailable(%v) = %q, %v; want %v", c.err, reason, ok, c.want)
		}
	}
}

func TestKindString(t *testing.T) {
	if KindXDP.String() != "xdp" || KindAFPacket.String() != "afpacket" || Kind(9).String() != "kind(9)" {
		t.Fatal("Kind.String")
	}
}
