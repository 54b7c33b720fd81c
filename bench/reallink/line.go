package reallink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/aitherion/dpu/fabric/veth"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Ports of a node of a line.
const (
	West = 0 // toward node i-1: device p0
	East = 1 // toward node i+1: device p1
)

// Line brings up n namespaces in a line: node i's East port wired to node
// i+1's West port (veth.Up; release with veth.Down(dir)).
func Line(dir string, n int) (*veth.Fabric, error) {
	if n < 2 {
		return nil, fmt.Errorf("reallink: a line needs 2 nodes or more, not %d", n)
	}
	var edges []veth.Edge
	for i := range n - 1 {
		edges = append(edges, veth.Edge{A: i, PortA: East, B: i + 1, PortB: West})
	}
	return veth.Up(veth.Spec{Dir: dir, Nodes: n, Edges: edges})
}

// Device is the name of a line port's device.
func Device(port int) string { return veth.PortName(port) }

// IPv4 is the address RouteIPv4 gives node i on port (West or East): the
// link between nodes k and k+1 is 10.77.k.0/24, node k is .1 on it and
// node k+1 is .2.
func IPv4(i, port int) netip.Addr {
	if port == West {
		return netip.AddrFrom4([4]byte{10, 77, byte(i - 1), 2})
	}
	return netip.AddrFrom4([4]byte{10, 77, byte(i), 1})
}

// RouteIPv4 makes a line of f.Nodes nodes (built by Line) an IPv4 network:
// addresses on every port, routes to every link that is not adjacent, and
// IPv4 forwarding on in every middle node. It changes nothing outside the
// fabric's namespaces; veth.Down removes it with them.
func RouteIPv4(f *veth.Fabric) error {
	n := f.Nodes
	if n > 255 {
		return fmt.Errorf("reallink: %d nodes: RouteIPv4 numbers at most 255", n)
	}
	for i := range n {
		if err := routeNode(f, i); err != nil {
			return err
		}
		if i == 0 || i == n-1 {
			continue
		}
		if err := f.Do(i, func() error { return writeSysctl("net/ipv4/ip_forward", "1") }); err != nil {
			return err
		}
	}
	return nil
}

func routeNode(f *veth.Fabric, i int) error {
	nsh, err := netns.GetFromName(f.Namespace(i))
	if err != nil {
		return fmt.Errorf("reallink: namespace of node %d: %w", i, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("reallink: netlink in node %d: %w", i, err)
	}
	defer h.Close()
	dev := map[int]netlink.Link{}
	for _, port := range []int{West, East} {
		if (port == West && i == 0) || (port == East && i == f.Nodes-1) {
			continue
		}
		l, err := h.LinkByName(Device(port))
		if err != nil {
			return fmt.Errorf("reallink: node %d %s: %w", i, Device(port), err)
		}
		dev[port] = l
		a := IPv4(i, port)
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}
		if err := h.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("reallink: node %d address %v: %w", i, a, err)
		}
	}
	// Links k (between k and k+1) that are not adjacent to node i.
	for k := range f.Nodes - 1 {
		var gw netip.Addr
		var via netlink.Link
		switch {
		case k > i:
			gw, via = IPv4(i+1, West), dev[East]
		case k < i-1:
			gw, via = IPv4(i-1, East), dev[West]
		default:
			continue
		}
		dst := &net.IPNet{IP: net.IPv4(10, 77, byte(k), 0).To4(), Mask: net.CIDRMask(24, 32)}
		r := &netlink.Route{LinkIndex: via.Attrs().Index, Dst: dst, Gw: gw.AsSlice()}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("reallink: node %d route to %v via %v: %w", i, dst, gw, err)
		}
	}
	return nil
}

// writeSysctl sets a sysctl of the calling thread's network namespace.
func writeSysctl(name, value string) error {
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		return fmt.Errorf("reallink: sysctl %s: %w", name, err)
	}
	return nil
}

// txPackets is the transmit counter of device dev of node i.
func txPackets(f *veth.Fabric, i int, dev string) (uint64, error) {
	nsh, err := netns.GetFromName(f.Namespace(i))
	if err != nil {
		return 0, fmt.Errorf("reallink: namespace of node %d: %w", i, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return 0, fmt.Errorf("reallink: netlink in node %d: %w", i, err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("reallink: node %d %s: %w", i, dev, err)
	}
	st := l.Attrs().Statistics
	if st == nil {
		return 0, errors.New("reallink: device has no statistics")
	}
	return st.TxPackets, nil
}
