package coherence

import (
	"slices"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// opSlots is the number of op counters per class: Load/Store/Atomic ops
// are small numbers, Control ops are counted from noc.OpCoherenceFirst.
const opSlots = 16

// Counters are the engine's statistics (dpuctl stats).
type Counters struct {
	// Sent and Received count frames per class and op (see Messages).
	Sent, Received [4][opSlots]uint64

	HostRequests, HostErrors, Retries uint64
	Allocs, Frees                     uint64

	// Path-cache protocol.
	Merges            uint64 // refs merged into an open fetch
	Grafts            uint64 // answers routed to requesters without a path
	AnsweredByReplica uint64 // refs answered by a valid replica on the way
	Installs          uint64 // full contents installed into a replica
	Writes, Atomics   uint64 // applied at the owner
	UpdatesSent       uint64 // write-update messages sent down
	InvalidatesSent   uint64 // write-invalidate messages sent down
	UpdatesApplied    uint64 // write-updates applied to a replica
	Detaches, Resets  uint64
	Attaches          uint64 // branches re-added after their unref crossed their re-join
	Pruned, Evictions uint64

	// Ownership protocol.
	Acquires                                   uint64
	SwapsStarted, SwapsCommitted, SwapsAborted uint64 // at the old owner
	SwapsCompleted, SwapsRefused, SwapsLost    uint64 // at the acquirer
	SwapsRecovered                             uint64 // taken after the old owner failed, on its home's word
	Flips, Held, Rerouted, DoneResent          uint64
	Expired                                    uint64 // writes and atomics queued behind backups past their requester's bound, dropped when the page left
	LateGrafts                                 uint64 // done branches grafted after the swap ended
	FlipsCut                                   uint64 // dones stopped by a link already down (that branch re-refs)
	Locks, Unlocks, HostFaults, NoticesLost    uint64
	Refreshes                                  uint64 // owner-to-home record refreshes sent

	// Credentials (cred.go).
	Refused      uint64 // requests of other nodes refused by the page's attributes (EACCES)
	RefusedLocal uint64 // requests of this node's host refused by the attributes it knows
	AttrUnknown  uint64 // requests of other nodes held back (EAGAIN) while the page's attributes were asked for

	// Replication (Replicas > 1).
	ReplStaged, ReplCommits       uint64 // writes sent to the backups; committed once they held them
	ReplWaits                     uint64 // granted requests that waited behind a staged write or a sync
	ReplDeltaSent, ReplFullSent   uint64 // writes and full contents sent to backups
	ReplTouches, ReplDrops        uint64 // copy confirmations and drop orders sent
	ReplBackupsChosen             uint64 // backups picked (first placement and re-replication)
	ReplBackupsLost               uint64 // backups given up because routing lost them
	ReplCopies                    uint64 // copies created at this node as a backup
	ReplCopiesDropped             uint64 // copies dropped on the owner's word or a newer epoch
	ReplCopiesExpired             uint64 // copies dropped unconfirmed past CopyLease
	Promotions, ReplPromoteFailed uint64 // pages taken over from a dead owner; refused for want of room
	ReplNoRoom                    uint64 // copies refused here for want of a physical page (capacity rule)
	ReplProbes, ReplOwnersGone    uint64 // owners asked about a copy; found restarted (their pages taken over)
	ReplFailedInFlight            uint64 // host writes in flight to a failed owner, ended as unknown at the failover (an owner had already answered one copy "outcome unknown")
	ReplQueries                   uint64 // questions to a page's home before a takeover
	ReplCensuses                  uint64 // takeovers from a copy of a minority that first asked every reachable node for a later copy
	ReplCensusDropped             uint64 // copies such a census found stale (another node held a later one) and dropped
	ReplAcquiresStopped           uint64 // this node's acquires of a page it took over, stopped and answered by the takeover
	ReplSettled                   uint64 // takeovers settled: backups hold the page, fellows dropped theirs; its content shown from then on
	ReplFreeWaits, ReplFreeAborts uint64 // frees that waited for the backups to drop their copies; of those, given up at the request's bound (the page lives on)
	ReplAcksRefused               uint64 // backups' answers naming an epoch or a version of the page this owner never made: refused (never counted as held), the page sent whole again

	// The split rule (split.go).
	SplitMinorities, SplitMajorities uint64 // times routing showed this node in a minority; in a majority again
	SplitChecks                      uint64 // touches asking backups to confirm a page after a minority
	SplitPinTouches                  uint64 // touches telling backups of a lock's pin before the lock is answered
	SplitPinsHeld                    uint64 // takeovers that kept a lost owner's lock pinned until its bound ran out there
	DurableSyncs                     uint64 // syncs of the durable page log (one per step that changed a page)
	DurableRestored                  uint64 // pages reloaded from the durable log at start, as backup copies
	SplitSuperseded                  uint64 // stale owners told who owns their page now
	SplitAbdications                 uint64 // pages given up here: taken over elsewhere while this node was fenced
	SplitHeld                        uint64 // takeovers, and lost backups or stand-ins given up, held back for want of a majority

	// Re-sent writes and atomics (resend.go).
	Resends            uint64 // writes and atomics of this node's host sent again (timer or routing change)
	RepliesAgain       uint64 // re-sent requests answered from the owner's reply records
	ResendsUnknown     uint64 // re-sent requests answered "outcome unknown": the owner's records did not cover them
	RepliesForgotten   uint64 // reply records dropped for room before their TTL
	RepliesCarried     uint64 // reply records that came with a page this node took (a swap, a takeover)
	ReplResentInFlight uint64 // host writes in flight to a failed owner, sent again to the backup that took the page over

	// Page traits and placement (traits.go, placement.go).
	WritesLocal, WritesRemote uint64 // writes and atomics the owner took from its own host; from other nodes
	PlaceOffers               uint64 // pages offered to the node that dominates their writes
	PlaceAcquires             uint64 // offers taken here: placement acquires started
	PlaceIgnored              uint64 // offers not taken (placement off here, the page not mapped, a swap under way)
	PlaceRefused              uint64 // placement acquires this owner refused at the grant (the rule no longer named them)
	PlaceMoves                uint64 // pages that became owned here by placement

	// Anomalies: dropped frames.
	// Duplicates: copies of a request the owner holds or answered.
	Malformed, Stale, Duplicates, HopLimit, PathAnomalies uint64
	SendErrors, CacheFull, PortsDown                      uint64
}

func opSlot(c noc.Class, op noc.Op) int {
	if c == noc.ClassControl {
		if op < noc.OpCoherenceFirst {
			return -1
		}
		op -= noc.OpCoherenceFirst
	}
	if int(op) >= opSlots {
		return -1
	}
	return int(op)
}

func (c *Counters) count(t *[4][opSlots]uint64, cl noc.Class, op noc.Op) {
	if s := opSlot(cl, op); s >= 0 && cl < 4 {
		t[cl][s]++
	}
}

// Messages returns the frames sent and received of one class and op.
func (c Counters) Messages(cl noc.Class, op noc.Op) (sent, received uint64) {
	s := opSlot(cl, op)
	if s < 0 || cl >= 4 {
		return 0, 0
	}
	return c.Sent[cl][s], c.Received[cl][s]
}

// TotalSent is the number of frames the engine sent.
func (c Counters) TotalSent() uint64 {
	var n uint64
	for _, row := range c.Sent {
		for _, v := range row {
			n += v
		}
	}
	return n
}

// Stats returns a copy of the counters.
func (e *Engine) Stats() Counters { return e.stats }

// PathCacheBytes is the memory of the path cache's entries
// (pathcache.Cache.Bytes: entries × pathcache.EntryBytes).
func (e *Engine) PathCacheBytes() int { return e.cache.Bytes() }

// PathEntry is one path cache entry as shown by dpuctl pathcache show.
type PathEntry struct {
	Key      gva.GVA
	Version  gva.Version
	Up       noc.PortID
	Down     pathcache.PortSet
	Owner    bool
	Replica  pathcache.ReplicaState
	Fetching bool
	Pins     uint16
	Huge     bool
	LastUse  time.Duration
	// Held is the content version of the local replica or primary, if any.
	Held    gva.Version
	HasPage bool
}

// PathCacheSnapshot lists the path cache ordered by key.
func (e *Engine) PathCacheSnapshot() []PathEntry {
	snap := e.cache.Snapshot()
	out := make([]PathEntry, 0, len(snap))
	for _, s := range snap {
		pe := PathEntry{Key: s.Key, Version: s.Version, Up: s.Up, Down: s.Down, Owner: s.Owner,
			Replica: s.Replica, Fetching: s.Fetching, Pins: s.Pins, Huge: s.Huge, LastUse: s.LastUse}
		if pg := e.pages[s.Key]; pg != nil && pg.has {
			pe.Held, pe.HasPage = pg.version, true
		}
		out = append(out, pe)
	}
	return out
}

// OwnedPage is one page owned here as shown by dpuctl owner show.
type OwnedPage struct {
	Key      gva.GVA
	Version  gva.Version
	Epoch    uint64
	Huge     bool
	Maps     int
	Branches int  // live down branches
	Swapping bool // being handed over
	Grantee  noc.NodeID
	Arbiter  arbiter.PageState // pin and queue
}

// OwnerSnapshot lists the pages owned here ordered by key, with pins and
// arbiter queues.
func (e *Engine) OwnerSnapshot() []OwnedPage {
	var out []OwnedPage
	for key, pg := range e.pages {
		if !pg.owner {
			continue
		}
		op := OwnedPage{Key: key, Version: pg.version, Epoch: pg.epoch, Huge: pg.huge, Maps: pg.maps}
		if ent, ok := e.cache.Peek(key); ok {
			op.Branches = ent.Down.Without(noc.LocalPort).Len()
		}
		if pg.swap != nil && pg.swap.out {
			op.Swapping, op.Grantee = true, pg.swap.peer
		}
		op.Arbiter, _ = e.arb.Page(key)
		out = append(out, op)
	}
	slices.SortFunc(out, func(a, b OwnedPage) int { return gva.Compare(a.Key, b.Key) })
	return out
}

// PageView is what a checker reads about one page held here.
type PageView struct {
	Key      gva.GVA
	Owner    bool
	Swapping bool // a swap is in progress here (either side)
	Valid    bool // a replica in the tree and current
	Mapped   bool
	Version  gva.Version
	Content  []byte // aliases the engine's page: read only, during the call
}

// Pages calls fn for every page whose content is held here (primaries and
// replicas), in key order. For checkers and tests; it allocates.
func (e *Engine) Pages(fn func(PageView)) {
	keys := make([]gva.GVA, 0, len(e.pages))
	for k := range e.pages {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, gva.Compare)
	for _, k := range keys {
		pg := e.pages[k]
		v := PageView{Key: k, Owner: pg.owner, Swapping: pg.swap != nil && pg.swap.stage >= stageGranted || pg.swap != nil && pg.swap.out,
			Mapped: pg.maps > 0, Version: pg.version, Content: e.pageBytes(pg)}
		if !pg.owner {
			v.Valid = e.replicaValid(pg)
		}
		if !pg.has {
			v.Content = nil
		}
		fn(v)
	}
}

// Entry returns a copy of the path cache entry of key, for checkers.
func (e *Engine) Entry(key gva.GVA) (pathcache.Entry, bool) {
	ent, ok := e.cache.Peek(key)
	if !ok {
		return pathcache.Entry{}, false
	}
	return *ent, true
}

// PageUse is how a node's physical pages (Config.Pages, the capacity rule)
// are used.
type PageUse struct {
	Owned, Replicas, Backups int // primaries owned here, replicas the host maps, backup copies kept for other owners
	Capacity                 int
}

// PageUse counts the physical pages in use by kind.
func (e *Engine) PageUse() PageUse {
	u := PageUse{Backups: len(e.copies), Capacity: e.store.Cap()}
	for _, pg := range e.pages {
		switch {
		case pg.owner:
			u.Owned++
		case pg.has || pg.maps > 0:
			u.Replicas++
		}
	}
	return u
}

// InFlight is the number of host requests not yet completed.
func (e *Engine) InFlight() int { return len(e.reqs) }

// Holding reports, for checkers, whether this node owns key and whether a
// swap of key is under way here (either side, from the grant on).
func (e *Engine) Holding(key gva.GVA) (owner, swapping bool) {
	pg := e.pages[key]
	if pg == nil {
		return false, false
	}
	return pg.owner, pg.swap != nil && (pg.swap.out || pg.swap.stage >= stageGranted)
}

// EachHolding calls fn, for checkers, with Holding's answer for every page
// this node keeps a record of, in no particular order: a check of every
// page on every node then costs the records nodes keep, not pages × nodes.
func (e *Engine) EachHolding(fn func(key gva.GVA, owner, swapping bool)) {
	for k, pg := range e.pages {
		fn(k, pg.owner, pg.swap != nil && (pg.swap.out || pg.swap.stage >= stageGranted))
	}
}

// EachBacking calls fn, for checkers, with every page this node keeps a
// backup copy of (those Backing finds), in no particular order.
func (e *Engine) EachBacking(fn func(key gva.GVA)) {
	for k := range e.copies {
		fn(k)
	}
}

// HandedOver reports, for checkers, whether this node committed a swap of
// key whose done the new owner may not have received yet (it still keeps
// the commit record to answer a re-sent confirmation). If this node fails
// now, the page may be lost with it.
func (e *Engine) HandedOver(key gva.GVA) bool {
	for _, c := range e.commits {
		if c.key == key {
			return true
		}
	}
	return false
}
