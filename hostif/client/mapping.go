package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Mapping is a read-only local mapping of shared pages: the replica files of
// this host, mapped into this process at consecutive addresses. Reading a
// valid replica costs a memory load; the server keeps the files current.
//
// Bytes gives the raw memory: every naturally aligned 64-bit word written by
// a 64-bit store, CAS or fetch-add is seen whole, but a replica may lag the
// owner and a page being rewritten may show a mix of two versions. Load64
// and Read are the consistent reads: a snapshot of one version of a page,
// no older than any write acknowledged on this host before the read began,
// fetched through the node when the replica is stale.
//
// Do not use a Mapping (or slices of Bytes) after Unmap or the client's
// Close: the memory is gone and touching it faults.
type Mapping struct {
	c     *Client
	gva   gva.GVA
	mem   []byte
	pages int
	slots []uint32

	mu     sync.Mutex
	mapped int // pages mapped so far (chunks of MaxMapPages)
	gone   atomic.Bool
}

// ErrUnmapped is returned by reads of an unmapped Mapping.
var ErrUnmapped = errors.New("hostif client: mapping was unmapped")

// Map refs the pages of [g, g+bytes) (g must start a page) and maps their
// replicas read-only into this process.
func (c *Client) Map(ctx context.Context, g gva.GVA, bytes int) (*Mapping, error) {
	if bytes <= 0 || g.Offset() != 0 {
		return nil, fmt.Errorf("hostif client: map %v of %d bytes: need a page start and a positive size", g, bytes)
	}
	pages := (bytes + wire.PageSize - 1) / wire.PageSize
	// Reserve the whole range first so the replicas land side by side.
	mem, err := unix.Mmap(-1, 0, pages*wire.PageSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("hostif client: reserving %d pages: %w", pages, err)
	}
	m := &Mapping{c: c, gva: g.Key(), mem: mem, pages: pages, slots: make([]uint32, pages)}
	base := uintptr(unsafe.Pointer(&mem[0]))
	per := int(c.hello.MaxMapPages)
	for first := 0; first < pages; first += per {
		n := min(per, pages-first)
		req := wire.Request{Header: wire.Header{Op: wire.OpMap, GVA: wire.PageAt(m.gva, first)},
			LVA: uint64(base) + uint64(first)*wire.PageSize, Bytes: uint64(n) * wire.PageSize}
		res, err := c.do(ctx, &req)
		if err == nil {
			m.mapped = first + n
			err = m.attach(first, n, res)
			res.release()
		}
		if err != nil {
			_ = m.unmapChunks(ctx)
			_ = unix.Munmap(mem)
			return nil, err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		m.release()
		return nil, ErrClosed
	}
	c.maps[m] = struct{}{}
	c.mu.Unlock()
	return m, nil
}

// attach maps the descriptors of one MAP reply over its part of the
// reservation and closes them.
func (m *Mapping) attach(first, n int, res result) error {
	defer closeAll(res.fds)
	pages, err := wire.DecodeMapReply(res.body, nil)
	if err != nil || len(pages) != n || len(res.fds) != n {
		return fmt.Errorf("%w: map reply for %d pages: %d entries, %d descriptors (%v)", ErrProtocol, n, len(pages), len(res.fds), err)
	}
	for i, fd := range res.fds {
		if pages[i].Slot == 0 || pages[i].Slot >= m.c.hello.StatusSlots {
			return fmt.Errorf("%w: status slot %d", ErrProtocol, pages[i].Slot)
		}
		addr := unsafe.Pointer(&m.mem[(first+i)*wire.PageSize])
		if _, err := unix.MmapPtr(fd, 0, addr, wire.PageSize, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			return fmt.Errorf("hostif client: mapping replica: %w", err)
		}
		m.slots[first+i] = pages[i].Slot
	}
	return nil
}

// GVA returns the address of the first mapped page.
func (m *Mapping) GVA() gva.GVA { return m.gva }

// LVA returns where the mapping starts in this process.
func (m *Mapping) LVA() gva.LVA { return gva.LVA(uintptr(unsafe.Pointer(&m.mem[0]))) }

// Len returns the mapping's length in bytes (whole pages).
func (m *Mapping) Len() int { return len(m.mem) }

// Bytes returns the mapped memory, read-only (writing to it faults).
func (m *Mapping) Bytes() []byte { return m.mem }

// entry returns the status entry of the replica backing page i.
func (m *Mapping) entry(i int) *slotView {
	return (*slotView)(unsafe.Pointer(&m.c.status[int(m.slots[i])*wire.SlotSize]))
}

// slotView is the layout of one status table entry (see wire).
type slotView struct {
	seq     uint64
	version uint64
	state   uint32
}

// Version returns the version the replica of page i holds and whether it
// is valid.
func (m *Mapping) Version(i int) (gva.Version, bool) {
	e := m.entry(i)
	for {
		s1 := atomic.LoadUint64(&e.seq)
		v, st := atomic.LoadUint64(&e.version), atomic.LoadUint32(&e.state)
		if s1&1 == 0 && atomic.LoadUint64(&e.seq) == s1 {
			return gva.Version(v), st == wire.SlotValid
		}
	}
}

// Load64 reads the 64-bit word at byte off (8-byte aligned) of the mapping:
// from the replica when it is valid (a few memory loads), else through the
// node.
func (m *Mapping) Load64(ctx context.Context, off int) (uint64, error) {
	if off < 0 || off+8 > len(m.mem) || off%8 != 0 {
		return 0, fmt.Errorf("hostif client: load64 at %d of a %d-byte mapping", off, len(m.mem))
	}
	if m.gone.Load() {
		return 0, ErrUnmapped
	}
	e := m.entry(off / wire.PageSize)
	p := (*uint64)(unsafe.Pointer(&m.mem[off]))
	for range 4 {
		s1 := atomic.LoadUint64(&e.seq)
		if s1&1 != 0 {
			continue
		}
		if atomic.LoadUint32(&e.state) != wire.SlotValid {
			break
		}
		v := atomic.LoadUint64(p)
		if atomic.LoadUint64(&e.seq) == s1 {
			return v, nil
		}
	}
	return m.c.Load64(ctx, wire.PageAt(m.gva, off/wire.PageSize).WithOffset(uint16(off%wire.PageSize)))
}

// Read copies len(p) bytes at byte off of the mapping into p: each page's
// part is a snapshot of one version, from the replica when it is valid,
// else through the node.
func (m *Mapping) Read(ctx context.Context, off int, p []byte) error {
	if off < 0 || off+len(p) > len(m.mem) {
		return fmt.Errorf("hostif client: read of %d bytes at %d of a %d-byte mapping", len(p), off, len(m.mem))
	}
	for len(p) > 0 {
		if m.gone.Load() {
			return ErrUnmapped
		}
		i, in := off/wire.PageSize, off%wire.PageSize
		n := min(len(p), wire.PageSize-in)
		if !m.readPage(i, in, p[:n]) {
			if _, err := m.c.Load(ctx, wire.PageAt(m.gva, i).WithOffset(uint16(in)), p[:n]); err != nil {
				return err
			}
		}
		off, p = off+n, p[n:]
	}
	return nil
}

// readPage tries a seqlock snapshot of p from the replica of page i.
func (m *Mapping) readPage(i, in int, p []byte) bool {
	e := m.entry(i)
	src := m.mem[i*wire.PageSize+in:][:len(p)]
	for range 4 {
		s1 := atomic.LoadUint64(&e.seq)
		if s1&1 != 0 {
			continue
		}
		if atomic.LoadUint32(&e.state) != wire.SlotValid {
			return false
		}
		copy(p, src)
		if atomic.LoadUint64(&e.seq) == s1 {
			return true
		}
	}
	return false
}

// Unmap drops the mapping and the refs it took.
func (m *Mapping) Unmap(ctx context.Context) error {
	c := m.c
	c.mu.Lock()
	_, live := c.maps[m]
	delete(c.maps, m)
	c.mu.Unlock()
	if !live {
		return ErrUnmapped
	}
	err := m.unmapChunks(ctx)
	m.release()
	return err
}

// unmapChunks sends UNMAP for every chunk mapped so far.
func (m *Mapping) unmapChunks(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	base := uint64(uintptr(unsafe.Pointer(&m.mem[0])))
	per := int(m.c.hello.MaxMapPages)
	var errs []error
	for first := 0; first < m.mapped; first += per {
		n := min(per, m.mapped-first)
		req := wire.Request{Header: wire.Header{Op: wire.OpUnmap, GVA: wire.PageAt(m.gva, first)},
			LVA: base + uint64(first)*wire.PageSize, Bytes: uint64(n) * wire.PageSize}
		if err := m.c.simple(ctx, &req); err != nil {
			errs = append(errs, err)
		}
	}
	m.mapped = 0
	return errors.Join(errs...)
}

// release unmaps the memory locally.
func (m *Mapping) release() {
	if m.gone.Swap(true) {
		return
	}
	_ = unix.Munmap(m.mem)
}
