package hostif

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// exec runs one well-formed request of c and fills rep. oc is the op's
// context, reused between requests.
func (s *Server) exec(c *conn, r *wire.Request, rep *reply, oc *opContext) error {
	oc.start(c.ctx, s.bounds.Timeout(r))
	defer oc.end()
	// the core checks c's user (the nodes that serve the call, again)
	ctx := withCred(oc, c.credential())
	le := binary.LittleEndian

	switch r.Op {
	case wire.OpMap:
		return s.mapPages(ctx, c, r, rep)
	case wire.OpUnmap:
		return s.unmapPages(ctx, c, r)
	case wire.OpTranslate:
		return s.translate(c, r, rep)
	case wire.OpRings:
		return s.openRings(c, r, rep)
	case wire.OpBulk:
		return s.openBulk(c, r, rep)
	case wire.OpMaps:
		return s.serveMaps(c, r, rep)

	case wire.OpSubscribe:
		c.subscribe(r.Mask)
		rep.body = le.AppendUint32(rep.body, r.Mask)
		rep.body = le.AppendUint32(rep.body, 0)
		return nil

	case wire.OpClock:
		cc, ok := s.be.(ClusterClock)
		if !ok {
			return fmt.Errorf("%s: %w", r.Op, syscall.ENOSYS)
		}
		t := cc.ClusterTime()
		rep.body = t.Append(rep.body)
		return nil
	}
	if r.Op.IsGPU() {
		return s.serveGPU(ctx, c, r, rep)
	}
	return fmt.Errorf("%s: %w", r.Op, syscall.ENOSYS)
}

// quick reports whether r may run on the connection's reading goroutine:
// the server serves it itself without waiting.
func (s *Server) quick(r *wire.Request) bool {
	return r.Op == wire.OpTranslate || r.Op == wire.OpSubscribe || r.Op == wire.OpClock
}

// mapPages takes c's refs on the pages of r and returns their replica
// files; with an LVA it records the process's LVA→GVA entries.
func (s *Server) mapPages(ctx context.Context, c *conn, r *wire.Request, rep *reply) error {
	n := r.Pages()
	if r.LVA != 0 {
		if err := s.spaces.free(c, r.LVA, n); err != nil {
			return err
		}
	}
	var pages [wire.MaxMapPages]wire.MappedPage
	var fds [wire.MaxMapPages]int
	for i := range n {
		page := wire.PageAt(r.GVA, i)
		rp, slot, err := s.replicas.ref(c, page, c.credential())
		if err != nil {
			for j := range i {
				_ = s.replicas.unref(ctx, c, wire.PageAt(r.GVA, j))
			}
			return fmt.Errorf("map %v: %w", page, err)
		}
		rp.mu.Lock()
		pages[i] = wire.MappedPage{Slot: slot, Version: rp.view.Version}
		rp.mu.Unlock()
		fds[i] = rp.file.fd
	}
	if r.LVA != 0 {
		for i := range n {
			s.spaces.add(c, r.LVA+uint64(i)*wire.PageSize, wire.PageAt(r.GVA, i))
		}
	}
	rep.body = wire.AppendMapReply(rep.body, pages[:n])
	if r.Flags&wire.MapNoFD == 0 {
		rep.fds = append(rep.fds, fds[:n]...)
	}
	return nil
}

// unmapPages drops the refs (and LVA entries) a MAP of the same range and
// LVA took.
func (s *Server) unmapPages(ctx context.Context, c *conn, r *wire.Request) error {
	n := r.Pages()
	held := s.replicas.heldBy(c)
	for i := range n {
		page := wire.PageAt(r.GVA, i)
		if held[page] == 0 || (r.LVA != 0 && !s.spaces.has(c, r.LVA+uint64(i)*wire.PageSize, page)) {
			return fmt.Errorf("unmap %v at lva %#x: not mapped so by this connection: %w", page, r.LVA, syscall.EINVAL)
		}
		held[page]--
	}
	var first error
	for i := range n {
		page := wire.PageAt(r.GVA, i)
		if r.LVA != 0 {
			s.spaces.remove(c, r.LVA+uint64(i)*wire.PageSize, page)
		}
		if err := s.replicas.unref(ctx, c, page); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *Server) translate(c *conn, r *wire.Request, rep *reply) error {
	if r.Dir == wire.TranslateToGVA {
		g, err := s.spaces.toGVA(c.cred.PID, r.LVA)
		if err != nil {
			return err
		}
		rep.gva = g
		rep.body = binary.LittleEndian.AppendUint64(rep.body, r.LVA)
		return nil
	}
	lva, err := s.spaces.toLVA(c.cred.PID, r.GVA)
	if err != nil {
		return err
	}
	rep.body = binary.LittleEndian.AppendUint64(rep.body, lva)
	return nil
}

// written applies a write made through this server to the page's replica
// file before the reply goes, and tells the page's subscribers.
func (s *Server) written(key gva.GVA, off int, data []byte, v gva.Version) {
	rp := s.replicas.get(key)
	if rp == nil {
		return
	}
	s.announce(key, rp.update(s.replicas, off, data, v), v, off, len(data))
}

func (s *Server) written64(key gva.GVA, off uint16, val uint64, v gva.Version) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], val)
	s.written(key, int(off), b[:], v)
}

// located is the answer to c's WHERE of page key, from the core's loc:
// tier local when c's process maps a valid replica of the page (the core
// knows the node's refs, not the process's mappings).
func (s *Server) located(c *conn, key gva.GVA, loc Location) Location {
	if rp := s.replicas.get(key); rp != nil && rp.valid() && s.spaces.mapped(c.cred.PID, key) {
		loc.Tier, loc.Hops = gva.TierLocal, 0
	}
	return loc
}
