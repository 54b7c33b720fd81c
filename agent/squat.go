package agent

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A link address that another process holds stops the agent from
// starting. Who holds it is worth saying: the holder may be a user
// squatting a dead node's address (SECURITY.md), which link ports in the
// privileged range (below net.ipv4.ip_unprivileged_port_start) or the
// node's own network namespace rule out.

// explainAddrInUse adds the holder's uid (from /proc/net/udp) and the
// remedy to an EADDRINUSE of a UDP bind to local.
func explainAddrInUse(err error, local string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	who := "another process"
	if ap, perr := netip.ParseAddrPort(local); perr == nil {
		if uid, ok := udpHolder("/proc/net/udp", ap); ok {
			who = fmt.Sprintf("a socket of uid %d", uid)
		}
	}
	return fmt.Errorf("%w: %s holds %s (an address the unprivileged can bind can be taken while the agent is down: "+
		"use link ports below net.ipv4.ip_unprivileged_port_start, or the node's own network namespace; see SECURITY.md)",
		err, who, local)
}

// udpHolder finds the uid of an IPv4 UDP socket bound to ap's port on
// ap's address or the wildcard, in a /proc/net/udp table.
func udpHolder(table string, ap netip.AddrPort) (uint32, bool) {
	if !ap.Addr().Is4() {
		return 0, false
	}
	f, err := os.Open(table)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	want := ap.Addr().As4()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		addr, port, ok := strings.Cut(fields[1], ":")
		if !ok || len(addr) != 8 {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil || uint16(p) != ap.Port() {
			continue
		}
		a, err := strconv.ParseUint(addr, 16, 32)
		if err != nil {
			continue
		}
		// the kernel prints the address as a host-order word of the
		// network-order bytes (the agent's hosts are little-endian)
		got := [4]byte{byte(a), byte(a >> 8), byte(a >> 16), byte(a >> 24)}
		if got != want && got != [4]byte{} {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		if err != nil {
			continue
		}
		return uint32(uid), true
	}
	return 0, false
}
