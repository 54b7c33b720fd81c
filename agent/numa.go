package agent

import (
	"fmt"
	"io/fs"
	"net"
	"net/netip"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/numa"
)

// numaPlace is where the agent runs on its host's NUMA layout: the
// binding chosen at start (numa = auto|off|N) and, when bound, the arena
// its page memory lives in.
type numaPlace struct {
	sys   fs.FS // the sysfs read (numa.Host unless WithSysfs)
	nics  []string
	bind  numa.Binding
	arena *numa.Arena // nil unless bound
}

// WithSysfs makes the agent read its NUMA layout from sys (a file system
// rooted where /sys is) instead of the host's.
func WithSysfs(sys fs.FS) Option { return func(a *Agent) { a.numa.sys = sys } }

// chooseNUMA discovers the host's layout and decides the binding. A layout
// that cannot be read binds nothing under auto and is an error under a
// fixed node.
func (a *Agent) chooseNUMA() error {
	if a.numa.sys == nil {
		a.numa.sys = numa.Host()
	}
	a.numa.nics = portDevices(a.cfg.Ports)
	s := a.cfg.NUMA
	if s.Mode == numa.Off {
		a.numa.bind = numa.Binding{Node: numa.NoNode, Reason: "numa = off"}
		return nil
	}
	top, err := numa.Discover(a.numa.sys)
	if err != nil {
		if s.Mode == numa.Fixed {
			return fmt.Errorf("agent: numa = %d: %w", s.Node, err)
		}
		a.numa.bind = numa.Binding{Node: numa.NoNode, Reason: "NUMA layout unreadable: " + err.Error()}
		return nil
	}
	b, err := numa.Choose(s, top, a.numa.nics)
	if err != nil {
		return fmt.Errorf("agent: %w: %w", ErrConfig, err)
	}
	a.numa.bind = b
	return nil
}

// newPageStore is the engine's memory tier: on the Go heap, or, when the
// agent is bound to a node, in an arena whose pages the kernel places on
// that node; with disk tiers configured, the tiered store over it
// (tier.go).
func (a *Agent) newPageStore(pages int) (coherence.PageStore, error) {
	if !a.numa.bind.Bound() {
		if len(a.cfg.Tiers) > 0 {
			return a.newTieredStore(pages, nil)
		}
		return coherence.NewMemStore(pages), nil
	}
	ar, err := numa.NewArena(pages*gva.PageSize, a.numa.bind.Node)
	if err != nil {
		return nil, fmt.Errorf("agent: page memory on NUMA node %d: %w", a.numa.bind.Node, err)
	}
	a.numa.arena = ar
	if len(a.cfg.Tiers) > 0 {
		return a.newTieredStore(pages, ar)
	}
	return coherence.NewMemStoreIn(ar.Bytes()), nil
}

// pinNUMA pins every thread of the agent to its node's CPUs (the run
// loop, the connection readers that step the core, and every thread the
// runtime starts later), and logs the binding either way.
func (a *Agent) pinNUMA() error {
	b := a.numa.bind
	if !b.Bound() {
		a.log.Info("numa: not bound", "numa", a.cfg.NUMA.String(), "reason", b.Reason, "nics", a.numa.nics)
		return nil
	}
	if err := numa.PinProcess(b.CPUs); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.log.Info("numa: bound", "numa", a.cfg.NUMA.String(), "node", b.Node, "address", ctl.NUMAAddress(uint32(a.cfg.Node), int32(b.Node)),
		"cpus", b.CPUs.String(), "page_memory", a.pageMemory(), "nics", a.numa.nics)
	return nil
}

// pageMemory is the bytes of page memory bound to the agent's node.
func (a *Agent) pageMemory() uint64 {
	if a.numa.arena == nil {
		return 0
	}
	return uint64(len(a.numa.arena.Bytes()))
}

// releaseNUMA unmaps the page arena once nothing steps the core.
func (a *Agent) releaseNUMA() {
	if a.numa.arena != nil {
		if err := a.numa.arena.Close(); err != nil {
			a.log.Warn("numa", "err", err)
		}
		a.numa.arena = nil
	}
}

// NUMA is the host's NUMA layout, read again (free memory is current), and
// the agent's binding, as the control socket shows them.
func (a *Agent) NUMA() ctl.NUMA {
	b := a.numa.bind
	out := ctl.NUMA{Server: uint32(a.cfg.Node), Setting: a.cfg.NUMA.String(), Bound: int32(b.Node), Reason: b.Reason,
		PageMemory: a.pageMemory(), Nodes: []ctl.NUMANode{}}
	if b.Bound() {
		out.Address = ctl.NUMAAddress(out.Server, out.Bound)
	}
	if cpus, err := numa.Affinity(); err == nil {
		out.CPUs = cpus.String()
	}
	sys := a.numa.sys
	if sys == nil {
		sys = numa.Host()
	}
	top, err := numa.Discover(sys)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	for _, n := range top.Nodes {
		nd := ctl.NUMANode{ID: uint32(n.ID), CPUs: n.CPUs.String(), MemTotal: n.MemTotal, MemFree: n.MemFree, NICs: []string{}}
		for _, nic := range top.NICs {
			if nic.Node == n.ID {
				nd.NICs = append(nd.NICs, nic.Name)
			}
		}
		out.Nodes = append(out.Nodes, nd)
	}
	for _, nic := range top.NICs {
		if _, ok := top.Node(nic.Node); !ok {
			out.OtherNICs = append(out.OtherNICs, nic.Name)
		}
	}
	return out
}

// portDevices are the network devices the agent's ports use: the device
// of an xdp or afpacket port, and the device holding a udp or rdma port's
// local address (an address no device holds, or arguments that are not
// one, are left out).
func portDevices(ports []PortSpec) []string {
	var devs []string
	seen := map[string]bool{}
	add := func(d string) {
		if d != "" && !seen[d] {
			seen[d] = true
			devs = append(devs, d)
		}
	}
	for _, p := range ports {
		switch p.Kind {
		case PortXDP, PortAFPacket:
			if len(p.Args) > 0 {
				add(p.Args[0])
			}
		case PortRDMA:
			if len(p.Args) > 1 {
				add(deviceOf(p.Args[1]))
			}
		default: // udp, and kinds registered later whose ARGS start with LOCAL-ADDR
			if len(p.Args) > 0 {
				add(deviceOf(p.Args[0]))
			}
		}
	}
	return devs
}

// deviceOf is the network device holding the address of hostport ("" when
// none does or it does not parse).
func deviceOf(hostport string) string {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return ""
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if pfx, err := netip.ParsePrefix(ad.String()); err == nil && pfx.Addr().Unmap() == ap.Addr().Unmap() {
				return ifc.Name
			}
		}
	}
	return ""
}
