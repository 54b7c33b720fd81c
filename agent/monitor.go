package agent

import (
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc/route"
)

// The monitor group's events that need more than the core's event says:
// a route change names each destination whose route changed, and a link-up
// names the neighbour once routing has heard who is on the port.

// publishRoutes compares the routing table with the one last published and
// publishes one route-change event per destination whose route changed, in
// destination order: the new next hop, port and distance, or hops -1 for a
// destination no longer reachable. Called under a.mu.
func (a *Agent) publishRoutes(ct *ctl.ClusterTime) {
	now := time.Now()
	cur := a.core.Routing().Routes()
	old := a.routesSeen
	i, j := 0, 0
	for i < len(cur) || j < len(old) {
		switch {
		case j == len(old) || (i < len(cur) && cur[i].Dst < old[j].Dst):
			a.publishRoute(now, ct, cur[i])
			i++
		case i == len(cur) || old[j].Dst < cur[i].Dst:
			a.tellMonitors(ctl.Event{Kind: ctl.EventRouteChange, Time: now, Node: old[j].Dst, Hops: -1, Cluster: ct})
			j++
		default:
			if cur[i] != old[j] {
				a.publishRoute(now, ct, cur[i])
			}
			i, j = i+1, j+1
		}
	}
	a.routesSeen = cur
}

func (a *Agent) publishRoute(now time.Time, ct *ctl.ClusterTime, r route.Route) {
	if r.Dst == a.cfg.Node {
		return
	}
	name := ""
	if int(r.Port) < len(a.ports) {
		name = a.ports[r.Port].spec.Name
	}
	a.tellMonitors(ctl.Event{Kind: ctl.EventRouteChange, Time: now, Node: r.Dst, Port: name, NextHop: r.NextHop, Hops: r.Hops, Cluster: ct})
}

// tellMonitors sends ev to the control socket's monitors, as reported by
// this node.
func (a *Agent) tellMonitors(ev ctl.Event) {
	from := a.cfg.Node
	ev.From = &from
	a.ctl.Publish(ev)
}
