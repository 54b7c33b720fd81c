package coherence

import (
	"errors"
	"fmt"

	"github.com/aitherion/dpu/gva"
)

// ErrNoSpace is returned (wrapped) when a page would exceed the node's
// physical capacity: the capacity rule (a host never indexes more pages than
// it has physical pages).
var ErrNoSpace = errors.New("coherence: no physical page left (capacity rule)")

// PageStore holds the contents of the pages this node keeps: the primaries
// it owns and the replicas its host maps. Every page counts against the
// store's physical capacity. Implementations: MemStore (the memory tier)
// and tier.Store (memory, fast disk, slow disk; package coherence/tier).
//
// The slice rule: a slice Alloc or Lookup returned stays key's content
// until key is released or until the next Balance that lists key. The
// engine keeps a page's slice in its record, calls Balance only at the end
// of a step, and drops the slices Balance lists; its next access looks the
// page up again (which brings a spilled page back).
type PageStore interface {
	// Alloc reserves a physical page for key and returns its zeroed
	// content (gva.PageSize bytes). It fails with ErrNoSpace at capacity.
	// Allocating a key that is present returns the existing content.
	Alloc(key gva.GVA, huge bool) ([]byte, error)
	// Lookup returns the content of key.
	Lookup(key gva.GVA) ([]byte, bool)
	// Release returns key's physical page. Releasing an absent key is a
	// no-op.
	Release(key gva.GVA)
	// Len is the number of pages held; Cap the physical capacity.
	Len() int
	Cap() int
	// Speed is the storage tier key lives on.
	Speed(key gva.GVA) gva.Speed
	// Balance moves pages between speed tiers. It appends to dst the
	// keys whose slices it invalidated and returns it.
	Balance(dst []gva.GVA) []gva.GVA
}

// MemStore is the memory tier: pages in DRAM, at most Cap of them. Released
// pages are kept on a free list and reused, so a store at steady state does
// not allocate.
type MemStore struct {
	pages map[gva.GVA][]byte
	free  [][]byte
	cap   int
	// backing, when set, is the memory pages are carved from (next is
	// the first page never handed out) instead of the Go heap
	backing []byte
	next    int
}

// NewMemStore returns a memory tier of capacity physical 4 KiB pages.
func NewMemStore(capacity int) *MemStore {
	return &MemStore{pages: make(map[gva.GVA][]byte), cap: capacity}
}

// NewMemStoreIn returns a memory tier whose pages are carved from backing
// (zeroed memory the caller provides, such as a mapping bound to a NUMA
// node): its capacity is len(backing)/gva.PageSize pages. The caller keeps
// backing valid for as long as the store is used.
func NewMemStoreIn(backing []byte) *MemStore {
	n := len(backing) / gva.PageSize
	return &MemStore{pages: make(map[gva.GVA][]byte), cap: n, backing: backing[:n*gva.PageSize]}
}

// Alloc implements PageStore. Huge pages are accounted as one page of the
// memory tier; the flag travels with the page.
func (s *MemStore) Alloc(key gva.GVA, huge bool) ([]byte, error) {
	if p, ok := s.pages[key]; ok {
		return p, nil
	}
	if len(s.pages) >= s.cap {
		return nil, fmt.Errorf("alloc %v: %w (%d of %d pages in use)", key, ErrNoSpace, len(s.pages), s.cap)
	}
	var p []byte
	if n := len(s.free); n > 0 {
		p = s.free[n-1]
		s.free = s.free[:n-1]
		clear(p)
	} else if s.backing != nil {
		// fresh backing is zero; a page carved once returns by the free list
		p = s.backing[s.next*gva.PageSize : (s.next+1)*gva.PageSize : (s.next+1)*gva.PageSize]
		s.next++
	} else {
		p = make([]byte, gva.PageSize)
	}
	s.pages[key] = p
	return p, nil
}

// Lookup implements PageStore.
func (s *MemStore) Lookup(key gva.GVA) ([]byte, bool) {
	p, ok := s.pages[key]
	return p, ok
}

// Release implements PageStore.
func (s *MemStore) Release(key gva.GVA) {
	p, ok := s.pages[key]
	if !ok {
		return
	}
	delete(s.pages, key)
	s.free = append(s.free, p)
}

// Len implements PageStore.
func (s *MemStore) Len() int { return len(s.pages) }

// Cap implements PageStore.
func (s *MemStore) Cap() int { return s.cap }

// Speed implements PageStore: everything is in memory.
func (s *MemStore) Speed(gva.GVA) gva.Speed { return gva.SpeedMemory }

// Balance implements PageStore: one tier, nothing moves.
func (s *MemStore) Balance(dst []gva.GVA) []gva.GVA { return dst }

// pageBytes returns pg's content: the slice its record keeps, or, when a
// Balance dropped that slice (the slice rule, PageStore), the store's.
func (e *Engine) pageBytes(pg *page) []byte {
	if pg.content == nil {
		pg.content = e.storeLookup(pg.key)
	}
	return pg.content
}

// copyBytes is pageBytes for a backup copy.
func (e *Engine) copyBytes(c *backupCopy) []byte {
	if c.content == nil {
		c.content = e.storeLookup(copyKey(c.key))
	}
	return c.content
}

// FailingStore is a PageStore that can fail to give back a page it holds
// (a disk tier that cannot read it): ReadFailure says why the last Lookup
// that returned false did, nil if it found nothing to give.
type FailingStore interface {
	ReadFailure() error
}

func (e *Engine) storeLookup(key gva.GVA) []byte {
	p, ok := e.store.Lookup(key)
	if !ok {
		if fs, isFS := e.store.(FailingStore); isFS {
			if err := fs.ReadFailure(); err != nil {
				// The disk holding the page failed: the node stops, as on
				// a failed sync (durable.go); nothing of this step leaves
				// it, so the blank page handed back is never seen.
				e.stopOn(fmt.Errorf("coherence: page store: %w", err))
				return make([]byte, gva.PageSize)
			}
		}
	}
	if !ok || len(p) != gva.PageSize {
		e.broken(e.now, "page %v: its record's slice was dropped and the store does not give it back (%d bytes, found %v)", key, len(p), ok)
	}
	return p
}

// balance lets the store move pages between tiers at the end of a step,
// when no slice but the records' is held, and drops the records' slices
// it invalidated.
func (e *Engine) balance() {
	e.storeDrops = e.store.Balance(e.storeDrops[:0])
	for _, key := range e.storeDrops {
		if key == copyKey(key) {
			if c := e.copies[key.WithRefIndex(0)]; c != nil {
				c.content = nil
			}
			continue
		}
		if pg := e.pages[key]; pg != nil {
			pg.content = nil
		}
	}
}
