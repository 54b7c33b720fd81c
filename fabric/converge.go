package fabric

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// A fabric has converged when every running agent routes to every other
// running node, each route is a shortest one for the link-state database
// the agent holds, the agents' databases agree on every running node's
// adjacencies, and those hold every link the fabric wired between running
// nodes. Route tables alone are not enough: right after the last route
// appears, a ring's node can still route to its neighbour the long way
// round, because the link between them is not up yet (and then every
// database agrees that it is not).

// view is what one agent says about the fabric: its routes and its
// link-state database.
type view struct {
	node   noc.NodeID
	routes []ctl.Route
	topo   ctl.Topology
}

// readView asks the agent serving sock for its routes and its database.
func readView(ctx context.Context, sock string) (view, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := ctl.Dial(sock)
	if err != nil {
		return view{}, err
	}
	defer c.Close()
	topo, err := c.Topology(cctx)
	if err != nil {
		return view{}, err
	}
	rs, err := c.Routes(cctx)
	if err != nil {
		return view{}, err
	}
	return view{node: topo.Self, routes: rs, topo: topo}, nil
}

// routesFault says why v's routes are not the shortest ones toward every
// node of running (v's own node included) for the database v holds; ""
// when they are.
func routesFault(v view, running []noc.NodeID) string {
	if got, want := len(v.routes), len(running)-1; got != want {
		return fmt.Sprintf("%d of %d routes", got, want)
	}
	adj := adjacencies(v.topo)
	from := map[noc.NodeID]map[noc.NodeID]int{}
	dist := func(src noc.NodeID) map[noc.NodeID]int {
		if d, ok := from[src]; ok {
			return d
		}
		d := hops(adj, src)
		from[src] = d
		return d
	}
	for _, r := range v.routes {
		if !slices.Contains(running, r.Dst) {
			return fmt.Sprintf("a route to node %d, which is not running", r.Dst)
		}
		want, ok := dist(v.node)[r.Dst]
		if !ok {
			return fmt.Sprintf("a route to node %d, which its database cannot reach", r.Dst)
		}
		if r.Hops != want {
			return fmt.Sprintf("route to node %d in %d hops, its database says %d", r.Dst, r.Hops, want)
		}
		if !adj[v.node][r.NextHop] {
			return fmt.Sprintf("route to node %d through node %d, not a neighbour", r.Dst, r.NextHop)
		}
		if d, ok := dist(r.NextHop)[r.Dst]; !ok || d != want-1 {
			return fmt.Sprintf("route to node %d through node %d, not on a shortest path", r.Dst, r.NextHop)
		}
	}
	return ""
}

// adjacencies are the two-way links of a database: u and v are joined
// when each lists the other, as the agents' shortest-path search counts
// them.
func adjacencies(t ctl.Topology) map[noc.NodeID]map[noc.NodeID]bool {
	lists := map[noc.NodeID][]noc.NodeID{}
	for _, n := range t.Nodes {
		lists[n.ID] = n.Neighbours
	}
	adj := map[noc.NodeID]map[noc.NodeID]bool{}
	for u, ns := range lists {
		for _, v := range ns {
			if u != v && slices.Contains(lists[v], u) {
				if adj[u] == nil {
					adj[u] = map[noc.NodeID]bool{}
				}
				adj[u][v] = true
			}
		}
	}
	return adj
}

// hops is a breadth-first search from src: the hop count to every node it
// reaches.
func hops(adj map[noc.NodeID]map[noc.NodeID]bool, src noc.NodeID) map[noc.NodeID]int {
	d := map[noc.NodeID]int{src: 0}
	for q := []noc.NodeID{src}; len(q) > 0; q = q[1:] {
		u := q[0]
		for v := range adj[u] {
			if _, seen := d[v]; !seen {
				d[v] = d[u] + 1
				q = append(q, v)
			}
		}
	}
	return d
}

// linksFault names a link of wired between two running nodes that v's
// database does not hold as two-way; "" when it holds them all.
func linksFault(v view, wired []topo.Link, running []noc.NodeID) string {
	adj := adjacencies(v.topo)
	for _, l := range wired {
		if l.A != l.B && slices.Contains(running, l.A) && slices.Contains(running, l.B) && !adj[l.A][l.B] {
			return fmt.Sprintf("the link %d–%d is not up in its database", l.A, l.B)
		}
	}
	return ""
}

// databaseText is the part of v's database the agents must agree on: the
// sequence number and adjacencies of every running node, in node order.
func databaseText(v view, running []noc.NodeID) string {
	var b strings.Builder
	for _, id := range running {
		i := slices.IndexFunc(v.topo.Nodes, func(n ctl.TopoNode) bool { return n.ID == id })
		if i < 0 {
			fmt.Fprintf(&b, "%d:-;", id)
			continue
		}
		n := v.topo.Nodes[i]
		ns := slices.Clone(n.Neighbours)
		slices.Sort(ns)
		fmt.Fprintf(&b, "%d:%d:%v;", id, n.Seq, ns)
	}
	return b.String()
}

// databaseFaults names the agents whose databases differ from the one most
// of them hold; nil when all agree.
func databaseFaults(views []view, running []noc.NodeID) map[noc.NodeID]string {
	count := map[string]int{}
	text := make([]string, len(views))
	for i, v := range views {
		text[i] = databaseText(v, running)
		count[text[i]]++
	}
	if len(count) <= 1 {
		return nil
	}
	common := ""
	for t, n := range count {
		if n > count[common] || n == count[common] && t < common {
			common = t
		}
	}
	out := map[noc.NodeID]string{}
	for i, v := range views {
		if text[i] != common {
			out[v.node] = "its link-state database differs from the others'"
		}
	}
	return out
}
