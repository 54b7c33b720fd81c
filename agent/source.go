package agent

import (
	"fmt"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/pathcache"
)

// source serves the control socket from snapshots, each taken as one step
// of the core.
type source struct{ a *Agent }

func (s source) snap(fn func(c *node.Core)) {
	s.a.onCore(func(c *node.Core, _ time.Duration) { fn(c) })
}

func (s source) portName(p noc.PortID) string {
	if int(p) < len(s.a.ports) {
		return s.a.ports[p].spec.Name
	}
	return ""
}

func (s source) Routes() []ctl.Route {
	var out []ctl.Route
	s.snap(func(c *node.Core) {
		for _, r := range c.Routing().Routes() {
			if r.Dst == s.a.cfg.Node {
				continue
			}
			out = append(out, ctl.Route{Dst: r.Dst, Port: s.portName(r.Port), PortIndex: r.Port, NextHop: r.NextHop, Hops: r.Hops})
		}
	})
	return out
}

func (s source) Links() []ctl.Link {
	var out []ctl.Link
	s.snap(func(c *node.Core) {
		for _, p := range c.Ports() {
			st := ctl.LinkDown
			if p.Up {
				st = ctl.LinkUp
			}
			l := ctl.Link{Index: p.ID, Name: p.Name, Kind: s.a.ports[p.ID].kind, State: st, MTU: p.MTU, Session: p.Session,
				Security: ctl.LinkSealed}
			if s.a.keys == nil {
				l.Security = ctl.LinkPlaintext
			}
			if p.Known {
				l.Peer = p.Neighbour
			} else {
				l.Peer = noc.BroadcastNode
			}
			fillLink(&l, p)
			cs, err := portCounters(s.a.ports[p.ID].port)
			if err != nil {
				s.a.log.Warn("link show", "err", err)
			}
			l.Counters = append(l.Counters, cs...)
			l.Channels = linkChannels(s.a.ports[p.ID].port)
			out = append(out, l)
		}
	})
	return out
}

func (s source) Neighbours() []ctl.Neighbour {
	var out []ctl.Neighbour
	s.snap(func(c *node.Core) {
		for _, p := range c.Ports() {
			if !p.Known {
				continue
			}
			st := ctl.NeighFailed
			if p.Up {
				st = ctl.NeighReachable
			}
			n := ctl.Neighbour{Port: p.Name, PortIndex: p.ID, Node: p.Neighbour, State: st, LastHeard: p.LastHeard}
			n.Key, n.KeyName = s.a.peerKey(p.ID)
			out = append(out, n)
		}
	})
	return out
}

func (s source) Stats() ctl.Stats {
	st := ctl.Stats{Node: s.a.cfg.Node, Uptime: time.Since(s.a.start)}
	s.snap(func(c *node.Core) {
		cs := c.Stats()
		add := func(name string, v uint64) { st.Counters = append(st.Counters, ctl.Counter{Name: name, Value: v}) }
		add("frames_delivered", cs.Delivered)
		add("frames_forwarded", cs.Forwarded)
		add("frames_originated", cs.Originated)
		add("frames_routing", cs.Routing)
		add("drop_no_route", cs.NoRoute)
		add("drop_hop_limit", cs.HopLimit)
		add("drop_malformed", cs.Malformed)
		add("drop_no_handler", cs.NoHandler)
		add("drop_send_error", cs.SendErrors)
		add("drop_local_queue", cs.LocalDrops)
		var tx, rx, rt uint64
		for _, p := range c.Ports() {
			tx += p.Link.TxDatagrams
			rx += p.Link.RxDatagrams
			rt += p.Link.Retransmits
		}
		add("link_tx_datagrams", tx)
		add("link_rx_datagrams", rx)
		add("link_retransmits", rt)
		add("routes", uint64(len(c.Routing().Routes())))
		clockCounters(c.Clock(), add) // clock.go
		// host requests answered by their socket reader's own steps (the
		// adaptive loop's run to completion), not by the loop
		add("host_answers_awaited", s.a.awaited.Load())
		// failed accepts of the host and control sockets and the metrics
		// endpoint: each backed off and served on (out of descriptors)
		srv := s.a.srvStats.Load()
		if srv != nil {
			add("accept_errors_host", srv.AcceptErrors())
		}
		if s.a.ctl != nil {
			add("accept_errors_ctl", s.a.ctl.AcceptErrors())
		}
		add("accept_errors_metrics", s.a.metrics.acceptErrors())
		// passes of the run loop, ever (a loop that spins shows here)
		add("loop_passes", s.a.passes.Load())
		if srv != nil {
			// ring pairs open, those whose host does not reap its
			// completions (their requests are not taken meanwhile), and
			// connections cut for it (hostif/rings.go)
			rs := srv.RingStats()
			add("host_rings", uint64(rs.Rings))
			add("host_rings_stalled", uint64(rs.Stalled))
			add("host_rings_cut", rs.Cut)
		}
		if s.a.engine != nil {
			// Physical pages in use by kind: backup copies count against
			// the capacity (config pages) like primaries and replicas.
			u := s.a.engine.PageUse()
			add("pages_owned", uint64(u.Owned))
			add("pages_replica", uint64(u.Replicas))
			add("pages_backup", uint64(u.Backups))
			add("pages_capacity", uint64(u.Capacity))
			if t := s.a.tiers; t != nil {
				// pages per speed tier, and the traffic between them
				// (coherence/tier): refused spills are a full or
				// failing disk
				used, capacity := t.store.Use()
				for i, name := range []string{"memory", "fast", "slow"} {
					add("tier_"+name+"_pages", uint64(used[i]))
					add("tier_"+name+"_capacity", uint64(capacity[i]))
				}
				ts := t.store.Stats()
				add("tier_spills", ts.Spills)
				add("tier_returns", ts.Returns)
				add("tier_demotions", ts.Demotions)
				add("tier_spills_refused", ts.SpillRefused)
				add("tier_read_errors", ts.ReadErrors)
			}
			es := s.a.engine.Stats()
			add("coherence_malformed", es.Malformed)        // payloads dropped (another build's format, or forged)
			add("coherence_refused", es.Refused)            // other nodes' requests refused by the pages' attributes
			add("coherence_refused_local", es.RefusedLocal) // this node's requests refused by the attributes it holds
			add("coherence_attr_unknown", es.AttrUnknown)   // requests held back while the attributes were asked for
			// lost requests (coherence/resend.go): writes and atomics sent
			// again, copies the owner recognised, answers from its reply
			// records, "outcome unknown" answers, records that came with a
			// page, and requests dropped past their requester's bound
			add("coherence_retries", es.Retries) // attempts of requests started again (a busy page, no answer yet, a moved owner)
			add("coherence_resends", es.Resends)
			add("coherence_duplicates", es.Duplicates)
			add("coherence_replies_again", es.RepliesAgain)
			add("coherence_resends_unknown", es.ResendsUnknown)
			add("coherence_replies_forgotten", es.RepliesForgotten)
			add("coherence_replies_carried", es.RepliesCarried)
			add("coherence_resent_to_new_owner", es.ReplResentInFlight)
			add("coherence_expired", es.Expired)
		}
	})
	return st
}

func (s source) Topology() ctl.Topology {
	t := ctl.Topology{Self: s.a.cfg.Node}
	s.snap(func(c *node.Core) {
		t.Nodes = topologyOf(c)
	})
	return t
}

func fillLink(l *ctl.Link, p node.PortInfo) {
	ls := p.Link
	l.TxDatagrams, l.TxBytes = ls.TxDatagrams, ls.TxBytes
	l.RxDatagrams, l.RxBytes = ls.RxDatagrams, ls.RxBytes
	l.TxMessages, l.RxMessages = ls.TxMessages, ls.RxMessages
	l.Retransmits, l.CRCErrors, l.Duplicates = ls.Retransmits, ls.CRCErrors, ls.Duplicates
	l.RTT = ls.SRTT
}

// topologyOf turns the link-state database into the control socket's view.
func topologyOf(c *node.Core) []ctl.TopoNode {
	t := c.Routing().Topology()
	idx := make(map[noc.NodeID]int, len(t.Nodes))
	out := make([]ctl.TopoNode, len(t.Nodes))
	for i, n := range t.Nodes {
		idx[n.ID] = i
		out[i] = ctl.TopoNode{ID: n.ID, Self: n.ID == t.Self, Reachable: n.Reachable, Hops: n.Hops, Seq: uint64(n.Seq)}
	}
	for _, l := range t.Links {
		if i, ok := idx[l.A]; ok {
			out[i].Neighbours = append(out[i].Neighbours, l.B)
		}
		if j, ok := idx[l.B]; ok && l.TwoWay {
			out[j].Neighbours = append(out[j].Neighbours, l.A)
		}
	}
	return out
}

// PathCache implements ctl.PathCacheSource.
func (s source) PathCache() []ctl.PathEntry {
	if s.a.engine == nil {
		return nil
	}
	var out []ctl.PathEntry
	s.snap(func(c *node.Core) {
		now := s.a.now()
		for _, e := range s.a.engine.PathCacheSnapshot() {
			pe := ctl.PathEntry{Key: e.Key, Up: e.Up, Version: e.Version, LastUse: now - e.LastUse}
			for p := range e.Down.All() {
				pe.Down = append(pe.Down, p)
			}
			switch {
			case e.Owner:
				pe.Replica = ctl.ReplicaPrimary
			case e.Replica == pathcache.ReplicaValid:
				pe.Replica = ctl.ReplicaValid
			case e.Replica == pathcache.ReplicaInvalid:
				pe.Replica = ctl.ReplicaInvalid
			case e.Replica == pathcache.ReplicaSwapping:
				pe.Replica = ctl.ReplicaSwapping
			}
			out = append(out, pe)
		}
	})
	return out
}

// OwnedPages implements ctl.OwnerSource.
func (s source) OwnedPages() []ctl.OwnedPage {
	if s.a.engine == nil {
		return nil
	}
	var out []ctl.OwnedPage
	s.snap(func(c *node.Core) {
		now := s.a.now()
		for _, p := range s.a.engine.OwnerSnapshot() {
			op := ctl.OwnedPage{Key: p.Key, Version: p.Version, Swapping: p.Swapping, Pinned: p.Arbiter.Pinned}
			if p.Arbiter.Pinned {
				op.PinHeld = now - p.Arbiter.PinnedAt
			}
			for _, w := range s.a.engine.QueueOf(p.Key) {
				op.Waiters = append(op.Waiters, ctl.Waiter{Node: w.Request.Node, Port: w.Request.Port, Request: w.Request.ID, Waited: now - w.Request.Arrival})
			}
			out = append(out, op)
		}
	})
	return out
}

// DumpObjects implements ctl.CommandSource: the GPU accounting's objects,
// the host socket's quotas and the NUMA layout.
func (s source) DumpObjects(cmd ctl.Cmd) ([]ctl.Object, error) {
	if cmd == ctl.CmdQuotaGet {
		return s.a.quotaObjects(), nil
	}
	if cmd == ctl.CmdNUMAGet {
		n := s.a.NUMA()
		return []ctl.Object{&n}, nil
	}
	return gpuctl.Commands(s.a.gpu).DumpObjects(cmd)
}

// DoCommand implements ctl.CommandSource (the control server lets only
// root and the agent's user run CmdQuotaSet).
func (s source) DoCommand(cmd ctl.Cmd, attrs []byte) error {
	if cmd == ctl.CmdQuotaSet {
		q, err := ctl.DecodeQuota(attrs)
		if err != nil {
			return fmt.Errorf("%w: %w", err, syscall.EINVAL)
		}
		return s.a.setQuota(q)
	}
	return gpuctl.Commands(s.a.gpu).DoCommand(cmd, attrs)
}

// PageInfo implements ctl.PageSource: the page as this node holds it,
// with its traits at the core's time.
func (s source) PageInfo(g gva.GVA) (ctl.PageInfo, error) {
	if s.a.engine == nil {
		return ctl.PageInfo{}, fmt.Errorf("no engine: %w", syscall.ENOENT)
	}
	var info coherence.PageInfo
	var ok bool
	var now time.Duration
	s.snap(func(*node.Core) {
		now = s.a.now()
		info, ok = s.a.engine.PageInfo(now, g)
	})
	if !ok {
		return ctl.PageInfo{}, fmt.Errorf("page %v: this node holds no record of it (not owned, mapped or backed up here): %w", g.Key(), syscall.ENOENT)
	}
	t := info.Traits
	out := ctl.PageInfo{Key: info.Key, Version: info.Version, Owner: info.Owner, Owned: info.Owned, Tier: info.Tier, NUMA: -1,
		Maps: uint32(info.Maps), Replicas: uint32(info.Branches), Backups: info.Backups,
		Heat: t.Heat, Temperature: t.Temperature, Reads: t.Reads, Writes: t.Writes, WriteShare: t.WriteShare,
		Mobility: t.Mobility, Moves: t.Moves, MovesInWindow: uint32(t.MovesInWindow), Stability: t.Stability,
		Age: t.Age, Churn: t.Churn, Placement: info.Placement.String(), HalfLife: info.HalfLife, Window: info.Window,
		MaxMoves: uint32(info.MaxMoves)}
	if b := s.a.numa.bind; b.Bound() {
		out.NUMA = int32(b.Node)
		out.Address = ctl.NUMAAddress(uint32(s.a.cfg.Node), out.NUMA)
	}
	for _, m := range t.LastMoves {
		kind := "owner"
		if m.Kind == coherence.MoveTier {
			kind = "tier"
		}
		out.LastMoves = append(out.LastMoves, ctl.PageMove{Ago: now - m.At, Kind: kind})
	}
	for _, a := range t.Accessors {
		out.Accessors = append(out.Accessors, ctl.PageAccessor{Node: a.Node, Reads: a.Reads, Writes: a.Writes})
	}
	return out, nil
}
