package route

import (
	"cmp"
	"slices"
	"time"
	"unsafe"

	"github.com/aitherion/dpu/noc"
)

// Stats counts what the routing state did. Counters only grow.
type Stats struct {
	HellosSent     uint64 `json:"hellos_sent"`
	HellosReceived uint64 `json:"hellos_received"`
	LSAsOriginated uint64 `json:"lsas_originated"`
	LSAsSent       uint64 `json:"lsas_sent"`
	LSAsReceived   uint64 `json:"lsas_received"`
	// LSAsInstalled counts received LSAs newer than the database's copy.
	LSAsInstalled uint64 `json:"lsas_installed"`
	// LSAsDuplicate counts copies of what the database already holds.
	LSAsDuplicate uint64 `json:"lsas_duplicate"`
	// LSAsConflicting counts copies of a sequence number the database
	// holds with other adjacencies (an originator restarted with its
	// incarnation reused it); the higher-ordered one is kept.
	LSAsConflicting uint64 `json:"lsas_conflicting"`
	// LSAsStale counts LSAs older than the database's copy, or at MaxAge.
	LSAsStale uint64 `json:"lsas_stale"`
	// LSAsExpired counts LSAs dropped at MaxAge; LSAsPurged those dropped
	// after their originator stayed unreachable for UnreachableHold.
	LSAsExpired uint64 `json:"lsas_expired"`
	LSAsPurged  uint64 `json:"lsas_purged"`
	// OwnLSACatchUps counts copies of this node's own LSA, left from an
	// earlier run, that made it jump its sequence number.
	OwnLSACatchUps uint64 `json:"own_lsa_catch_ups"`
	Malformed      uint64 `json:"malformed"`
	SPFRuns        uint64 `json:"spf_runs"`
}

// Neighbour is the routing view of one port.
type Neighbour struct {
	Port noc.PortID `json:"port"`
	// Up: the port's reliable link is up. Adjacent: it is up and the
	// neighbour's hello arrived, so Node and NodePort are known.
	Up       bool       `json:"up"`
	Adjacent bool       `json:"adjacent"`
	Node     noc.NodeID `json:"node"`
	NodePort noc.PortID `json:"node_port"`
	// Since is when the adjacency came up.
	Since time.Duration `json:"since"`
}

// TopoNode is one originator in the link-state database.
type TopoNode struct {
	ID          noc.NodeID `json:"id"`
	Incarnation uint32     `json:"incarnation"`
	Seq         uint32     `json:"seq"`
	// Age is the LSA's age at the latest time the State was given.
	Age       time.Duration `json:"age"`
	Reachable bool          `json:"reachable"`
	// Hops from this node; -1 when unreachable.
	Hops        int `json:"hops"`
	Adjacencies int `json:"adjacencies"`
}

// TopoLink is a link as the database knows it. TwoWay: both ends list it
// (only two-way links carry routes); otherwise only A lists it.
type TopoLink struct {
	A      noc.NodeID `json:"a"`
	PortA  noc.PortID `json:"port_a"`
	B      noc.NodeID `json:"b"`
	PortB  noc.PortID `json:"port_b"`
	TwoWay bool       `json:"two_way"`
}

// Topology is the link-state database as nodes and links, for
// `dpuctl topo show`.
type Topology struct {
	Self  noc.NodeID `json:"self"`
	Nodes []TopoNode `json:"nodes"` // sorted by ID
	Links []TopoLink `json:"links"` // sorted by A, PortA; two-way links have A < B
}

// NextHop returns the port toward dst and its distance in hops, in O(1)
// without allocating. For this node itself it returns noc.LocalPort and 0
// hops. ok is false when no route is known.
func (s *State) NextHop(dst noc.NodeID) (p noc.PortID, hops int, ok bool) {
	if dst == s.self {
		return noc.LocalPort, 0, true
	}
	var h hop
	if len(s.dense) > 0 {
		if int(dst) < len(s.dense) {
			h = s.dense[dst]
		}
		ok = h.hops > 0 // every route is at least one hop
	} else {
		h, ok = s.hop[dst]
	}
	if !ok {
		return noc.NoPort, 0, false
	}
	return h.port, int(h.hops), true
}

// Routes returns a copy of the routing table, sorted by Dst.
func (s *State) Routes() []Route { return slices.Clone(s.table) }

// Version counts routing table changes: it grows by one every time a
// recomputation changes any route. Compare it with a remembered value to
// publish route-change events.
func (s *State) Version() uint64 { return s.version }

// Neighbour returns the node adjacent on port p.
func (s *State) Neighbour(p noc.PortID) (noc.NodeID, bool) {
	if int(p) >= len(s.ports) || !s.ports[p].adjacent() {
		return 0, false
	}
	return s.ports[p].neighbour, true
}

// Neighbours returns every port that is up or has heard a hello, by port.
func (s *State) Neighbours() []Neighbour {
	var out []Neighbour
	for p := range s.ports {
		pt := &s.ports[p]
		if !pt.up && !pt.heard {
			continue
		}
		n := Neighbour{Port: noc.PortID(p), Up: pt.up, Adjacent: pt.adjacent()}
		if pt.heard {
			n.Node, n.NodePort = pt.neighbour, pt.peerPort
		}
		if n.Adjacent {
			n.Since = pt.since
		}
		out = append(out, n)
	}
	return out
}

// Topology returns the link-state database.
func (s *State) Topology() Topology {
	t := Topology{Self: s.self}
	for _, e := range s.entries {
		if e == nil || (e == s.own && e.lsa.Seq == 0) {
			continue
		}
		n := TopoNode{
			ID: e.lsa.Origin, Incarnation: e.lsa.Incarnation, Seq: e.lsa.Seq,
			Age: e.age0 + s.now - e.installed, Reachable: e.reachable, Hops: int(e.hops),
			Adjacencies: len(e.lsa.Adjacencies),
		}
		if e == s.own {
			n.Hops = 0
		}
		t.Nodes = append(t.Nodes, n)
		for _, a := range e.lsa.Adjacencies {
			back := s.lists(a.Neighbour, e.lsa.Origin)
			switch {
			case back && e.lsa.Origin < a.Neighbour:
				t.Links = append(t.Links, TopoLink{A: e.lsa.Origin, PortA: a.Port, B: a.Neighbour, PortB: a.NeighbourPort, TwoWay: true})
			case !back:
				t.Links = append(t.Links, TopoLink{A: e.lsa.Origin, PortA: a.Port, B: a.Neighbour, PortB: a.NeighbourPort})
			}
		}
	}
	slices.SortFunc(t.Nodes, func(a, b TopoNode) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(t.Links, func(a, b TopoLink) int {
		return cmp.Or(cmp.Compare(a.A, b.A), cmp.Compare(a.PortA, b.PortA))
	})
	return t
}

// lists reports whether the database's LSA of origin lists neighbour.
func (s *State) lists(origin, neighbour noc.NodeID) bool {
	slot, ok := s.index.get(origin)
	return ok && lists(s.entries[slot], neighbour)
}

// DatabaseBytes is the memory the link-state database holds: for every
// LSA its entry (the decoded LSA, ages, reachability, slot), its
// adjacencies' backing array (capacity × 8 bytes) and its pointer in the
// slot table, plus the originator index (4 bytes an id while ids are
// dense, else a map slot of 8). The routing table and the shortest-path
// scratch are apart (O(N) each), as are the Go allocator's and the map's
// overheads.
func (s *State) DatabaseBytes() int {
	b := cap(s.entries) * int(unsafe.Sizeof((*entry)(nil)))
	for _, e := range s.entries {
		if e != nil {
			b += int(unsafe.Sizeof(entry{})) + cap(e.lsa.Adjacencies)*int(unsafe.Sizeof(Adjacency{}))
		}
	}
	if s.index.m != nil {
		return b + len(s.index.m)*int(unsafe.Sizeof(noc.NodeID(0))+unsafe.Sizeof(int32(0)))
	}
	return b + len(s.index.dense)*int(unsafe.Sizeof(int32(0)))
}

// Stats returns the counters.
func (s *State) Stats() Stats { return s.stats }
