package topo

import (
	"errors"
	"fmt"
	"slices"

	"github.com/aitherion/dpu/noc"
)

// Errors callers branch on. Errors returned by this package wrap one of them.
var (
	// ErrImpossible: no graph of the asked kind exists for these parameters
	// (too few ports, odd degree sum, a node count the kind cannot hold...).
	ErrImpossible = errors.New("topo: impossible parameters")
	// ErrUnknownKind: Generate was asked for a kind Kinds does not list.
	ErrUnknownKind = errors.New("topo: unknown topology kind")
	// ErrWiring: a link cannot be made or removed (self-loop, parallel
	// link, node or port out of range, port already wired).
	ErrWiring = errors.New("topo: invalid wiring")
)

// Peer is the far end of a wired port: the node and its port.
type Peer struct {
	Node noc.NodeID
	Port noc.PortID
}

// unwired marks a port slot that has no link (after Disconnect).
var unwired = Peer{Node: noc.BroadcastNode, Port: noc.NoPort}

// Link is one point-to-point cable: port PortA of node A to port PortB of
// node B. In a Graph's Links, A < B.
type Link struct {
	A     noc.NodeID `json:"a"`
	PortA noc.PortID `json:"port_a"`
	B     noc.NodeID `json:"b"`
	PortB noc.PortID `json:"port_b"`
}

func (l Link) String() string {
	return fmt.Sprintf("%v.%d-%v.%d", l.A, l.PortA, l.B, l.PortB)
}

// Graph is the wiring of a fabric: N nodes numbered 0..N-1 and the links
// between their ports. A node's ports are numbered 0, 1, ... in the order
// its links were made; generated graphs use ports 0..degree-1 densely.
// Disconnect leaves a gap (an unwired port) so that the other ports keep
// their numbers, as a pulled cable does.
//
// Parallel links and self-loops are refused. A Graph is not safe for
// concurrent mutation.
type Graph struct {
	kind  string
	ports [][]Peer // ports[n][p]: far end of port p of node n, or unwired
	links int
}

// New returns a graph of n nodes and no links.
func New(n int) *Graph {
	if n < 0 {
		n = 0
	}
	return &Graph{kind: "custom", ports: make([][]Peer, n)}
}

// Kind is the generator that made g ("custom" for hand-made graphs).
func (g *Graph) Kind() string { return g.kind }

// N is the number of nodes.
func (g *Graph) N() int { return len(g.ports) }

// NumLinks is the number of links.
func (g *Graph) NumLinks() int { return g.links }

// Ports is the number of port slots of node n (wired or not).
func (g *Graph) Ports(n noc.NodeID) int {
	if int(n) >= len(g.ports) {
		return 0
	}
	return len(g.ports[n])
}

// Peer returns the far end of port p of node n; ok is false when the port
// is not wired.
func (g *Graph) Peer(n noc.NodeID, p noc.PortID) (Peer, bool) {
	if int(n) >= len(g.ports) || int(p) >= len(g.ports[n]) {
		return Peer{}, false
	}
	pe := g.ports[n][p]
	return pe, pe != unwired
}

// Degree is the number of wired ports of node n.
func (g *Graph) Degree(n noc.NodeID) int {
	d := 0
	if int(n) < len(g.ports) {
		for _, pe := range g.ports[n] {
			if pe != unwired {
				d++
			}
		}
	}
	return d
}

// MaxDegree is the largest Degree of any node.
func (g *Graph) MaxDegree() int {
	m := 0
	for n := range g.ports {
		m = max(m, g.Degree(noc.NodeID(n)))
	}
	return m
}

// Neighbours returns the nodes wired to n, in port order.
func (g *Graph) Neighbours(n noc.NodeID) []noc.NodeID {
	var out []noc.NodeID
	if int(n) < len(g.ports) {
		for _, pe := range g.ports[n] {
			if pe != unwired {
				out = append(out, pe.Node)
			}
		}
	}
	return out
}

// Links returns every link, with A < B, sorted by A then PortA.
func (g *Graph) Links() []Link {
	out := make([]Link, 0, g.links)
	for a, ps := range g.ports {
		for pa, pe := range ps {
			if pe != unwired && noc.NodeID(a) < pe.Node {
				out = append(out, Link{A: noc.NodeID(a), PortA: noc.PortID(pa), B: pe.Node, PortB: pe.Port})
			}
		}
	}
	return out
}

// Adjacent reports whether a and b are linked.
func (g *Graph) Adjacent(a, b noc.NodeID) bool {
	if int(a) >= len(g.ports) {
		return false
	}
	for _, pe := range g.ports[a] {
		if pe.Node == b && pe != unwired {
			return true
		}
	}
	return false
}

// Connect links a and b through the lowest free port of each (an unwired
// gap first, else a new port) and returns the link.
func (g *Graph) Connect(a, b noc.NodeID) (Link, error) {
	switch {
	case int(a) >= len(g.ports) || int(b) >= len(g.ports):
		return Link{}, fmt.Errorf("connect %v-%v in %d nodes: %w", a, b, len(g.ports), ErrWiring)
	case a == b:
		return Link{}, fmt.Errorf("connect %v to itself: %w", a, ErrWiring)
	case g.Adjacent(a, b):
		return Link{}, fmt.Errorf("connect %v-%v twice: %w", a, b, ErrWiring)
	}
	pa, pb := g.freePort(a), g.freePort(b)
	g.ports[a][pa] = Peer{Node: b, Port: pb}
	g.ports[b][pb] = Peer{Node: a, Port: pa}
	g.links++
	if a > b {
		a, pa, b, pb = b, pb, a, pa
	}
	return Link{A: a, PortA: pa, B: b, PortB: pb}, nil
}

func (g *Graph) freePort(n noc.NodeID) noc.PortID {
	for p, pe := range g.ports[n] {
		if pe == unwired {
			return noc.PortID(p)
		}
	}
	g.ports[n] = append(g.ports[n], unwired)
	return noc.PortID(len(g.ports[n]) - 1)
}

// Disconnect removes the link on port p of node n; both ends become unwired
// gaps and every other port keeps its number.
func (g *Graph) Disconnect(n noc.NodeID, p noc.PortID) (Link, error) {
	pe, ok := g.Peer(n, p)
	if !ok {
		return Link{}, fmt.Errorf("disconnect %v port %d: not wired: %w", n, p, ErrWiring)
	}
	g.ports[n][p] = unwired
	g.ports[pe.Node][pe.Port] = unwired
	g.links--
	l := Link{A: n, PortA: p, B: pe.Node, PortB: pe.Port}
	if l.A > l.B {
		l = Link{A: l.B, PortA: l.PortB, B: l.A, PortB: l.PortA}
	}
	return l, nil
}

// Clone returns a deep copy of g.
func (g *Graph) Clone() *Graph {
	c := &Graph{kind: g.kind, links: g.links, ports: make([][]Peer, len(g.ports))}
	for n, ps := range g.ports {
		c.ports[n] = slices.Clone(ps)
	}
	return c
}

// edges returns g's links as node index pairs (a < b), in Links order.
func (g *Graph) edges() [][2]int32 {
	out := make([][2]int32, 0, g.links)
	for _, l := range g.Links() {
		out = append(out, [2]int32{int32(l.A), int32(l.B)})
	}
	return out
}

// fromEdges builds a graph of kind with the given edges, connected in order
// (so each node's ports follow the order its edges appear).
func fromEdges(kind string, n int, edges [][2]int32) (*Graph, error) {
	g := New(n)
	g.kind = kind
	for _, e := range edges {
		if _, err := g.Connect(noc.NodeID(e[0]), noc.NodeID(e[1])); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
	}
	return g, nil
}
