package fabric

import (
	"strings"
	"testing"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// ring4 is the link-state database of a whole ring 0–1–2–3–0.
func ring4() ctl.Topology {
	return ctl.Topology{Self: 0, Nodes: []ctl.TopoNode{
		{ID: 0, Self: true, Reachable: true, Seq: 5, Neighbours: []noc.NodeID{1, 3}},
		{ID: 1, Reachable: true, Hops: 1, Seq: 4, Neighbours: []noc.NodeID{0, 2}},
		{ID: 2, Reachable: true, Hops: 2, Seq: 6, Neighbours: []noc.NodeID{1, 3}},
		{ID: 3, Reachable: true, Hops: 1, Seq: 3, Neighbours: []noc.NodeID{2, 0}},
	}}
}

var running4 = []noc.NodeID{0, 1, 2, 3}

// TestRoutesFault: node 0 of a whole ring routing to node 3 the long way
// (through node 1, three hops: what dpu-fabric up printed right after
// "converged") has not converged; the shortest routes have; a next hop
// off every shortest path, a missing route and a one-way link are caught.
func TestRoutesFault(t *testing.T) {
	good := []ctl.Route{
		{Dst: 1, Port: "p0", NextHop: 1, Hops: 1},
		{Dst: 2, Port: "p0", NextHop: 1, Hops: 2},
		{Dst: 3, Port: "p1", NextHop: 3, Hops: 1},
	}
	if why := routesFault(view{node: 0, routes: good, topo: ring4()}, running4); why != "" {
		t.Fatalf("shortest routes: %s", why)
	}
	for _, tc := range []struct {
		name   string
		routes []ctl.Route
		topo   func(*ctl.Topology)
		want   string
	}{
		{"the long way round", []ctl.Route{good[0], good[1], {Dst: 3, Port: "p0", NextHop: 1, Hops: 3}}, nil,
			"route to node 3 in 3 hops, its database says 1"},
		{"the right length through the wrong neighbour", []ctl.Route{good[0], good[1], {Dst: 3, Port: "p0", NextHop: 1, Hops: 1}}, nil,
			"route to node 3 through node 1, not on a shortest path"},
		{"a route missing", good[:2], nil, "2 of 3 routes"},
		{"a one-way link", good, func(tp *ctl.Topology) { tp.Nodes[3].Neighbours = []noc.NodeID{2} },
			"route to node 3 in 1 hops, its database says 3"},
	} {
		tp := ring4()
		if tc.topo != nil {
			tc.topo(&tp)
		}
		why := routesFault(view{node: 0, routes: tc.routes, topo: tp}, running4)
		if !strings.Contains(why, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, why, tc.want)
		}
	}
}

// TestDatabaseFaults: agents that hold the same database agree; one that
// has not heard a node's latest adjacencies is named.
func TestDatabaseFaults(t *testing.T) {
	views := make([]view, 4)
	for i := range views {
		views[i] = view{node: noc.NodeID(i), topo: ring4()}
	}
	if f := databaseFaults(views, running4); f != nil {
		t.Fatalf("equal databases: %v", f)
	}
	stale := ring4()
	stale.Nodes[3].Seq, stale.Nodes[3].Neighbours = 2, []noc.NodeID{2}
	views[2].topo = stale
	f := databaseFaults(views, running4)
	if len(f) != 1 || f[2] == "" {
		t.Fatalf("node 2 holds an older LSA of node 3: %v", f)
	}
}

// TestLinksFault: a database without one of the ring's links (the state
// in which dpu-fabric up used to say "converged": node 0 routing to node 3
// through node 1, which was shortest for that database) has not converged.
func TestLinksFault(t *testing.T) {
	wired := []topo.Link{{A: 0, B: 1}, {A: 1, B: 2}, {A: 2, B: 3}, {A: 3, B: 0}}
	if why := linksFault(view{topo: ring4()}, wired, running4); why != "" {
		t.Fatalf("the whole ring: %s", why)
	}
	line := ring4()
	line.Nodes[0].Neighbours, line.Nodes[3].Neighbours = []noc.NodeID{1}, []noc.NodeID{2}
	if why := linksFault(view{topo: line}, wired, running4); why != "the link 3–0 is not up in its database" {
		t.Fatalf("the ring without 3–0: %q", why)
	}
	if why := linksFault(view{topo: line}, wired, []noc.NodeID{0, 1, 2}); why != "" {
		t.Fatalf("the link to a stopped node: %q", why)
	}
}
