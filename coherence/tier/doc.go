// Package tier is the tiered page store: a coherence.PageStore over
// memory (pages = N), a fast disk tier and a slow disk tier (agent keys
// tier = fast|slow PATH SIZE), files or block devices.
//
// # Placement
//
// The capacity rule counts memory and the fast tier: Cap is their sum,
// and Alloc fails with coherence.ErrNoSpace past it. When more than 85%
// of memory holds pages (Config.High), the engine's end-of-step Balance
// spills the coldest ones to the fast tier until 70% (Config.Low); the
// fast tier spills its oldest pages to the slow tier by the same rule.
// Coldness is a clock: a page the engine looked up since the hand last
// passed keeps its frame (its bit is cleared), one it did not is a victim.
// Any access to a spilled page (a read, write, atomic, lock, a ref's
// answer, a transfer) goes through Lookup, which brings the page back
// with one read of its slot; the page's GVA, owner, version, permissions
// and path-cache entries are the engine's and never move.
//
// # The slice rule
//
// A slice Alloc or Lookup handed out stays the page's content until the
// page is released or until the next Balance that lists its key; the
// engine calls Balance only at the end of a step and forgets the slices it
// lists (coherence/store.go). A page coming back while memory is full
// takes a frame beyond memory's capacity until the next Balance, so that
// nothing a step holds is ever spilled under it. Config.Poison fills a
// frame a page left with 0xDB (tests), so a holder past its validity
// reads garbage a check sees.
//
// # On disk
//
// A tier file is a slotted file of the package's own (disk.go): a header,
// then slots of 512 + 4096 bytes, each a checksummed header (key, flags,
// a sequence number) and the page. A spill writes the victims to free
// slots, syncs (fdatasync), and only then switches (frees the frames,
// marks the pages as on disk): a crash at any point keeps every page in
// memory or on disk, and a page the store reported spilled is in the file.
// Opening a file lists its live slots (Recovered; the newest of a key
// wins). A slot is freed by zeroing its magic, unsynced: after a crash a
// page that had come back to memory may be found with the content it was
// spilled with.
//
// A full or failing disk refuses the spill: the pages stay in memory
// (over the threshold), Stats counts it and keeps the error, Alloc stops
// at memory's capacity, and spills resume once the disk takes writes.
//
// The store writes through a File: OSFile (a file or block device under
// an exclusive flock, reserved with fallocate) or MemFile, its in-memory
// twin, which keeps what was synced apart from what was only written and
// crashes on demand (a seeded subset of the unsynced writes, possibly
// torn).
//
// The store is not safe for concurrent use: the engine's driver owns it.
package tier
