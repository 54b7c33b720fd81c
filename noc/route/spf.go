package route

import (
	"cmp"
	"slices"
	"time"

	"github.com/aitherion/dpu/noc"
)

// computeRoutes recomputes the routing table from the database: a
// breadth-first search on hop count from this node over two-way links (a
// link counts only when both ends list each other: this node's side from
// its live adjacencies, every other side from its LSA).
//
// Tie-break: of the neighbours that lie on a shortest path to a
// destination, the one with the lowest node id is the next hop, reached
// through the lowest-numbered port that leads to it. The search carries,
// for every node, the lowest first hop over all its shortest paths: a
// node's set of first hops is the union of its predecessors' sets, so the
// minimum is the minimum of their minima.
//
// It costs O(N + L·P) for N nodes, L links and P ports per node.
func (s *State) computeRoutes(now time.Duration) {
	s.spfDirty = false
	s.stats.SPFRuns++
	n := len(s.entries)
	s.dist = slices.Grow(s.dist[:0], n)[:n]
	s.first = slices.Grow(s.first[:0], n)[:n]
	for i := range s.dist {
		s.dist[i] = -1
	}
	s.dist[s.own.slot] = 0
	q := s.bfs[:0]
	s.nbrs = s.nbrs[:0]
	for p := range s.ports {
		pt := &s.ports[p]
		if !pt.adjacent() {
			continue
		}
		v, ok := s.index.get(pt.neighbour)
		if !ok || s.dist[v] == 1 || !lists(s.entries[v], s.self) {
			continue // unknown, a parallel link on a higher port, or one-way
		}
		s.dist[v], s.first[v] = 1, pt.neighbour
		s.nbrs = append(s.nbrs, Adjacency{Port: noc.PortID(p), Neighbour: pt.neighbour})
		q = append(q, v)
	}
	for h := 0; h < len(q); h++ {
		u := s.entries[q[h]]
		du, fu := s.dist[u.slot], s.first[u.slot]
		for _, a := range u.lsa.Adjacencies {
			w, ok := s.index.get(a.Neighbour)
			if !ok {
				continue
			}
			dw := s.dist[w]
			if (dw >= 0 && dw != du+1) || (dw > 0 && s.first[w] <= fu) {
				continue // nearer, or already reached through as low a first hop
			}
			if !lists(s.entries[w], u.lsa.Origin) {
				continue
			}
			if dw < 0 {
				s.dist[w] = du + 1
				q = append(q, w)
			}
			s.first[w] = fu
		}
	}
	s.bfs = q

	table := s.spare[:0]
	for slot, e := range s.entries {
		if e == nil || e == s.own {
			continue
		}
		d := s.dist[slot]
		if d < 0 {
			if e.reachable {
				e.reachable, e.lostAt = false, now
				s.noteAging(now + s.cfg.UnreachableHold)
			}
			e.hops = -1
			continue
		}
		e.reachable, e.hops = true, d
		next := s.first[slot]
		table = append(table, Route{Dst: e.lsa.Origin, Port: s.portTo(next), NextHop: next, Hops: int(d)})
	}
	slices.SortFunc(table, func(a, b Route) int { return cmp.Compare(a.Dst, b.Dst) })
	if slices.Equal(table, s.table) {
		s.spare = table
		return
	}
	s.spare, s.table = s.table, table
	s.version++
	s.indexTable()
}

// indexTable makes NextHop's index of the table.
func (s *State) indexTable() {
	clear(s.hop)
	clear(s.dense)
	s.dense = s.dense[:0]
	if n := len(s.table); n > 0 && denseFits(s.table[n-1].Dst, n) {
		last := s.table[n-1].Dst
		// Node ids are dense (a fabric numbered from 0): NextHop indexes
		// a slice instead of hashing into a map.
		s.dense = slices.Grow(s.dense, int(last)+1)[:int(last)+1]
		for _, r := range s.table {
			s.dense[r.Dst] = hop{port: r.Port, hops: int32(r.Hops)}
		}
		return
	}
	for _, r := range s.table {
		s.hop[r.Dst] = hop{port: r.Port, hops: int32(r.Hops)}
	}
}

// A routing table whose highest node id is below denseFactor × its routes
// + denseSlack, or below denseIDs, is kept as a slice indexed by node id
// (at most denseIDs × 4 bytes for a slot index, × 8 for a table: small
// beside a database of that many LSAs).
const (
	denseFactor = 4
	denseSlack  = 256
	denseIDs    = 1 << 14
)

// denseFits reports whether a slice indexed by node id up to id fits n
// entries (see denseFactor).
func denseFits(id noc.NodeID, n int) bool {
	return int(id) < max(denseFactor*n+denseSlack, denseIDs)
}

// portTo is the lowest port adjacent to neighbour v (s.nbrs is by port).
func (s *State) portTo(v noc.NodeID) noc.PortID {
	for _, a := range s.nbrs {
		if a.Neighbour == v {
			return a.Port
		}
	}
	return noc.NoPort // unreachable: first hops are always in nbrs
}

// lists reports whether e's LSA has an adjacency to node v.
func lists(e *entry, v noc.NodeID) bool {
	for _, a := range e.lsa.Adjacencies {
		if a.Neighbour == v {
			return true
		}
	}
	return false
}
