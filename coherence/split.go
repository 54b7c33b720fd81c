package coherence

import (
	"encoding/binary"
	"syscall"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// The split rule (Replicas > 1; docs/replication.md, "Partitions"): a node
// that routing shows in a component of at most half the fabric's nodes
// decides nothing about a replicated page. It does not take a page over
// from a backup copy, does not give up a backup or a stand-in it lost, and
// as an owner it is fenced: its pages take no write, atomic, acquire or
// lock (they wait, and end at their bound) until it is in a majority again
// and each page's backups have confirmed, within that majority, that they
// still stand for it. A node that took a page over elsewhere answers the
// fenced owner's frames with its failover, and the fenced owner gives the
// page up. Of two halves at most one holds a strict majority, so at most
// one side decides; a takeover waits FailoverGrace + SplitGrace, long
// enough for the owner on the minority side to have fenced itself: its
// routing can be a link dead interval late (a node of the minority that
// crashed before the news of the split passed it), so SplitGrace covers
// Config.DeadInterval.

// checkBit marks the request ids of an owner's touches that ask its
// backups to confirm a page after a minority period (its term follows).
const checkBit = 1 << 61

// splitView is what this node knows of the fabric's split.
type splitView struct {
	version uint64              // the routing version last counted
	counted bool                // version is meaningful
	seen    map[noc.NodeID]bool // every node routing ever reached, this one included
	reach   int                 // nodes routing reaches now, this one included
	// joinedAt: when routing last reached more nodes than before (a node
	// came back): a copy of a page that died with its owner may be taken
	// over a while after that (stale.go, copiesMayReturn).
	joinedAt time.Duration
	majority bool
	// term counts the majority periods of this incarnation: a page
	// validated in an earlier term must be confirmed again.
	term uint64
	// minReach: the fewest nodes routing reached during the current
	// minority period (this one included; 0 before any count). riskyTerm:
	// the first term after the last minority period in which the nodes
	// out of reach were enough for a majority of their own, which may have
	// decided without this node (0: none since this incarnation started;
	// a copy this node holds came to it in this incarnation).
	minReach  int
	riskyTerm uint64
}

// riskyMinority reports whether, during the current minority period, the
// nodes out of this node's reach could have formed a strict majority of
// the fabric (and taken pages over, or moved them on). When they could
// not (half the fabric or more was down, not cut off: 8 of 16, 1 of 2),
// nothing decided anywhere while this node was in its minority.
func (e *Engine) riskyMinority() bool {
	n := e.fabricSize()
	return 2*(n-e.split.minReach) > n
}

// noRiskSince reports whether no minority period since term could have
// left a majority elsewhere deciding without this node.
func (e *Engine) noRiskSince(term uint64) bool {
	return e.split.riskyTerm <= term
}

// fabricSize is the number of nodes a majority is counted against: the
// configured size or, larger, every node routing ever reached. It never
// shrinks because nodes are unreachable.
func (e *Engine) fabricSize() int {
	return max(e.cfg.FabricNodes, len(e.split.seen))
}

// observeSplit recounts the nodes routing reaches when routing changed,
// and starts a new term when this node regained a majority.
func (e *Engine) observeSplit(now time.Duration) {
	if !e.replicated() || e.cfg.NoSplitRule {
		return
	}
	rt, ok := e.rt.(routeTable)
	if !ok || rt.Routing() == nil {
		// Routing that cannot list the fabric (a test's fixed routes):
		// nothing to count, every decision is this node's own.
		if !e.split.majority {
			e.split.majority = true
			e.split.term++
		}
		return
	}
	st := rt.Routing()
	if e.split.counted && st.Version() == e.split.version {
		return
	}
	e.split.version, e.split.counted = st.Version(), true
	if e.split.seen == nil {
		e.split.seen = map[noc.NodeID]bool{}
	}
	e.split.seen[e.self] = true
	routes := st.Routes()
	for _, r := range routes {
		e.split.seen[r.Dst] = true
	}
	if len(routes)+1 > e.split.reach && e.split.reach > 0 {
		e.split.joinedAt = now
	}
	e.split.reach = len(routes) + 1
	maj := 2*e.split.reach > e.fabricSize()
	if !maj {
		if e.split.majority || e.split.minReach == 0 {
			e.split.minReach = e.split.reach
		}
		e.split.minReach = min(e.split.minReach, e.split.reach)
	}
	switch {
	case maj && !e.split.majority:
		if e.riskyMinority() {
			e.split.riskyTerm = e.split.term + 1
		}
		e.split.minReach = 0
		e.split.term++
		e.stats.SplitMajorities++
		// Every page owned here is confirmed again before it acts.
		for key, pg := range e.pages {
			if pg.owner && pg.rep != nil {
				e.attend(key)
			}
		}
		e.armRepl(now)
	case !maj && e.split.majority:
		e.stats.SplitMinorities++
	}
	if e.dbg != nil && maj != e.split.majority {
		e.debugf(gva.GVA{}, "split: %d of %d nodes reachable: majority %v (term %d)", e.split.reach, e.fabricSize(), maj, e.split.term)
	}
	e.split.majority = maj
}

// splitRule reports whether the split rule holds this node's decisions.
func (e *Engine) splitRule() bool { return e.replicated() && !e.cfg.NoSplitRule }

// decides reports whether this node may take a page over, or give up a
// backup or a stand-in it lost: it is in a strict majority of the fabric.
func (e *Engine) decides() bool { return !e.splitRule() || e.split.majority }

// fenced reports whether a replicated page owned here must not act: this
// node is not in a majority, or the page's backups have not confirmed it
// in this majority term.
func (e *Engine) fenced(pg *page) bool {
	if !e.splitRule() || pg.rep == nil {
		return false
	}
	return !e.split.majority || pg.rep.term != e.split.term
}

// confirmPage asks the backups of a fenced page owned here, once this
// node is in a majority, whether they still stand for it (a touch with
// this term's id); it is confirmed once each has answered at this epoch.
func (e *Engine) confirmPage(now time.Duration, pg *page) {
	rep := pg.rep
	if !e.split.majority || rep.term == e.split.term {
		return
	}
	if len(rep.backups) < e.cfg.Replicas-1 {
		return // fillBackups chooses them: a new backup is confirmed by its first ack
	}
	done := len(rep.oldBackups) == 0 // a stand-in may have taken the page over
	for i := range rep.backups {
		if rep.backups[i].term != e.split.term {
			done = false
		}
	}
	if done {
		rep.term = e.split.term
		if e.dbg != nil {
			e.debugf(pg.key, "confirmed by its backups in term %d", rep.term)
		}
		return
	}
	if rep.checkSent != 0 && now-rep.checkSent < e.cfg.RetryInterval {
		return
	}
	if e.dbg != nil {
		e.debugf(pg.key, "asks its backups %v to confirm it in term %d (stand-ins %v)", rep.backups, e.split.term, rep.oldBackups)
	}
	rep.checkSent = now
	for i := range rep.backups {
		b := &rep.backups[i]
		if b.term != e.split.term {
			e.sendCheck(pg, b, i)
		}
	}
}

// sendCheck is a touch at the version the backup holds (the committed
// one, or the staged write's) whose id names this node's term: the backup's answer, at the page's epoch, confirms it.
func (e *Engine) sendCheck(pg *page, b *backupLink, rank int) {
	v := pg.version
	if b.ok && b.acked > v {
		v = b.acked // it holds the staged write
	}
	e.sendReplicateID(pg, b.node, checkBit|e.split.term, rank, replTouch, v, 0, nil)
	e.stats.SplitChecks++
}

// checked takes a backup's answer to a touch of this term.
func (e *Engine) checked(now time.Duration, pg *page, b *backupLink, id uint64) {
	if id != checkBit|e.split.term || !e.split.majority {
		return
	}
	b.term = e.split.term
	e.confirmPage(now, pg)
	if !e.fenced(pg) {
		e.repProgress(now, pg)
	}
}

// sendSuperseded tells node to, an owner of an earlier epoch (or a heir of
// this node's epoch not yet confirmed by its stand-ins), who owns the page
// now: an OpFailover of the newest owner this node knows.
func (e *Engine) sendSuperseded(to noc.NodeID, key gva.GVA, v gva.Version, h ownerHint) {
	var b [failLen]byte
	binary.BigEndian.PutUint32(b[:], uint32(h.owner))
	binary.BigEndian.PutUint64(b[4:], h.inc)
	binary.BigEndian.PutUint64(b[12:], h.epoch)
	f := newFrame(noc.ClassControl, OpFailover, 0, e.self, to, 0, key, v, b[:])
	e.sendNode(&f)
	e.stats.SplitSuperseded++
}

// yields reports whether a page owned here gives way to owner h: h's
// epoch is newer (the page was taken over past this node's ownership: a
// backup of an owner before it, whose copy was never dropped, took it
// over too, and two owners must not both act, whatever this one answered
// since); or it is this node's, and this node is fenced (it acted on
// nothing the other owner could contradict since it was last confirmed),
// or h says so itself (own), holding the page at version hv: two
// takeovers from copies of one epoch (a fellow backup the first did not
// know of kept its copy and took the page over beyond a split), where the
// one that holds the later version, else the higher node, keeps the page.
func (e *Engine) yields(pg *page, h ownerHint, hv gva.Version, own bool) bool {
	if !pg.owner || h.owner == e.self || pg.swap != nil || h.epoch < pg.epoch {
		return false
	}
	return h.epoch > pg.epoch || e.fenced(pg) || own && (hv > pg.version || hv == pg.version && h.owner > e.self)
}

// abdicate gives up a page owned here that a backup took over while this
// node was fenced: the staged write ends with an unknown outcome (the new
// owner may hold it), what waited follows the page, the subtree re-refs,
// the host's mapping re-fetches from the new owner.
func (e *Engine) abdicate(now time.Duration, pg *page, h ownerHint) {
	key, epoch := pg.key, pg.epoch
	if e.dbg != nil {
		e.debugf(key, "gives the page up at epoch %d version %d: %v owns it at epoch %d", pg.epoch, pg.version, h.owner, h.epoch)
	}
	e.stats.SplitAbdications++
	e.setHint(key, h)
	pg.owner, pg.ownerNode, pg.epoch = false, h.owner, max(pg.epoch, h.epoch)
	e.durMark(key)
	// The home's record names the new owner before anything that waited
	// here moves on: a request queued behind the backups, let go below,
	// asks the home where the page went (this node, when it is the home).
	if homeOf(key) == e.self {
		if rec := e.home[key]; rec == nil || rec.epoch <= h.epoch {
			e.home[key] = &homeRecord{owner: h.owner, ownerInc: h.inc, epoch: h.epoch}
			e.durHomeMark(key)
		}
	}
	if rep := pg.rep; rep != nil {
		for _, id := range rep.pinWait {
			if r := e.reqs[id]; r != nil {
				e.completeErr(now, r, syscall.ETIMEDOUT, "the page was taken over beyond a split while the lock was told to its backups: outcome unknown")
			}
		}
		rep.pinWait = nil
		if sw := rep.staged; sw != nil {
			rep.staged = nil
			e.opFail(now, sw.op, syscall.ETIMEDOUT)
			e.freeOwnerOp(sw.op)
		}
		// Our backups, and the stand-ins of the handover that gave us the
		// page, drop their copies and learn who owns it: a stand-in that
		// did not would take the page over once it found us without it.
		for _, b := range rep.backups {
			e.sendDrop(b.node, key, epoch)
			e.sendSuperseded(b.node, key, pg.version, h)
		}
		for _, n := range rep.oldBackups {
			if n != h.owner {
				e.sendDrop(n, key, epoch)
				e.sendSuperseded(n, key, pg.version, h)
			}
		}
		e.releaseRep(now, pg)
	}
	e.copyAnswers(e.arb.Disown(now, key))
	e.event(Event{Kind: EventOwnershipLost, GVA: key, Version: pg.version, At: now})
	if ent, ok := e.cache.Peek(key); ok {
		e.detachBelow(now, ent)
		e.cache.Remove(key)
	}
	e.closeFetch(key)
	if pg.maps == 0 && len(pg.waiters) == 0 {
		e.store.Release(key)
		delete(e.pages, key)
	} else {
		pg.has = false
		e.lostReplica(now, pg, pg.version)
		if len(pg.waiters) > 0 {
			r := pg.waiters[0]
			e.sendRef(now, pg, r.id, r.hr.Cred, pg.seen)
		}
	}
	e.processAnswers(now)
}

// Fenced reports, for checkers, whether this node owns key but is fenced
// by the split rule: it acts on nothing until it is confirmed or gives the
// page up, so it is not one of the page's acting owners.
func (e *Engine) Fenced(key gva.GVA) bool {
	pg := e.pages[key]
	return pg != nil && pg.owner && e.fenced(pg)
}

// Locks under the split rule. A lock is an acquisition and a pin at the
// locker's node, which owns the page. A backup that took the page over
// from an owner beyond a split would release a lock whose holder lives on:
// so the lock is answered only once every backup (and no stand-in) knows
// of the pin, and a backup holds a pinned copy back from a takeover until
// its owner is known restarted or the pin's bound ran out.

// heldPin is the arbiter holder of a lock's pin that a backup keeps raised
// when it takes over a page whose owner, the lock holder's node, routing
// lost (not known restarted): that node may live beyond a split with its
// lock, so the page takes no acquire or lock until the pin's bound ran out
// there. The takeover itself does not wait: waiting the bound out left the
// page with one copy, its backup's, for the whole bound, and that node's
// death then lost it (a ring of 4 at R = 2 whose owner died locked, and
// its backup 70 ms later: sim.TestOwnerRestartsWhileHalfIsDown). No
// session has this id; its revocation is no host's fault.
const heldPin arbiter.HolderID = 1<<64 - 1

// heldPinUntil is when the pin of a lock raised at c's owner ran out at the
// latest, if c's page was pinned and its owner was lost, not seen restarted
// (0: no pin to keep). The owner raised it before routing lost the owner,
// and revokes it within the bound; a fenced owner beyond a split (which
// fences itself within SplitGrace) included.
func (e *Engine) heldPinUntil(c *backupCopy) time.Duration {
	if !e.splitRule() || !c.pinned || c.hasHeir || c.ownerGone || c.unreachAt == 0 {
		return 0
	}
	return c.unreachAt + e.cfg.FailoverGrace + e.cfg.SplitGrace + e.pinBound()
}

// pinBit marks the request ids of an owner's touches that tell its backups
// of a pin (the page's pin sequence follows).
const pinBit = 1 << 60

// pinBound is how long a pin may stay raised at its owner.
func (e *Engine) pinBound() time.Duration {
	if e.cfg.PinBound > 0 {
		return e.cfg.PinBound
	}
	return e.arb.Config().MaxPin
}

// lockPinned answers lock r, whose pin is raised on pg, once the page's
// backups know of the pin (at once without the split rule).
func (e *Engine) lockPinned(now time.Duration, pg *page, r *request) {
	if !e.splitRule() || !pg.owner {
		e.complete(now, r, Completion{Version: pg.version})
		return
	}
	if pg.rep == nil {
		e.startReplication(now, pg)
	}
	rep := pg.rep
	rep.pinSeq++
	rep.pinSent = 0
	rep.pinWait = append(rep.pinWait, r.id)
	e.attend(pg.key)
	e.armRepl(now)
	e.pinProgress(now, pg)
}

// pinProgress answers the locks waiting on pg once R−1 backups acknowledged
// the latest pin touch and no stand-in keeps a copy; else it tells the
// backups that have not (again after a RetryInterval).
func (e *Engine) pinProgress(now time.Duration, pg *page) {
	rep := pg.rep
	if len(rep.pinWait) == 0 {
		return
	}
	done := len(rep.backups) >= e.cfg.Replicas-1 && len(rep.oldBackups) == 0
	for i := range rep.backups {
		if rep.backups[i].pin != rep.pinSeq {
			done = false
		}
	}
	if done {
		ids := rep.pinWait
		rep.pinWait = nil
		for _, id := range ids {
			if r := e.reqs[id]; r != nil {
				e.complete(now, r, Completion{Version: pg.version})
			}
		}
		return
	}
	if rep.pinSent != 0 && now-rep.pinSent < e.cfg.RetryInterval {
		return
	}
	rep.pinSent = now
	for i := range rep.backups {
		b := &rep.backups[i]
		if b.pin == rep.pinSeq {
			continue
		}
		v := pg.version
		if b.ok && b.acked > v {
			v = b.acked
		}
		e.sendReplicateID(pg, b.node, pinBit|rep.pinSeq, i, replTouch, v, 0, nil)
		e.stats.SplitPinTouches++
	}
}

// pinAcked takes a backup's answer to a pin touch.
func (e *Engine) pinAcked(now time.Duration, pg *page, b *backupLink, id uint64) {
	if id&^pinBit != pg.rep.pinSeq {
		return
	}
	b.pin = pg.rep.pinSeq
	e.pinProgress(now, pg)
}

// unpinned tells a page's backups that its pin is down (not waited for: a
// backup that missed it only holds a takeover back longer; the owner's
// confirmations every HomeRefresh carry it again).
func (e *Engine) unpinned(pg *page) {
	if !e.splitRule() || pg.rep == nil {
		return
	}
	for i, b := range pg.rep.backups {
		e.sendReplicate(pg, b.node, i, replTouch, max(pg.version, b.acked), 0, nil)
	}
}
