package hostif

import (
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// addressSpaces is the LVA↔GVA map of every host process that talks to this
// node, keyed by the process id the kernel gave for its connections. A
// process's connections share one map; an entry belongs to the connection
// whose MAP made it and goes with it.
type addressSpaces struct {
	mu sync.Mutex
	m  map[int32]*addressSpace
}

type addressSpace struct {
	conns int
	byLVA map[uint64]lvaEntry  // LVA page → page
	byGVA map[gva.GVA][]uint64 // page → LVA pages, ascending
}

type lvaEntry struct {
	page gva.GVA
	conn *conn
}

func newAddressSpaces() *addressSpaces {
	return &addressSpaces{m: make(map[int32]*addressSpace)}
}

// join registers a connection of process pid.
func (s *addressSpaces) join(pid int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.m[pid]
	if as == nil {
		as = &addressSpace{byLVA: make(map[uint64]lvaEntry), byGVA: make(map[gva.GVA][]uint64)}
		s.m[pid] = as
	}
	as.conns++
}

// leave drops every entry of c and, with the process's last connection,
// its map.
func (s *addressSpaces) leave(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.m[c.cred.PID]
	if as == nil {
		return
	}
	for lva, e := range as.byLVA {
		if e.conn == c {
			as.removeLocked(lva, e.page)
		}
	}
	if as.conns--; as.conns == 0 {
		delete(s.m, c.cred.PID)
	}
}

// free checks that no LVA page of [lva, lva+n pages) is mapped in c's process.
func (s *addressSpaces) free(c *conn, lva uint64, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.spaceLocked(c.cred.PID)
	for i := range n {
		if _, taken := as.byLVA[lva+uint64(i)*wire.PageSize]; taken {
			return fmt.Errorf("lva %#x is already mapped: %w", lva+uint64(i)*wire.PageSize, syscall.EEXIST)
		}
	}
	return nil
}

// add records that c mapped page at LVA page lva.
func (s *addressSpaces) add(c *conn, lva uint64, page gva.GVA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.spaceLocked(c.cred.PID)
	as.byLVA[lva] = lvaEntry{page: page, conn: c}
	l := as.byGVA[page]
	i, _ := slices.BinarySearch(l, lva)
	as.byGVA[page] = slices.Insert(l, i, lva)
}

// remove drops c's entry of page at lva; false if there is none.
func (s *addressSpaces) remove(c *conn, lva uint64, page gva.GVA) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.spaceLocked(c.cred.PID)
	if e, ok := as.byLVA[lva]; !ok || e.conn != c || e.page != page {
		return false
	}
	as.removeLocked(lva, page)
	return true
}

// has reports whether c's entry of page at lva exists.
func (s *addressSpaces) has(c *conn, lva uint64, page gva.GVA) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.spaceLocked(c.cred.PID).byLVA[lva]
	return ok && e.conn == c && e.page == page
}

// spaceLocked returns the map of process pid, creating it if a connection
// left it already (it then goes with nothing to free).
func (s *addressSpaces) spaceLocked(pid int32) *addressSpace {
	as := s.m[pid]
	if as == nil {
		as = &addressSpace{byLVA: make(map[uint64]lvaEntry), byGVA: make(map[gva.GVA][]uint64)}
	}
	return as
}

func (as *addressSpace) removeLocked(lva uint64, page gva.GVA) {
	delete(as.byLVA, lva)
	l := as.byGVA[page]
	if i, ok := slices.BinarySearch(l, lva); ok {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(as.byGVA, page)
	} else {
		as.byGVA[page] = l
	}
}

// toGVA translates an LVA of process pid.
func (s *addressSpaces) toGVA(pid int32, lva uint64) (gva.GVA, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.spaceLocked(pid).byLVA[lva&^(wire.PageSize-1)]
	if !ok {
		return gva.GVA{}, fmt.Errorf("lva %#x is not mapped: %w", lva, syscall.ENOENT)
	}
	return e.page.WithOffset(uint16(lva % wire.PageSize)), nil
}

// toLVA translates a GVA to the lowest LVA process pid maps it at.
func (s *addressSpaces) toLVA(pid int32, g gva.GVA) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.spaceLocked(pid).byGVA[g.Key()]
	if len(l) == 0 {
		return 0, fmt.Errorf("%v is not mapped in this process: %w", g, syscall.ENOENT)
	}
	return l[0] + uint64(g.Offset()), nil
}

// mapped reports whether process pid maps page key.
func (s *addressSpaces) mapped(pid int32, key gva.GVA) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spaceLocked(pid).byGVA[key]) > 0
}
