package coherence

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Durable pages (Config.Durable). Every step that changes a page owned
// here (a committed write, an allocation, a transfer in or out, a
// takeover, a free) or a backup copy kept here (a full copy, a write, a
// handover's heir, a drop) marks it; before anything of the step leaves
// the node (a frame drained from the outbox, a completion handed to the
// sink) the marked pages' states are appended to the log and synced. So
// every acknowledgement this node gives (a write's answer as the owner, a
// copy's acknowledgement as a backup) names a state the log holds.
//
// A node started with a log reloads its pages as backup copies whose
// owner is gone, never as pages it owns: an owned page's copy ranks after
// the backups it had (they hold every version it committed, and may have
// taken the page over while this node was down), a copy kept for another
// owner asks that owner as any copy whose owner missed a confirmation
// does. The takeover rules then decide, by epochs and versions, who owns
// each page (replica.go); a reloaded copy waits two refresh periods, in
// which a live owner that took the page over meanwhile tells the page's
// home, whose record (reloaded too: home records are durable) drops the
// copy (movedOn). A page the node no longer kept leaves a tombstone (the
// last epoch it knew): a copy that names this node as its owner at that
// epoch or before, and asks it, is stale (its drop was lost before the
// power cut) and is told to drop; so is a copy of a backup this node's
// owned page no longer listed.
//
// At R = 1 a handover's old owner keeps a stand-in copy of the page from
// the commit until the heir owns it (durableStandIn): without it the page
// was on no log between the commit (the old owner's record became a
// tombstone) and the heir's taking it (its log holds nothing of a page it
// is acquiring).
//
// A sync that fails stops the engine: it sends nothing more and hands no
// completion to the sink (StopErr says why; the driver ends the node,
// as a crash).

// durMark marks key's state for the log.
func (e *Engine) durMark(key gva.GVA) {
	if e.cfg.Durable == nil {
		return
	}
	if e.durDirty == nil {
		e.durDirty = map[gva.GVA]uint64{}
	}
	// The newest epoch the node knew of the page in the step: a drop's
	// tombstone says the page moved on to it.
	ep := e.durDirty[key]
	if pg := e.pages[key]; pg != nil {
		ep = max(ep, pg.epoch)
	}
	if c := e.copies[key]; c != nil {
		ep = max(ep, c.epoch)
	}
	e.durDirty[key] = ep
}

// durHomeMark marks the home record of key (homed here) for the log.
func (e *Engine) durHomeMark(key gva.GVA) {
	if e.cfg.Durable == nil {
		return
	}
	if e.durHomes == nil {
		e.durHomes = map[gva.GVA]bool{}
	}
	e.durHomes[key] = true
}

// persist writes the marked pages' states and home records and syncs
// them.
func (e *Engine) persist() {
	if len(e.durDirty) == 0 && len(e.durHomes) == 0 || e.durErr != nil {
		return
	}
	l := e.cfg.Durable
	for _, key := range slices.SortedFunc(maps.Keys(e.durHomes), gva.Compare) {
		if rec := e.home[key]; rec != nil {
			l.PutHome(pagelog.Home{Key: key, Owner: rec.owner, OwnerInc: rec.ownerInc, Epoch: rec.epoch, Freed: rec.freed,
				Attr: rec.attr, HasAttr: rec.hasAttr})
		}
	}
	clear(e.durHomes)
	for _, key := range slices.SortedFunc(maps.Keys(e.durDirty), gva.Compare) {
		if pg := e.pages[key]; pg != nil && pg.owner && pg.has {
			content := e.pageBytes(pg)
			if e.durErr != nil {
				return // its store could not read it back: stopped, nothing synced
			}
			l.Put(pagelog.Page{Key: key, Owned: true, Owner: e.self, OwnerInc: e.inc, Epoch: pg.epoch, Version: pg.version,
				Huge: pg.huge, Backups: e.Backups(key), Attr: pg.attr, HasAttr: pg.hasAttr, Content: content})
			continue
		}
		if c := e.copies[key]; c != nil {
			content := e.copyBytes(c)
			if e.durErr != nil {
				return
			}
			l.Put(pagelog.Page{Key: key, Owner: c.owner, OwnerInc: c.ownerInc, Epoch: c.epoch, Version: c.version,
				Huge: c.huge, Rank: c.rank, Backups: c.backups, Heir: c.heir, HeirInc: c.heirInc, HasHeir: c.hasHeir,
				Attr: c.attr, HasAttr: c.hasAttr, Content: content})
			continue
		}
		l.Drop(key, e.durDirty[key])
	}
	clear(e.durDirty)
	e.stats.DurableSyncs++
	if err := l.Sync(); err != nil {
		e.stopOn(fmt.Errorf("coherence: durable pages: %w", err))
	}
}

// stopOn stops the engine on a failure of its storage (a sync of the
// durable pages, a page a disk tier cannot read back): nothing of the
// current step leaves the node, and nothing more does (StopErr).
func (e *Engine) stopOn(err error) {
	if e.durErr == nil {
		e.durErr = err
	}
	e.outbox = e.outbox[:0]
}

// goneHere reports whether this node's durable log says that, before it
// restarted, it kept key and gave it up in epoch `epoch` or later (a
// handover, a free, a copy its owner released): a copy of that epoch that
// names this node as its owner, or one older than the tombstone, is stale.
// The tombstone stands while the node neither owns the page nor keeps a
// copy of it again; a page entry that is no more than a replica or a
// request of its host's (made since the restart) does not end it.
func (e *Engine) goneHere(key gva.GVA, epoch uint64) (uint64, bool) {
	tomb, ok := e.durGone[key]
	pg := e.pages[key]
	return tomb, ok && epoch <= tomb && (pg == nil || !pg.owner) && e.copies[key] == nil
}

// StopErr is the storage failure that stopped the engine (a failed sync
// of its durable pages, or a page its store could not read back), nil
// while it runs.
func (e *Engine) StopErr() error { return e.durErr }

// restore loads the home records of the durable log, and its pages as
// backup copies.
func (e *Engine) restore() error {
	e.durGone = e.cfg.Durable.Gone()
	for _, h := range e.cfg.Durable.Homes() {
		e.home[h.Key] = &homeRecord{owner: h.Owner, ownerInc: h.OwnerInc, epoch: h.Epoch, freed: h.Freed, attr: h.Attr, hasAttr: h.HasAttr}
	}
	for _, p := range e.cfg.Durable.Pages() {
		key := p.Key
		content, err := e.store.Alloc(copyKey(key), p.Huge)
		if err != nil {
			return fmt.Errorf("coherence: durable page %v: %w", key, err)
		}
		copy(content, p.Content)
		c := &backupCopy{key: key, owner: p.Owner, ownerInc: p.OwnerInc, epoch: p.Epoch, version: p.Version, huge: p.Huge,
			content: content, attr: p.Attr, hasAttr: p.HasAttr, rank: p.Rank, backups: slices.Clone(p.Backups),
			heir: p.Heir, heirInc: p.HeirInc, hasHeir: p.HasHeir, restored: true}
		if p.Owned {
			// Ranked after the backups it had: they hold what it committed.
			c.backups = append(slices.DeleteFunc(c.backups, func(n noc.NodeID) bool { return n == e.self }), e.self)
			c.rank = len(c.backups) - 1
		}
		if c.owner == e.self && !c.hasHeir {
			c.ownerGone = true // its owner was this node's earlier run
		}
		// Any other copy asks its owner (or heir) once it missed two
		// confirmations (expireCopies), as a copy whose owner fell silent.
		e.copies[key] = c
		e.indexCopy(c)
		e.probing[key] = true
		e.stats.ReplCopies++
		e.stats.DurableRestored++
		// A tiered store spills as the copies load (no slice but the
		// records' is held here): memory stays near its capacity.
		e.balance()
	}
	e.restoring = len(e.copies) > 0
	return nil
}

// restoredWait reports whether a copy reloaded from the durable log must
// wait before it takes its page over: until this node, as a home, has
// learned who owns its pages (a live owner that took the page over while
// this node was down tells the home, and its record drops the copy).
func (e *Engine) restoredWait(c *backupCopy) bool {
	return c.restored && e.now < e.born+e.restoreGrace()
}

// restoreGrace is how long reloaded copies wait: two refresh periods, in
// which every live owner tells the page's home it owns the page, and a
// FailoverGrace for the word to arrive. A home with durable pages answers
// "retry" for pages it has no record of for longer (stale.go, learning):
// until copies reloaded by nodes that restart after it took them over.
func (e *Engine) restoreGrace() time.Duration {
	return 2*e.cfg.HomeRefresh + e.cfg.FailoverGrace
}
