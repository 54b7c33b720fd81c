package main

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/ctl/ctltest"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/noc"
)

// A socket of the wrong kind is named for what it is, with the option
// that wants it.
func TestWrongSocketKind(t *testing.T) {
	_, ctlSock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	_, hostSock, _ := memHosts(t)

	out, _, err := dpuctl(t, "-s", hostSock, "route", "show")
	if err == nil || !strings.Contains(err.Error(), "is a dpu0 host interface socket; dpuctl -s wants the control socket ctl.sock") || out != "" {
		t.Errorf("-s at dpu0.sock: %v, stdout %q", err, out)
	}
	if !errors.Is(err, ctl.ErrProtocol) {
		t.Errorf("-s at dpu0.sock: %v does not wrap ctl.ErrProtocol", err)
	}
	out, _, err = dpuctl(t, "-d", ctlSock, "mem", "read", "gva:00000000000000010000000000001000")
	if err == nil || !strings.Contains(err.Error(), "is a control socket; dpuctl -d wants the host interface socket dpu0.sock") || out != "" {
		t.Errorf("-d at ctl.sock: %v, stdout %q", err, out)
	}
	if strings.Contains(err.Error(), "{") {
		t.Errorf("-d at ctl.sock dumps a structure: %v", err)
	}
}

// The agent's refusals are said in the command's words, once.
func TestMemErrorsSayWhatHappened(t *testing.T) {
	g := "gva:00000000000000000000000000000000"
	cases := []struct {
		verb string
		ce   *client.Error
		want string
	}{
		{"read", &client.Error{Op: wire.OpLoad, Errno: syscall.EHOSTDOWN,
			Text: "load " + g + ": ref " + g + ": host is down: owner unreachable until the request's bound"},
			"mem read " + g + ": no node answered for this page: it is not allocated, or the node that holds it is unreachable (host is down: owner unreachable until the request's bound)"},
		{"free", &client.Error{Op: wire.OpFree, Errno: syscall.ENOENT,
			Text: "stat " + g + ": stat " + g + ": no such file or directory"},
			"mem free " + g + ": no allocation starts at this address (free takes the GVA alloc printed) (no such file or directory)"},
	}
	for _, tc := range cases {
		err := explainMem(memArgs{verb: tc.verb, pos: []string{g}}, tc.ce)
		if err.Error() != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.verb, err, tc.want)
		}
		if !errors.Is(err, tc.ce.Errno) {
			t.Errorf("%s: %v lost its errno", tc.verb, err)
		}
	}
	// Through a host socket: an address nothing was allocated at.
	_, h1, _ := memHosts(t)
	_, _, err := dpuctlIn(t, "", "-d", h1, "mem", "free", "gva:00000000000000010000000000005000")
	if err == nil || !strings.HasPrefix(err.Error(), "mem free gva:00000000000000010000000000005000: ") || strings.Count(err.Error(), "gva:") != 1 {
		t.Errorf("free of nothing: %v", err)
	}
}

// mem help states the agent's real default pin bound.
func TestMemHelpPinBound(t *testing.T) {
	out, _, err := dpuctl(t, "mem", "help")
	if err != nil {
		t.Fatal(err)
	}
	if want := agent.DefaultConfig().PinBound.String() + " by default"; !strings.Contains(out, want) {
		t.Errorf("mem help does not say %q:\n%s", want, out)
	}
}

// A link whose neighbour is not known shows no made-up peer number.
func TestLinkWithoutPeer(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Snapshot{Links: []ctl.Link{{Index: 0, Name: "p0", Kind: "udp", MTU: 1472, Peer: noc.BroadcastNode}}}))
	out, _, err := dpuctl(t, "-s", sock, "link", "show")
	if err != nil || !strings.Contains(out, "peer none") || strings.Contains(out, "4294967295") {
		t.Errorf("%v %q", err, out)
	}
}

// mem cas exits 1 when it did not swap.
func TestMemCASStatus(t *testing.T) {
	_, h1, _ := memHosts(t)
	g, _, err := dpuctlIn(t, "", "-d", h1, "mem", "alloc")
	if err != nil {
		t.Fatal(err)
	}
	g = strings.TrimSpace(g)
	if _, _, err := dpuctlIn(t, "", "-d", h1, "mem", "cas", g, "0", "5"); err != nil {
		t.Fatalf("cas that swaps: %v", err)
	}
	out, _, err := dpuctlIn(t, "", "-d", h1, "mem", "cas", g, "0", "6")
	var st exitStatus
	if !errors.As(err, &st) || st.code != 1 || out != "old 5 not swapped\n" {
		t.Fatalf("cas that does not swap: %v %q", err, out)
	}
}

// TestDialHints: a socket the caller may not use names socket-group; a
// missing one asks whether the agent runs.
func TestDialHints(t *testing.T) {
	denied := &net.OpError{Op: "dial", Net: "unixpacket", Err: &os.SyscallError{Syscall: "connect", Err: syscall.EACCES}}
	if got := dialHint(denied, "-s names its control socket").Error(); !strings.Contains(got, "socket-group") || !strings.Contains(got, "permission denied") {
		t.Errorf("permission denied: %q", got)
	}
	missing := &net.OpError{Op: "dial", Net: "unixpacket", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ENOENT}}
	if got := dialHint(missing, "-d names its host socket").Error(); !strings.Contains(got, "is dpu-agent running? -d names its host socket") {
		t.Errorf("no such socket: %q", got)
	}
}
