package agent

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/udp"
)

// PortUDPHeld is a port kind for tests: ARGS as for udp (LOCAL-ADDR
// REMOTE-ADDR). When LOCAL-ADDR is an address HoldUDP or HoldUDPRun bound,
// the first agent to open the port takes that socket over, so no other
// program on the machine can take the port between the test choosing it
// and the agent using it. Later opens (an agent restarted on the same
// address) bind the address again, as a restarted dpu-agent does: its
// peers see the port close while it is down. The port reports itself as
// udp.
const PortUDPHeld = "udp-held"

// heldUDP maps a local address HoldUDP bound to the descriptor of the
// socket it holds (outside the runtime's poller: nothing reads it) until
// an agent takes it.
var heldUDP sync.Map // string -> int

func init() {
	RegisterPort(PortUDPHeld, func(spec PortSpec, cfg *Config, log *slog.Logger) (noc.Port, string, error) {
		return openUDP(spec, cfg, log, openHeldUDPChannel)
	})
}

// openHeldUDPChannel opens one channel of a udp-held port: the socket
// HoldUDP holds for local, taken over, else local bound again.
func openHeldUDPChannel(local, remote string) (noc.Port, error) {
	v, ok := heldUDP.LoadAndDelete(local)
	if !ok {
		return openUDPChannel(local, remote)
	}
	f := os.NewFile(uintptr(v.(int)), local) // the agent's now
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("udp-held %s: %w", local, err)
	}
	ra, err := netip.ParseAddrPort(remote)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("udp-held remote %q: %w", remote, err)
	}
	p, err := udp.New(pc.(*net.UDPConn), ra, udpMTU(remote))
	if err != nil {
		pc.Close()
		return nil, err
	}
	return p, nil
}

// HoldUDP binds n loopback UDP sockets on ports the kernel picks and holds
// them until the test ends; it returns their addresses, for PortUDPHeld.
func HoldUDP(tb testing.TB, n int) []string {
	tb.Helper()
	out := make([]string, n)
	for i := range out {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = hold(tb, c)
	}
	return out
}

// HoldUDPRun binds n loopback UDP sockets on consecutive ports (a
// multi-channel link's channels are LOCAL-ADDR, LOCAL-ADDR+1, …) and holds
// them until the test ends; it returns the first port.
func HoldUDPRun(tb testing.TB, n int) int {
	tb.Helper()
	for range 200 {
		base := 20000 + rand.IntN(40000)
		var got []*net.UDPConn
		for i := range n {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: base + i})
			if err != nil {
				break
			}
			got = append(got, c)
		}
		if len(got) == n {
			for _, c := range got {
				hold(tb, c)
			}
			return base
		}
		for _, c := range got {
			c.Close()
		}
	}
	tb.Fatalf("no run of %d free UDP ports on loopback", n)
	return 0
}

// hold keeps c's socket as a bare descriptor until the test ends and
// closes c.
func hold(tb testing.TB, c *net.UDPConn) string {
	tb.Helper()
	addr := c.LocalAddr().String()
	raw, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(d uintptr) { fd, derr = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		tb.Fatal(err)
	}
	c.Close() // the duplicate keeps the socket, out of the runtime's poller
	if derr != nil {
		tb.Fatal(derr)
	}
	heldUDP.Store(addr, fd)
	tb.Cleanup(func() {
		if _, ok := heldUDP.LoadAndDelete(addr); ok { // no agent took it
			unix.Close(fd)
		}
	})
	return addr
}

// CloseChannel closes channel ch of port p's multi-channel link, as a
// channel whose socket or NIC queue dies does (tests only).
func (a *Agent) CloseChannel(p, ch int) error {
	sp, ok := striped(a.ports[p].port)
	if !ok {
		return fmt.Errorf("port %d has no channels", p)
	}
	return sp.Channels()[ch].Close()
}
