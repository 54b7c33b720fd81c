package tier

import (
	"errors"
	"fmt"
	"slices"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
)

// Default thresholds of memory (and fast-disk) use: above High the coldest
// pages spill to the next tier, until use is at Low.
const (
	DefaultHigh = 0.85
	DefaultLow  = 0.70
)

// Config is a tiered store's shape.
type Config struct {
	// Memory is the memory tier's capacity in 4 KiB pages (pages = N).
	Memory int
	// Fast and Slow are the disk tiers' files (nil: no such tier).
	Fast, Slow File
	// High and Low are the spill thresholds (fractions of a tier's
	// capacity); zero means DefaultHigh, DefaultLow.
	High, Low float64
	// Backing, when set, is zeroed memory the memory tier's frames are
	// carved from (such as a mapping bound to a NUMA node), at most
	// len/PageSize of them; frames beyond it (a page that comes back to
	// a full memory) are on the Go heap. The caller keeps it valid while
	// the store is used.
	Backing []byte
	// Poison, when set, fills a memory frame with 0xDB when its page
	// leaves it: a holder of a slice past its validity (see Store) reads
	// garbage a test sees. Tests and the simulator set it.
	Poison bool
}

// Stats counts a store's traffic between tiers.
type Stats struct {
	Spills, Returns uint64 // memory -> fast disk, disk -> memory
	Demotions       uint64 // fast -> slow disk
	SpillRefused    uint64 // spills (or demotions) a full or failing disk refused
	ReadErrors      uint64 // returns a failing disk could not read
	Syncs           uint64
	LastErr         error // the newest refusal's cause
}

// Store is a PageStore over memory, a fast disk tier and a slow disk tier.
//
// The slice rule. Alloc and Lookup hand out a page's memory frame; the
// store never moves or reuses a frame except in Balance. So a slice the
// store handed out stays the page's content until the next Balance, or
// until the page is released; Balance returns the keys whose slices it
// invalidated (the page spilled, or its clock bit was cleared: the next
// access must look the page up again, which is how the store sees that a
// page is hot). The coherence engine keeps a page's slice in its record,
// calls Balance only at the end of a step (when nothing of the step holds
// a slice but those records), and forgets the slices of the keys Balance
// returns. With Config.Poison a frame a page left is filled with 0xDB.
//
// Capacity (the capacity rule): Cap is the memory tier plus the fast disk
// tier; the slow tier is room the fast tier spills into so that it keeps
// free slots. Alloc fails with coherence.ErrNoSpace at Cap, and when memory
// is full while the disk refuses spills. Lookup never fails for a page the
// store holds: a page that comes back while memory is full takes a frame
// beyond the memory tier's capacity until the next Balance spills one.
//
// Spill: Balance writes the victims to free slots, syncs the file, and
// only then switches (the frames are freed, the keys marked as on disk):
// a crash at any point keeps every page either in its old place or on
// disk. A failed write or sync refuses the spill: the pages stay in
// memory, Stats counts it and keeps the error.
type Store struct {
	cfg       Config
	memCap    int
	high, low int // memory use that starts spills, and where they stop
	frames    map[gva.GVA]*frame
	ring      []gva.GVA // resident pages, in clock order
	hand      int
	spare     [][]byte
	disks     [2]*disk // fast, slow (nil when absent)
	spilled   map[gva.GVA]spot
	seq       uint64
	readErr   error // the last Lookup's read failure (ReadFailure)
	stats     Stats
	refused   bool // the last spill was refused (memory may stay full)
	recovered []gva.GVA
	victims   []gva.GVA
	scratch   []byte
	carved    int // frames of Config.Backing handed out
}

type frame struct {
	p    []byte
	huge bool
	ref  bool // looked up since the clock hand last passed
	pick bool // chosen as a victim of the running spill
	pos  int  // index in ring
}

type spot struct {
	tier uint8 // 0 fast, 1 slow
	huge bool
	slot int32
}

// New opens a tiered store. Pages that an earlier run spilled (live slots
// of the files) are kept, on disk, and listed by Recovered.
func New(cfg Config) (*Store, error) {
	if cfg.Memory < 1 {
		return nil, fmt.Errorf("tier: a memory tier of %d pages", cfg.Memory)
	}
	if cfg.High == 0 {
		cfg.High = DefaultHigh
	}
	if cfg.Low == 0 {
		cfg.Low = DefaultLow
	}
	if !(0 < cfg.Low && cfg.Low < cfg.High && cfg.High <= 1) {
		return nil, fmt.Errorf("tier: thresholds low %v, high %v: want 0 < low < high <= 1", cfg.Low, cfg.High)
	}
	if cfg.Fast == nil && cfg.Slow != nil {
		return nil, errors.New("tier: a slow tier needs a fast tier to spill from")
	}
	s := &Store{cfg: cfg, memCap: cfg.Memory, frames: map[gva.GVA]*frame{}, spilled: map[gva.GVA]spot{},
		high: int(cfg.High * float64(cfg.Memory)), low: int(cfg.Low * float64(cfg.Memory)), scratch: make([]byte, gva.PageSize)}
	var all []found
	var tierOf []uint8
	for i, f := range []File{cfg.Fast, cfg.Slow} {
		if f == nil {
			continue
		}
		d, live, err := openDisk(f, gva.SpeedFastDisk+gva.Speed(i))
		if err != nil {
			return nil, err
		}
		s.disks[i] = d
		all = append(all, live...)
		for range live {
			tierOf = append(tierOf, uint8(i))
		}
	}
	// Of two live slots of one key (a demotion's crash between the new
	// slot's sync and the old one's freeing) the newer wins.
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpU(all[a].seq, all[b].seq) })
	for _, i := range idx {
		f := all[i]
		s.seq = max(s.seq, f.seq)
		if old, ok := s.spilled[f.key]; ok {
			s.disks[old.tier].release(old.slot)
		}
		s.spilled[f.key] = spot{tier: tierOf[i], huge: f.huge, slot: f.slot}
		s.disks[tierOf[i]].fifo = append(s.disks[tierOf[i]].fifo, spillRec{slot: f.slot, seq: f.seq})
	}
	for _, d := range s.disks {
		if d != nil {
			if err := d.flush(); err != nil {
				return nil, err
			}
		}
	}
	for k := range s.spilled {
		s.recovered = append(s.recovered, k)
	}
	slices.SortFunc(s.recovered, gva.Compare)
	return s, nil
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Recovered lists the pages found on disk when the store opened: every
// page whose spill an earlier run finished (synced), with the content it
// spilled, and possibly pages that had come back to memory since (their
// slot's freeing had not reached the disk), with their spilled content.
func (s *Store) Recovered() []gva.GVA { return s.recovered }

// Alloc implements coherence.PageStore.
func (s *Store) Alloc(key gva.GVA, huge bool) ([]byte, error) {
	if p, ok := s.Lookup(key); ok {
		return p, nil
	}
	if n := s.Len(); n >= s.Cap() {
		return nil, fmt.Errorf("alloc %v: %w (%d of %d pages in use: %s)", key, coherence.ErrNoSpace, n, s.Cap(), s.shape())
	}
	if len(s.frames) >= s.memCap && (s.disks[0] == nil || s.refused) {
		return nil, fmt.Errorf("alloc %v: %w (memory full, %d pages, and the fast tier refuses spills: %v)", key, coherence.ErrNoSpace, len(s.frames), s.stats.LastErr)
	}
	s.admit(key, huge, s.frameFor())
	return s.frames[key].p, nil
}

// Lookup implements coherence.PageStore: a page on disk comes back to
// memory (one read).
func (s *Store) Lookup(key gva.GVA) ([]byte, bool) {
	if f, ok := s.frames[key]; ok {
		f.ref = true
		return f.p, true
	}
	sp, ok := s.spilled[key]
	if !ok {
		return nil, false
	}
	p := s.frameFor()
	d := s.disks[sp.tier]
	if err := d.get(sp.slot, key, p); err != nil {
		// The page stays where it is: a later access tries again.
		s.stats.ReadErrors++
		s.stats.LastErr = err
		s.readErr = fmt.Errorf("page %v on %s: %w", key, d.f.Name(), err)
		s.spare = append(s.spare, p)
		return nil, false
	}
	s.readErr = nil
	d.release(sp.slot)
	delete(s.spilled, key)
	s.admit(key, sp.huge, p)
	s.stats.Returns++
	return p, true
}

// Release implements coherence.PageStore.
func (s *Store) Release(key gva.GVA) {
	if f, ok := s.frames[key]; ok {
		s.evict(key, f)
		return
	}
	if sp, ok := s.spilled[key]; ok {
		s.disks[sp.tier].release(sp.slot)
		delete(s.spilled, key)
	}
}

// Len implements coherence.PageStore.
func (s *Store) Len() int { return len(s.frames) + len(s.spilled) }

// Cap implements coherence.PageStore: memory plus the fast disk tier.
func (s *Store) Cap() int {
	if s.disks[0] == nil {
		return s.memCap
	}
	return s.memCap + s.disks[0].slots
}

// Speed implements coherence.PageStore.
func (s *Store) Speed(key gva.GVA) gva.Speed {
	if sp, ok := s.spilled[key]; ok {
		return gva.SpeedFastDisk + gva.Speed(sp.tier)
	}
	return gva.SpeedMemory
}

// Use is how many pages each tier holds and can hold (memory, fast, slow).
func (s *Store) Use() (used, capacity [3]int) {
	used[0], capacity[0] = len(s.frames), s.memCap
	for i, d := range s.disks {
		if d != nil {
			used[i+1], capacity[i+1] = d.used, d.slots
		}
	}
	return used, capacity
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats { return s.stats }

// ReadFailure implements coherence.FailingStore: why the last Lookup of a
// page the store holds on disk could not give it back (nil after a
// Lookup that did).
func (s *Store) ReadFailure() error { return s.readErr }

// Close closes the tier files.
func (s *Store) Close() error {
	var errs []error
	for _, d := range s.disks {
		if d != nil {
			errs = append(errs, d.f.Close())
		}
	}
	return errors.Join(errs...)
}

// Balance implements coherence.PageStore: above the high threshold the
// coldest resident pages spill to the fast tier until memory use is at the
// low one (and the fast tier's oldest pages move to the slow tier by the
// same rule). It appends to dst the keys whose slices it invalidated (see
// Store) and returns it.
func (s *Store) Balance(dst []gva.GVA) []gva.GVA {
	for _, d := range s.disks {
		if d != nil {
			if err := d.flush(); err != nil {
				s.refuse(err)
			}
		}
	}
	if fast := s.disks[0]; fast != nil && len(s.frames) > s.high {
		dst = s.spill(dst, len(s.frames)-s.low)
	}
	if slow := s.disks[1]; slow != nil {
		fast := s.disks[0]
		if hi := int(s.cfg.High * float64(fast.slots)); fast.used > hi {
			s.demote(fast.used - int(s.cfg.Low*float64(fast.slots)))
		}
	}
	return dst
}

// spill moves up to n of the coldest resident pages to the fast tier.
func (s *Store) spill(dst []gva.GVA, n int) []gva.GVA {
	s.victims = s.victims[:0]
	// The clock: a page looked up since the hand last passed loses its
	// bit (and its holder's slice, so that its next access is seen);
	// one without is a victim. Two turns find n victims if there are.
	for steps := 2 * len(s.ring); steps > 0 && len(s.victims) < n && len(s.ring) > 0; steps-- {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		key := s.ring[s.hand]
		s.hand++
		f := s.frames[key]
		if f.ref {
			f.ref = false
			dst = append(dst, key)
			continue
		}
		if !f.pick {
			f.pick = true
			s.victims = append(s.victims, key)
		}
	}
	fast := s.disks[0]
	var slots []int32
	var err error
	for _, key := range s.victims {
		s.frames[key].pick = false
	}
	for _, key := range s.victims {
		f := s.frames[key]
		var slot int32
		s.seq++
		if slot, err = fast.put(key, f.huge, f.p, s.seq); err != nil {
			break
		}
		slots = append(slots, slot)
	}
	if len(slots) > 0 {
		s.stats.Syncs++
		if serr := fast.f.Sync(); serr != nil {
			err = fmt.Errorf("tier file %s: sync: %w", fast.f.Name(), serr)
			for _, slot := range slots {
				fast.release(slot)
			}
			slots = nil
		}
	}
	// The switch: only pages whose slot is synced leave memory.
	for i, slot := range slots {
		key := s.victims[i]
		f := s.frames[key]
		s.spilled[key] = spot{tier: 0, huge: f.huge, slot: slot}
		s.evict(key, f)
		dst = append(dst, key)
		s.stats.Spills++
	}
	if err != nil {
		s.refuse(err)
	} else if len(slots) > 0 {
		s.refused = false
	}
	return dst
}

// demote moves up to n of the fast tier's oldest pages to the slow tier:
// read, write, sync the slow file, then switch and free the fast slot.
func (s *Store) demote(n int) {
	fast, slow := s.disks[0], s.disks[1]
	type move struct {
		key      gva.GVA
		from, to int32
		huge     bool
	}
	var moves []move
	var err error
	keys := s.keysBySlot(fast)
	for ; n > 0; n-- {
		slot, ok := fast.oldest()
		if !ok {
			break
		}
		key := keys[slot]
		if err = fast.get(slot, key, s.scratch); err != nil {
			break
		}
		s.seq++
		to, perr := slow.put(key, s.spilled[key].huge, s.scratch, s.seq)
		if perr != nil {
			err = perr
			break
		}
		fast.fifo = fast.fifo[1:]
		moves = append(moves, move{key: key, from: slot, to: to, huge: s.spilled[key].huge})
	}
	if len(moves) > 0 {
		s.stats.Syncs++
		if serr := slow.f.Sync(); serr != nil {
			err = fmt.Errorf("tier file %s: sync: %w", slow.f.Name(), serr)
			for _, m := range moves {
				slow.release(m.to)
				fast.fifo = append(fast.fifo, spillRec{slot: m.from, seq: fast.seqs[m.from]})
			}
			moves = nil
		}
	}
	for _, m := range moves {
		s.spilled[m.key] = spot{tier: 1, huge: m.huge, slot: m.to}
		fast.release(m.from)
		s.stats.Demotions++
	}
	if err != nil {
		s.refuse(err)
	}
}

func (s *Store) keysBySlot(d *disk) map[int32]gva.GVA {
	m := make(map[int32]gva.GVA, d.used)
	for k, sp := range s.spilled {
		if s.disks[sp.tier] == d {
			m[sp.slot] = k
		}
	}
	return m
}

func (s *Store) refuse(err error) {
	s.stats.SpillRefused++
	s.stats.LastErr = err
	s.refused = true
}

// frameFor returns a zeroed frame, a spare one when there is one.
func (s *Store) frameFor() []byte {
	if n := len(s.spare); n > 0 {
		p := s.spare[n-1]
		s.spare = s.spare[:n-1]
		clear(p)
		return p
	}
	if b := s.cfg.Backing; (s.carved+1)*gva.PageSize <= len(b) {
		s.carved++
		return b[(s.carved-1)*gva.PageSize : s.carved*gva.PageSize : s.carved*gva.PageSize]
	}
	return make([]byte, gva.PageSize)
}

func (s *Store) admit(key gva.GVA, huge bool, p []byte) {
	s.frames[key] = &frame{p: p, huge: huge, ref: true, pos: len(s.ring)}
	s.ring = append(s.ring, key)
}

// evict takes key's frame out of memory; the frame is kept as a spare (the
// frames in use and spare are at most the most memory ever held).
func (s *Store) evict(key gva.GVA, f *frame) {
	last := len(s.ring) - 1
	moved := s.ring[last]
	s.ring[f.pos] = moved
	s.frames[moved].pos = f.pos
	s.ring = s.ring[:last]
	delete(s.frames, key)
	if s.cfg.Poison {
		for i := range f.p {
			f.p[i] = 0xDB
		}
	}
	s.spare = append(s.spare, f.p)
}

func (s *Store) shape() string {
	used, capacity := s.Use()
	return fmt.Sprintf("memory %d/%d, fast %d/%d, slow %d/%d", used[0], capacity[0], used[1], capacity[1], used[2], capacity[2])
}

// Discard frees every page on disk (those Recovered lists, before the
// first Alloc): a store whose user cannot take an earlier run's pages
// back starts empty.
func (s *Store) Discard() error {
	for k, sp := range s.spilled {
		s.disks[sp.tier].release(sp.slot)
		delete(s.spilled, k)
	}
	s.recovered = nil
	for _, d := range s.disks {
		if d != nil {
			if err := d.flush(); err != nil {
				return err
			}
			if err := d.f.Sync(); err != nil {
				return fmt.Errorf("tier file %s: sync: %w", d.f.Name(), err)
			}
		}
	}
	return nil
}

// Refused reports whether the last spill the store tried was refused.
func (s *Store) Refused() bool { return s.refused }
