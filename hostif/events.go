package hostif

import (
	"context"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// dispatchEvents applies the Backend's events to the replica files and
// forwards them to the connections concerned, until ctx ends
// or the Backend closes its stream. It never blocks on a client.
func (s *Server) dispatchEvents(ctx context.Context) {
	events := s.be.Events()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			s.handleEvent(ev)
		}
	}
}

func (s *Server) handleEvent(ev Event) {
	key := ev.Page.Key()
	switch ev.Kind {
	case EventUpdate:
		if rp := s.replicas.get(key); rp != nil {
			s.announce(key, rp.update(s.replicas, ev.Offset, ev.Data, ev.Version), ev.Version, ev.Offset, len(ev.Data))
		}
	case EventInvalidate:
		if rp := s.replicas.get(key); rp != nil {
			// A newer version exists (a larger write, newer content
			// installed), or the core's replica left the tree (Lost):
			// then the file is stale even at the version it holds.
			s.announce(key, rp.invalidate(s.replicas, ev.Version, ev.Lost), ev.Version, 0, 0)
		}
	case EventHostFault:
		// The backend took the lock back from the session; its connection
		// is told.
		if c := s.connOf(ev.Session); c != nil {
			c.queueEvent(wire.Event{Type: wire.EventHostFault, Page: key, Version: ev.Version, Reason: ev.Reason})
		}
	case EventOwnershipLost:
		if c := s.connOf(ev.Session); c != nil {
			c.queueEvent(wire.Event{Type: wire.EventOwnershipLost, Page: key, Version: ev.Version, Reason: ev.Reason})
		}
	case EventFreed:
		if rp := s.replicas.get(key); rp != nil {
			rp.invalidate(s.replicas, ev.Version, true)
			for _, c := range s.replicas.holdersOf(key) {
				c.queueEvent(wire.Event{Type: wire.EventFreed, Page: key, Version: ev.Version})
			}
		}
	case EventOverflow:
		for _, rp := range s.replicas.all() {
			rp.invalidate(s.replicas, 0, true)
		}
		s.connMu.Lock()
		for c := range s.conns {
			c.queueEvent(wire.Event{Type: wire.EventLost})
		}
		s.connMu.Unlock()
	default:
		s.log.Warn("unknown backend event", "kind", ev.Kind, "page", key)
	}
}

// announce tells the connections that map key what a write or an
// invalidation did to its replica file.
func (s *Server) announce(key gva.GVA, o outcome, v gva.Version, off, n int) {
	var ev wire.Event
	switch o {
	case applied:
		ev = wire.Event{Type: wire.EventUpdated, Page: key, Version: v, Offset: uint16(off), Length: uint16(n)}
	case behind:
		ev = wire.Event{Type: wire.EventInvalidated, Page: key, Version: v}
	default:
		return
	}
	for _, c := range s.replicas.holdersOf(key) {
		c.queueEvent(ev)
	}
}
