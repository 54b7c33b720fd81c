package numa

import (
	"fmt"
	"strconv"
	"strings"
)

// Mode is how the agent picks its node.
type Mode uint8

const (
	// Auto binds to the node of the agent's NICs, where the host has more
	// than one node and the NICs name one.
	Auto Mode = iota
	// Off never binds.
	Off
	// Fixed binds to the node Setting.Node names.
	Fixed
)

// Setting is the agent's numa key: auto (the default), off, or a node id.
type Setting struct {
	Mode Mode
	Node int // with Fixed
}

// ParseSetting decodes auto, off or a node id.
func ParseSetting(s string) (Setting, error) {
	switch s = strings.TrimSpace(s); s {
	case "auto", "":
		return Setting{Mode: Auto}, nil
	case "off":
		return Setting{Mode: Off}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return Setting{}, fmt.Errorf("numa %q: want auto, off or a node id", s)
	}
	return Setting{Mode: Fixed, Node: n}, nil
}

func (s Setting) String() string {
	switch s.Mode {
	case Off:
		return "off"
	case Fixed:
		return strconv.Itoa(s.Node)
	}
	return "auto"
}

// Binding is where the agent runs: Node and its CPUs, or Node NoNode and
// Reason, why it is not bound.
type Binding struct {
	Node   int
	CPUs   CPUSet
	Reason string
}

// Bound reports whether the binding names a node.
func (b Binding) Bound() bool { return b.Node != NoNode }

// Choose decides the binding of setting s on topology t for an agent whose
// ports use the NICs nics (device names; a port without a device is
// left out). Auto takes the node most of the NICs sit on (the lowest such
// node on a tie); a host of one node, NICs without a node, or Off bind
// nothing. Fixed must name a node of t with CPUs: anything else is an
// error, for the configuration is wrong.
func Choose(s Setting, t Topology, nics []string) (Binding, error) {
	none := func(why string) (Binding, error) { return Binding{Node: NoNode, Reason: why}, nil }
	switch s.Mode {
	case Off:
		return none("numa = off")
	case Fixed:
		n, ok := t.Node(s.Node)
		if !ok {
			return Binding{}, fmt.Errorf("numa = %d: the host has no node %d (nodes %s)", s.Node, s.Node, nodeList(t))
		}
		if len(n.CPUs) == 0 {
			return Binding{}, fmt.Errorf("numa = %d: node %d has no CPU", s.Node, s.Node)
		}
		return Binding{Node: n.ID, CPUs: n.CPUs}, nil
	}
	if len(t.Nodes) < 2 {
		return none("one NUMA node: nothing to bind")
	}
	count := map[int]int{}
	for _, dev := range nics {
		if n := t.NICNode(dev); n != NoNode {
			count[n]++
		}
	}
	best, most := NoNode, 0
	for _, nd := range t.Nodes {
		if c := count[nd.ID]; c > most && len(nd.CPUs) > 0 {
			best, most = nd.ID, c
		}
	}
	if best == NoNode {
		if len(nics) == 0 {
			return none("no port on a network device: no NIC node to bind to")
		}
		return none(fmt.Sprintf("no NUMA node known for NICs %s", strings.Join(nics, ",")))
	}
	n, _ := t.Node(best)
	return Binding{Node: best, CPUs: n.CPUs}, nil
}

func nodeList(t Topology) string {
	ids := make([]string, len(t.Nodes))
	for i, n := range t.Nodes {
		ids[i] = strconv.Itoa(n.ID)
	}
	return strings.Join(ids, ",")
}
