package coherence

import (
	"encoding/binary"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/route"
)

// Replication (Config.Replicas = R > 1): primary-backup. See
// docs/replication.md and the package documentation ("Replicated owners").

// MaxReplicas bounds Config.Replicas.
const MaxReplicas = 8

// maxPortScan is how many port numbers the backup placement looks at.
const maxPortScan = 64

// repQueueLen bounds the granted requests a page keeps waiting behind a
// staged write; beyond it they are refused with EBUSY (the host retries).
const repQueueLen = 256

// Replication payloads.
const (
	replHead  = 8 + 8 + 1 + 1 + 1 // epoch, owner incarnation, flags, rank, backups n
	replAckLn = 8 + 8 + 1         // epoch, backup incarnation, flags
	dropLen   = 8                 // epoch
	handLen   = 8 + 4 + 8         // epoch, heir (the node the page was handed to), its incarnation
	goneLen   = 8 + 8 + 1         // epoch, the answering node's incarnation, flags (a probe's answer)
	failLen   = 4 + 8 + 8         // owner, incarnation, epoch
)

// Replicate flags.
const (
	replFull  = 1 << 0 // data is the whole content at the header's version
	replHuge  = 1 << 1
	replTouch = 1 << 2 // no data: the owner still counts on this copy at the header's version
	replAttr  = 1 << 3 // (with replFull) the page's attributes (12 bytes) follow the content
	// replPinned: a lock's pin is raised on the page (split.go): a backup
	// does not take it over while its owner, the lock holder's node, may
	// live on the other side of a split.
	replPinned = 1 << 4
	// replReplies: reply records (resend.go) follow the backups list: a
	// full copy's are the page's, a write's its own.
	replReplies = 1 << 5
)

// Probe-answer flags.
const (
	goneAcquiring = 1 << 0 // the answering node is acquiring the page
	goneHolds     = 1 << 1 // the answering node keeps a copy of the page, of the probe's epoch or later
	goneLater     = 1 << 2 // that copy is of a later epoch than the probe's (the frame's page version is the copy's)
)

// Replicate-ack flags.
const (
	ackNeedFull = 1 << 0
	ackProbe    = 1 << 1 // a backup asks whether its owner still counts on its copy
	ackNoRoom   = 1 << 2 // the node has no physical page left for a copy (capacity rule)
)

// ownerRep is the owner's side of a replicated page.
type ownerRep struct {
	backups []backupLink
	staged  *stagedWrite
	queue   []*ownerOp // granted requests waiting behind the staged write or the sync
	// oldBackups: the stand-ins of the handover that gave us the page
	// (the old owner and its backups) that have not confirmed yet that
	// they dropped their copies. They keep them until ours hold the page;
	// then they are told to drop them, and the page takes no write until
	// each has confirmed it (or routing lost it for FailoverGrace): a
	// stand-in that missed the word would otherwise take the page over at
	// the old epoch's version if we die, losing what we committed.
	oldBackups []noc.NodeID
	oldUnreach map[noc.NodeID]time.Duration // when routing first lost a stand-in still to confirm
	oldSent    time.Duration                // when the stand-ins were last told
	// full: nodes that refused a copy for want of room, and when; they
	// are not asked again within a HomeRefresh.
	full map[noc.NodeID]time.Duration
	// term: the majority term the page was last confirmed in (split.go);
	// checkSent: when its backups were last asked to confirm it.
	term      uint64
	checkSent time.Duration
	// pinWait: locks whose pin is raised here, answered once every backup
	// knows of it (pinSeq: the touch that tells them; pinSent: when).
	pinWait []uint64
	pinSeq  uint64
	pinSent time.Duration
	// settling: the page was taken over here from a backup copy and the
	// takeover has not settled yet: its backups do not all hold it, a
	// fellow of the copy (the dead owner's other backups, a handover's
	// other stand-ins) has not confirmed it dropped its copy of the old
	// epoch, or the page is fenced. Until then nothing of its content is
	// shown: refs wait in reads, the host's loads wait, a write is not
	// answered from its reply record. The copy's version may be the dead
	// owner's staged write, which no other copy holds: shown and then
	// lost to a fellow that took the page over from its own copy beyond a
	// split, a version a reader saw would be undone (dpu-sim seed 103, 16
	// nodes, every fault, R = 3). A new Raft leader serves nothing of its
	// predecessor's log before it committed an entry of its own term.
	settling bool
	reads    []heldMsg
	// freeing: a free of the page waits here (startFreeing) for the
	// backups in freeWait to confirm they dropped their copies; the page
	// takes no write meanwhile. A free acknowledged while a backup still
	// held a copy would come back from that copy, at its last version,
	// if this node then died with the page's home record (dpu-sim seed 11,
	// 16 nodes, every fault, R = 3, a flooder: the heir that freed a page,
	// also its home, crashed; a stand-in took the freed page over).
	freeing   *request
	freeWait  []noc.NodeID
	freeUnrch map[noc.NodeID]time.Duration // when routing first lost a backup still to confirm
	freeSent  time.Duration                // when the backups were last told
}

// backupLink is one backup of a page as its owner sees it.
type backupLink struct {
	node      noc.NodeID
	inc       uint64      // the backup's incarnation, from its acks
	acked     gva.Version // the version it holds, at the page's epoch
	ok        bool        // acked is known (an ack at this epoch arrived)
	unreachAt time.Duration
	term      uint64 // the majority term it last confirmed the page in (split.go)
	pin       uint64 // the last pin touch it acknowledged (split.go)
}

// stagedWrite is a write (or swapping atomic) sent to the backups, not yet
// applied: it commits when every backup holds its version.
type stagedWrite struct {
	op      *ownerOp
	version gva.Version
	off     int
	data    []byte
	res     atomicResult
}

// backupCopy is a copy of a page this node keeps for its owner.
type backupCopy struct {
	key       gva.GVA
	owner     noc.NodeID
	ownerInc  uint64
	epoch     uint64
	version   gva.Version
	huge      bool
	content   []byte
	attr      Attr // the page's attributes, when the owner sent them
	hasAttr   bool
	rank      int
	backups   []noc.NodeID // the owner's backups in rank order
	touched   time.Duration
	unreachAt time.Duration // when the watched node was first seen unreachable (0: reachable)
	// lostAt: when routing first lost the watched node since the copy was
	// last touched (0: not since). Unlike unreachAt it survives the node
	// being reachable again for a while: a routing table that still
	// listed a dead node (stale link-state of a node that was alone in a
	// minority) must not make a copy whose owner died right after its
	// last confirmation look like one its owner had stopped confirming.
	lostAt time.Duration
	// heir: the owner handed the page over to this node; the copy stands
	// in for the page until the heir's backups hold it, and is promoted
	// only if the heir dies.
	heir    noc.NodeID
	heirInc uint64
	hasHeir bool
	// ownerGone: the owner's node answered a probe as a later incarnation
	// (it restarted before routing declared it dead): promote.
	ownerGone bool
	// query: the id of an OpOwnerQuery asking the page's home, before a
	// promotion, whether the page moved on past this copy's owner
	// (queries: how many were sent, queryAt: when the last was).
	goneAt   time.Duration // when ownerGone was first acted on
	query    uint64
	queries  int
	queryAt  time.Duration
	queryErr bool
	// homeSaid: the page's home answered with a record that does not
	// name a later owner; standInDue: when a stand-in without that answer
	// may take the page over (standInMayPromote).
	homeSaid   bool
	standInDue time.Duration
	// term: the majority term its owner last touched it in; a copy
	// touched before this node's last minority asks again before a
	// takeover (split.go).
	term uint64
	// queryTerm: the majority term the questions were asked in, and
	// fellowsAskedAt when the fellow backups were asked in it (split.go).
	queryTerm      uint64
	fellowsAskedAt time.Duration
	// census: the questions of queryTerm went to every node routing
	// reaches (the copy is from a minority that could have left a
	// majority deciding without it); an answer naming a later copy ends
	// this one.
	census   bool
	probedAt time.Duration
	probeDue time.Duration // probe the owner at this time (0: not due)
	// fellowsGone: nodes ranked before this copy that answered a probe
	// without a copy of the page (they restarted, or dropped it): they
	// will not take the page over, so they do not hold this copy back.
	fellowsGone     []noc.NodeID
	fellowsProbedAt time.Duration

	// pinned: the owner said a lock's pin is raised (split.go).
	pinned bool
	// restored: reloaded from the durable log (durable.go), not yet
	// confirmed by an owner.
	restored bool

	// replies: the reply records of the page's requests (resend.go),
	// complete since recFrom; recKnown: the owner sends them (one that
	// predates them does not).
	replies  []carriedReply
	recFrom  time.Duration
	recKnown bool

	indexed   bool
	indexedAt noc.NodeID
}

// watched is the node whose death promotes the copy.
func (c *backupCopy) watched() noc.NodeID {
	if c.hasHeir {
		return c.heir
	}
	return c.owner
}

// ownerHint is the newest failover this node heard of for a page.
type ownerHint struct {
	owner noc.NodeID
	inc   uint64
	epoch uint64
}

// maxHints bounds the failover hints a node keeps (oldest forgotten first).
const maxHints = 1 << 16

func (e *Engine) replicated() bool { return e.cfg.Replicas > 1 }

// repBusy reports whether a page owned here must keep granted writes,
// atomics, acquires and locks waiting: a write is staged, a backup does
// not hold the committed version yet, or a stand-in of the handover that
// gave us the page has not confirmed it dropped its copy.
func (e *Engine) repBusy(pg *page) bool {
	rep := pg.rep
	if rep == nil {
		return false
	}
	return len(rep.oldBackups) > 0 || rep.freeing != nil || !e.repSynced(pg) || e.fenced(pg)
}

// repSynced reports whether no write is staged on a replicated page owned
// here and R−1 backups hold its committed version.
func (e *Engine) repSynced(pg *page) bool {
	rep := pg.rep
	if rep.staged != nil || len(rep.backups) < e.cfg.Replicas-1 {
		return false // R copies or no write
	}
	for i := range rep.backups {
		b := &rep.backups[i]
		if !b.ok || b.acked < pg.version {
			return false
		}
	}
	return true
}

// attend marks an owned page for the replication timer's attention.
func (e *Engine) attend(key gva.GVA) { e.attention[key] = true }

// indexBackup files an owned page under one of its backups (the timer
// checks routing once per backup node, not once per page).
func (e *Engine) indexBackup(n noc.NodeID, key gva.GVA) {
	if e.backedBy[n] == nil {
		e.backedBy[n] = map[gva.GVA]bool{}
	}
	e.backedBy[n][key] = true
}

func (e *Engine) unindexBackup(n noc.NodeID, key gva.GVA) {
	if set := e.backedBy[n]; set != nil {
		delete(set, key)
		if len(set) == 0 {
			delete(e.backedBy, n)
		}
	}
}

// gate is execute's first step on a replicated page: it reports whether
// it kept op (queued behind a staged write or a sync, or staged it).
func (e *Engine) gate(now time.Duration, pg *page, op *ownerOp) bool {
	if !e.replicated() || !pg.owner {
		return false
	}
	if pg.rep == nil {
		e.startReplication(now, pg)
	}
	if e.repBusy(pg) {
		if len(pg.rep.queue) >= repQueueLen {
			e.opFail(now, op, syscall.EBUSY)
			e.freeOwnerOp(op)
			return true
		}
		pg.rep.queue = append(pg.rep.queue, op)
		e.stats.ReplWaits++
		return true
	}
	f := &op.f
	var sw stagedWrite
	switch f.Class {
	case noc.ClassStore:
		s, err := decodeStore(f.GVA, f.Payload)
		if err != nil {
			return false // execute refuses it
		}
		sw.off, sw.data = int(f.GVA.Offset()), slices.Clone(s.data)
	case noc.ClassAtomic:
		a, err := decodeAtomic(f.Op, f.GVA, f.Payload)
		if err != nil {
			return false
		}
		off := int(f.GVA.Offset())
		cur := binary.LittleEndian.Uint64(e.pageBytes(pg)[off:])
		sw.res = atomicResult{prev: cur, swapped: true}
		nv := cur + a.operand
		if f.Op == OpCAS {
			nv = a.operand
			sw.res.swapped = cur == a.expected
		}
		if !sw.res.swapped {
			return false // nothing to write: execute answers from the committed word
		}
		sw.off, sw.data = off, binary.LittleEndian.AppendUint64(nil, nv)
	default:
		return false // acquires and locks run once the backups hold the page
	}
	sw.op, sw.version = op, pg.version+1
	pg.rep.staged = &sw
	e.attend(pg.key)
	e.stats.ReplStaged++
	for i := range pg.rep.backups {
		e.sendDelta(pg, &pg.rep.backups[i])
	}
	e.armRepl(now)
	if bugsCompiled && e.cfg.Bug == BugEarlyAck {
		e.commitStaged(now, pg) // the planted bug: answered before the backups hold it
	}
	return true
}

// commitStaged applies a staged write every backup holds and answers it,
// then runs what waited behind it.
func (e *Engine) commitStaged(now time.Duration, pg *page) {
	sw := pg.rep.staged
	pg.rep.staged = nil
	op := sw.op
	f := &op.f
	e.applyWrite(now, pg, sw.off, sw.data)
	switch f.Class {
	case noc.ClassStore:
		e.stats.Writes++
		e.remember(now, pg, f, pg.version, atomicResult{})
		e.reply(now, f.Src, f.RequestID, noc.ClassStore, OpStore, 0, f.GVA, pg.version, nil)
	case noc.ClassAtomic:
		e.stats.Atomics++
		e.remember(now, pg, f, pg.version, sw.res)
		var pb [atomicReply]byte
		e.reply(now, f.Src, f.RequestID, noc.ClassAtomic, f.Op, 0, f.GVA, pg.version, appendAtomicReply(pb[:0], sw.res))
	}
	e.freeOwnerOp(op)
	e.stats.ReplCommits++
	e.drainRep(now, pg)
}

// drainRep runs the granted requests that waited on a page while it is not
// busy.
func (e *Engine) drainRep(now time.Duration, pg *page) {
	if pg.rep != nil && len(pg.rep.oldBackups) > 0 && e.repSynced(pg) {
		e.releaseOldBackups(now, pg)
	}
	if pg.rep != nil && pg.owner && pg.rep.settling && !e.repBusy(pg) {
		e.settle(now, pg)
		if e.pages[pg.key] != pg {
			return
		}
	}
	for pg.rep != nil && pg.owner && len(pg.rep.queue) > 0 && !e.repBusy(pg) {
		op := pg.rep.queue[0]
		pg.rep.queue = pg.rep.queue[1:]
		if !e.execute(now, op) {
			e.freeOwnerOp(op)
		}
		if e.pages[pg.key] != pg {
			return
		}
	}
}

// settling reports whether pg, owned here, is a takeover that has not
// settled (ownerRep.settling): its content is shown to nobody yet.
func (e *Engine) settling(pg *page) bool {
	return pg.owner && pg.rep != nil && pg.rep.settling
}

// holdRead keeps a ref that reached a settling takeover until it settles.
func (e *Engine) holdRead(pg *page, in noc.PortID, f *noc.Frame) {
	b, err := f.AppendTo(nil)
	if err != nil {
		e.malformed()
		return
	}
	pg.rep.reads = append(pg.rep.reads, heldMsg{in: in, frame: b})
	e.stats.Held++
}

// settle ends a takeover's settling: its backups hold the page, every
// fellow confirmed its drop, the page is not fenced. Its content is shown
// from now on: the refs that waited are served, the host's loads answered.
func (e *Engine) settle(now time.Duration, pg *page) {
	rep := pg.rep
	rep.settling = false
	held := rep.reads
	rep.reads = nil
	if e.dbg != nil {
		e.debugf(pg.key, "takeover settled at version %d epoch %d", pg.version, pg.epoch)
	}
	e.stats.ReplSettled++
	if e.cfg.Tracer != nil {
		if pt, ok := e.cfg.Tracer.(PromotionTracer); ok {
			pt.Settled(e.self, pg.key, pg.version, e.pageBytes(pg))
		}
	}
	e.wake(now, pg)
	e.replay(now, held)
}

// endReplication forgets a page's replication at its owner (the page was
// freed): its backups drop their copies, what waited goes on (rerouted).
func (e *Engine) endReplication(now time.Duration, pg *page) {
	rep := pg.rep
	if rep == nil {
		return
	}
	for _, b := range rep.backups {
		e.sendDrop(b.node, pg.key, pg.epoch)
	}
	for _, n := range rep.oldBackups {
		e.sendDrop(n, pg.key, pg.epoch)
	}
	e.releaseRep(now, pg)
}

// handOverReplication ends a page's replication at an old owner that
// committed a swap to heir: its backups keep their copies for the heir
// until the heir's own backups hold the page (the heir tells them then);
// they are promoted only if the heir dies first. Only the stand-ins the
// content named (standIns) stand in: the heir releases those and no
// other, so a backup chosen since (one lost during the swap, replaced)
// drops its copy now.
func (e *Engine) handOverReplication(now time.Duration, pg *page, heir noc.NodeID, heirInc, epoch uint64, standIns []noc.NodeID) {
	rep := pg.rep
	if rep == nil {
		return
	}
	kept := rep.backups[:0:0]
	for _, b := range rep.backups {
		if !slices.Contains(standIns, b.node) {
			e.sendDrop(b.node, pg.key, pg.epoch)
			continue
		}
		kept = append(kept, b)
		var p [handLen]byte
		binary.BigEndian.PutUint64(p[:], pg.epoch)
		binary.BigEndian.PutUint32(p[8:], uint32(heir))
		binary.BigEndian.PutUint64(p[12:], heirInc)
		f := newFrame(noc.ClassControl, OpReplicaDrop, 0, e.self, b.node, 0, pg.key, 0, p[:])
		e.sendNode(&f)
		e.stats.ReplDrops++
	}
	for _, n := range rep.oldBackups {
		e.sendDrop(n, pg.key, epoch) // never confirmed to the previous owner: ours stand in
	}
	// This node stands in too, first in rank (its backups may include the
	// heir itself): it keeps a copy until the heir's backups hold the page,
	// and takes the page back if the heir dies before that.
	list := make([]noc.NodeID, 0, 1+len(kept))
	list = append(list, e.self)
	for _, b := range kept {
		list = append(list, b.node)
	}
	e.keepStandIn(now, pg, heir, heirInc, list)
	e.releaseRep(now, pg)
}

// keepStandIn keeps a copy of pg, which this node hands over to heir, as
// a stand-in for the heir (list: the stand-ins in rank order, this node
// first). At R = 1 with durable pages it is the only one, and it stands
// in for the heir's disk: between the handover's commit and the heir's
// taking the page (its log holds nothing of a page it is acquiring), the
// page is on this node's log alone (durableStandIn).
func (e *Engine) keepStandIn(now time.Duration, pg *page, heir noc.NodeID, heirInc uint64, list []noc.NodeID) {
	old := e.copies[pg.key]
	if old != nil {
		e.dropCopy(old)
	}
	content, err := e.store.Alloc(copyKey(pg.key), pg.huge)
	if err != nil {
		// No room for the stand-in copy: the backups stand in alone.
		e.stats.ReplNoRoom++
		return
	}
	copy(content, e.pageBytes(pg))
	pr := e.pageReplies(now, pg)
	c := &backupCopy{key: pg.key, owner: e.self, ownerInc: e.inc, epoch: pg.epoch, version: pg.version, huge: pg.huge,
		content: content, attr: pg.attr, hasAttr: pg.hasAttr, backups: list, touched: now, heir: heir, heirInc: heirInc, hasHeir: true,
		replies: pr.recs, recFrom: pr.from, recKnown: true,
		term: e.split.term} // its owner, this node, touched it in this term
	if !e.split.majority {
		c.term = 0 // not confirmed in a majority (a handover commits in one)
	}
	e.copies[pg.key] = c
	e.indexCopy(c)
	e.durMark(pg.key)
	e.stats.ReplCopies++
}

// durableStandIn reports whether a handover's old owner keeps a stand-in
// copy without replication: at R = 1 with durable pages. The heir drops
// it once it owns the page (its log holds it then); the stand-in takes the
// page back only when the heir, restarted or alive, answers without it,
// never on the heir's silence (the heir's disk may hold what it
// acknowledged since).
func (e *Engine) durableStandIn() bool { return !e.replicated() && e.cfg.Durable != nil }

// releaseRep forgets a page's replication state; requests that waited on
// it follow the page (rerouted).
func (e *Engine) releaseRep(now time.Duration, pg *page) {
	rep := pg.rep
	pg.rep = nil
	defer e.replay(now, rep.reads) // refs a takeover held follow the page too
	for _, b := range rep.backups {
		e.unindexBackup(b.node, pg.key)
	}
	delete(e.attention, pg.key)
	if rep.staged != nil {
		rep.queue = append([]*ownerOp{rep.staged.op}, rep.queue...)
	}
	for _, op := range rep.queue {
		if now-op.at >= e.cfg.RequestTimeout {
			// Its requester's bound has passed (it started before the op
			// got here): nobody waits for it, and a write or atomic
			// applied now, after its requester was told the outcome is
			// unknown, would only surprise.
			e.stats.Expired++
			e.freeOwnerOp(op)
			continue
		}
		e.stats.Rerouted++
		e.reroute(now, op.in, &op.f)
		e.freeOwnerOp(op)
	}
}

// startReplication picks a page's backups and sends them its content.
func (e *Engine) startReplication(now time.Duration, pg *page) {
	if !e.replicated() {
		return
	}
	pg.rep = &ownerRep{term: e.split.term}
	e.attend(pg.key)
	e.fillBackups(now, pg)
	e.armRepl(now)
}

// fillBackups adds backups up to R−1: neighbours first, one per port in
// port order (each behind its own link), then, for a node with fewer
// live neighbours than that (a leaf, the end of a line, a node whose
// neighbours died), the nodes routing reaches beyond them, nearest first;
// reachable and not yet chosen.
func (e *Engine) fillBackups(now time.Duration, pg *page) {
	rep := pg.rep
	want := e.cfg.Replicas - 1
	add := func(n noc.NodeID) {
		if n == e.self || n == noc.BroadcastNode || slices.ContainsFunc(rep.backups, func(b backupLink) bool { return b.node == n }) {
			return
		}
		if at, ok := rep.full[n]; ok && now-at < e.cfg.HomeRefresh {
			return
		}
		if !e.routes(n) {
			return
		}
		rep.backups = append(rep.backups, backupLink{node: n})
		e.indexBackup(n, pg.key)
		e.attend(pg.key)
		e.stats.ReplBackupsChosen++
		e.sendFull(pg, len(rep.backups)-1)
	}
	for p := noc.PortID(0); p < maxPortScan && len(rep.backups) < want; p++ {
		if nb, ok := e.rt.Neighbour(p); ok {
			add(nb)
		}
	}
	for _, n := range e.farNodes() {
		if len(rep.backups) >= want {
			break
		}
		add(n)
	}
}

// routeTable is implemented by the node core: its routing state lists
// every node it reaches.
type routeTable interface{ Routing() *route.State }

// reachableNodes lists every node routing reaches, by node id.
func (e *Engine) reachableNodes() []noc.NodeID {
	rt, ok := e.rt.(routeTable)
	if !ok || rt.Routing() == nil {
		return nil
	}
	routes := rt.Routing().Routes()
	ns := make([]noc.NodeID, 0, len(routes))
	for _, r := range routes {
		ns = append(ns, r.Dst)
	}
	slices.Sort(ns)
	return ns
}

// farNodes lists the nodes routing reaches beyond this node's neighbours,
// nearest first (hops, then node id); the list is kept until routing
// changes.
func (e *Engine) farNodes() []noc.NodeID {
	rt, ok := e.rt.(routeTable)
	if !ok {
		return nil
	}
	st := rt.Routing()
	if st == nil {
		return nil
	}
	if v := st.Version(); v != e.farVersion || e.far == nil {
		routes := st.Routes()
		slices.SortFunc(routes, func(a, b route.Route) int {
			if a.Hops != b.Hops {
				return a.Hops - b.Hops
			}
			return int(a.Dst) - int(b.Dst)
		})
		e.far = make([]noc.NodeID, 0, len(routes))
		for _, r := range routes {
			if r.Hops >= 2 && r.Dst != e.self {
				e.far = append(e.far, r.Dst)
			}
		}
		e.farVersion = v
	}
	return e.far
}

// sendFull sends backup i the page's committed content (and the staged
// write on top of it).
func (e *Engine) sendFull(pg *page, i int) {
	rep := pg.rep
	b := &rep.backups[i]
	e.sendReplicate(pg, b.node, i, replFull, pg.version, 0, e.pageBytes(pg))
	e.stats.ReplFullSent++
	if rep.staged != nil {
		e.sendDelta(pg, b)
	}
}

// sendDelta sends a backup the staged write.
func (e *Engine) sendDelta(pg *page, b *backupLink) {
	sw := pg.rep.staged
	i := slices.IndexFunc(pg.rep.backups, func(x backupLink) bool { return x.node == b.node })
	e.sendReplicate(pg, b.node, i, 0, sw.version, sw.off, sw.data)
	e.stats.ReplDeltaSent++
}

func (e *Engine) sendReplicate(pg *page, to noc.NodeID, rank int, flags uint8, v gva.Version, off int, data []byte) {
	e.sendReplicateID(pg, to, 0, rank, flags, v, off, data)
}

// sendReplicateID is sendReplicate with a request id, which the backup's
// acknowledgement carries back (a confirmation after a minority, split.go).
func (e *Engine) sendReplicateID(pg *page, to noc.NodeID, id uint64, rank int, flags uint8, v gva.Version, off int, data []byte) {
	rep := pg.rep
	if pg.huge {
		flags |= replHuge
	}
	if flags&replFull != 0 && pg.hasAttr {
		flags |= replAttr // a copy taken over keeps the page's attributes (cred.go)
	}
	if st, ok := e.arb.Page(pg.key); ok && st.Pinned {
		flags |= replPinned
		if id == 0 && len(rep.pinWait) > 0 {
			id = pinBit | rep.pinSeq // its acknowledgement tells of the pin (split.go)
		}
	}
	m := replMsg{epoch: pg.epoch, ownerInc: e.inc, flags: flags, rank: rank, off: off, data: data, attr: pg.attr}
	for _, b := range rep.backups {
		m.backups = append(m.backups, b.node)
	}
	switch s := rep.staged; {
	case flags&replFull != 0:
		m.flags |= replReplies
		m.replies = appendReplies(e.repBuf[:0], e.now, e.pageReplies(e.now, pg))
	case flags&replTouch == 0 && s != nil && s.op != nil && s.version == v && e.mayRepeat(&s.op.f):
		// The write's own record.
		m.flags |= replReplies
		one := [1]carriedReply{{k: opKey{s.op.f.Src, s.op.f.RequestID},
			rec: replyRecord{at: e.now, class: s.op.f.Class, op: s.op.f.Op, version: s.version, res: s.res}}}
		m.replies = appendReplies(e.repBuf[:0], e.now, pageReplies{from: e.now, recs: one[:]})
	}
	if m.replies != nil {
		e.repBuf = m.replies[:0]
	}
	p := appendReplicate(e.pay[:0], m)
	f := newFrame(noc.ClassControl, OpReplicate, 0, e.self, to, id, pg.key, v, p)
	e.sendNode(&f)
}

func (e *Engine) sendDrop(to noc.NodeID, key gva.GVA, epoch uint64) {
	var b [dropLen]byte
	binary.BigEndian.PutUint64(b[:], epoch)
	f := newFrame(noc.ClassControl, OpReplicaDrop, 0, e.self, to, 0, key, 0, b[:])
	e.sendNode(&f)
	e.stats.ReplDrops++
}

// replMsg is a decoded OpReplicate.
type replMsg struct {
	epoch, ownerInc uint64
	flags           uint8
	rank            int
	backups         []noc.NodeID
	off             int
	data            []byte
	attr            Attr   // with replAttr
	replies         []byte // with replReplies: a records block (decodeReplies)
}

func appendReplicate(b []byte, m replMsg) []byte {
	b = binary.BigEndian.AppendUint64(b, m.epoch)
	b = binary.BigEndian.AppendUint64(b, m.ownerInc)
	b = append(b, m.flags, uint8(m.rank), uint8(len(m.backups)))
	for _, n := range m.backups {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	if m.flags&replReplies != 0 {
		b = append(b, m.replies...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(m.off))
	b = append(b, m.data...)
	if m.flags&replAttr != 0 {
		b = appendAttr(b, m.attr)
	}
	return b
}

func decodeReplicate(p []byte) (replMsg, error) {
	var m replMsg
	if len(p) < replHead {
		return m, errMalformed
	}
	m.epoch = binary.BigEndian.Uint64(p)
	m.ownerInc = binary.BigEndian.Uint64(p[8:])
	m.flags, m.rank = p[16], int(p[17])
	n := int(p[18])
	p = p[replHead:]
	if n > MaxReplicas || m.rank >= max(n, 1) || len(p) < 4*n+2 {
		return m, errMalformed
	}
	for i := range n {
		m.backups = append(m.backups, noc.NodeID(binary.BigEndian.Uint32(p[4*i:])))
	}
	p = p[4*n:]
	if m.flags&replReplies != 0 {
		size, err := repliesSize(p)
		if err != nil {
			return m, err
		}
		m.replies, p = p[:size], p[size:]
		if len(p) < 2 {
			return m, errMalformed
		}
	}
	m.off = int(binary.BigEndian.Uint16(p))
	m.data = p[2:]
	if m.flags&replAttr != 0 {
		if m.flags&replFull == 0 || len(m.data) < attrLen {
			return m, errMalformed
		}
		a, err := decodeAttr(m.data[len(m.data)-attrLen:])
		if err != nil {
			return m, err
		}
		m.attr, m.data = a, m.data[:len(m.data)-attrLen]
	}
	switch {
	case m.flags&^(replFull|replHuge|replTouch|replAttr|replPinned|replReplies) != 0 || m.flags&replFull != 0 && m.flags&replTouch != 0,
		m.flags&replTouch != 0 && m.flags&replReplies != 0:
		return m, errMalformed
	case m.flags&replFull != 0 && (m.off != 0 || len(m.data) != gva.PageSize):
		return m, errMalformed
	case m.flags&replTouch != 0 && len(m.data) != 0:
		return m, errMalformed
	case m.flags&(replFull|replTouch) == 0 && (len(m.data) == 0 || m.off+len(m.data) > gva.PageSize):
		return m, errMalformed
	}
	return m, nil
}

// handleReplicate runs at a backup.
func (e *Engine) handleReplicate(now time.Duration, f *noc.Frame) {
	m, err := decodeReplicate(f.Payload)
	if err != nil || f.Src == e.self {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	var recs pageReplies
	if m.flags&replReplies != 0 {
		if recs, err = decodeReplies(m.replies, now, key, e.recBuf[:0]); err != nil {
			e.malformed()
			return
		}
		e.recBuf = recs.recs[:0] // kept by value below
	}
	if pg := e.pages[key]; pg != nil && pg.owner {
		e.stats.Stale++ // we own it: a stale owner's frame
		e.sendDrop(f.Src, key, m.epoch)
		if e.splitRule() && pg.epoch >= m.epoch {
			// An owner fenced by a split, asking its backups to confirm:
			// this node took the page over (split.go).
			e.sendSuperseded(f.Src, key, pg.version, ownerHint{owner: e.self, inc: e.inc, epoch: pg.epoch})
		}
		return
	}
	if h, ok := e.hints[key]; ok && h.epoch > m.epoch {
		e.stats.Stale++
		if e.splitRule() {
			e.sendSuperseded(f.Src, key, 0, h)
		}
		return
	}
	c := e.copies[key]
	if c != nil && (m.epoch < c.epoch || m.epoch == c.epoch && f.Src != c.owner) {
		e.stats.Stale++
		return
	}
	needFull, stale := false, false
	switch {
	case m.flags&replFull != 0 && c != nil && m.epoch == c.epoch && m.ownerInc == c.ownerInc && !c.hasHeir && f.PageVersion < c.version:
		// A full copy its owner sent before the versions this copy holds
		// since, delayed: the same run of the owner at the same epoch
		// never takes a version back (a staged write it sent is committed
		// unless it gives the page up). Taking it regressed the copy
		// under what the owner had acknowledged (dpu-sim seed 907, 16
		// nodes, every fault, R = 2: the owner crashed, the backup took
		// the page over a version short). It is acknowledged with what
		// the copy holds; its ranks and backups, as old, are not taken.
		e.stats.Stale++
		stale = true
	case m.flags&replFull != 0:
		if c == nil {
			content, err := e.store.Alloc(copyKey(key), m.flags&replHuge != 0)
			if err != nil {
				// The capacity rule: no physical page for the copy. The
				// owner places it elsewhere.
				e.stats.ReplNoRoom++
				var b [replAckLn]byte
				binary.BigEndian.PutUint64(b[:], m.epoch)
				binary.BigEndian.PutUint64(b[8:], e.inc)
				b[16] = ackNoRoom
				a := newFrame(noc.ClassControl, OpReplicateAck, 0, e.self, f.Src, 0, key, 0, b[:])
				e.sendNode(&a)
				return
			}
			c = &backupCopy{key: key, content: content}
			e.copies[key] = c
			e.stats.ReplCopies++
		}
		c.owner, c.hasHeir = f.Src, false
		c.ownerGone, c.probeDue, c.probedAt, c.query, c.queries, c.queryAt, c.queryErr, c.goneAt = false, 0, 0, 0, 0, 0, false, 0
		c.homeSaid, c.standInDue = false, 0
		c.fellowsGone, c.fellowsProbedAt = c.fellowsGone[:0], 0
		delete(e.probing, key)
		e.indexCopy(c)
		copy(e.copyBytes(c), m.data)
		c.version, c.ownerInc, c.epoch, c.huge = f.PageVersion, m.ownerInc, m.epoch, m.flags&replHuge != 0
		if m.flags&replAttr != 0 {
			c.attr, c.hasAttr = m.attr, true
		}
		if e.dbg != nil {
			e.debugf(key, "full copy from %v epoch %d version %d rank %d of %v", f.Src, m.epoch, f.PageVersion, m.rank, m.backups)
		}
		c.replies, c.recFrom, c.recKnown = c.replies[:0], now, m.flags&replReplies != 0
		if c.recKnown {
			c.recFrom = min(recs.from, now)
			for _, r := range recs.recs {
				e.keepReply(now, c, r)
			}
		}
	case c == nil || c.epoch != m.epoch:
		needFull = true
	case m.flags&replTouch != 0:
		needFull = c.version != f.PageVersion
	case f.PageVersion == c.version+1:
		copy(e.copyBytes(c)[m.off:], m.data)
		c.version = f.PageVersion
		for _, r := range recs.recs {
			e.keepReply(now, c, r)
		}
	case f.PageVersion <= c.version:
		// a duplicate: acknowledge what we hold
	default:
		needFull = true
	}
	if c != nil && !needFull && !stale {
		e.durMark(key) // acknowledged below: on disk first
		c.restored = false
		c.rank, c.backups, c.touched, c.unreachAt, c.lostAt = m.rank, m.backups, now, 0, 0
		c.pinned = m.flags&replPinned != 0
		c.term, c.census = e.split.term, false
	}
	var b [replAckLn]byte
	binary.BigEndian.PutUint64(b[:], m.epoch)
	binary.BigEndian.PutUint64(b[8:], e.inc)
	v := gva.Version(0)
	if needFull {
		b[16] = ackNeedFull
	} else {
		v = c.version
	}
	a := newFrame(noc.ClassControl, OpReplicateAck, 0, e.self, f.Src, f.RequestID, key, v, b[:])
	e.sendNode(&a)
}

// indexCopy files a copy under the node it watches (its owner, or the heir
// it was handed to): promotion checks go by that node's reachability.
func (e *Engine) indexCopy(c *backupCopy) {
	e.unindexCopy(c)
	w := c.watched()
	if e.copiesBy[w] == nil {
		e.copiesBy[w] = map[gva.GVA]bool{}
	}
	e.copiesBy[w][c.key] = true
	c.indexed, c.indexedAt = true, w
}

func (e *Engine) unindexCopy(c *backupCopy) {
	if !c.indexed {
		return
	}
	if set := e.copiesBy[c.indexedAt]; set != nil {
		delete(set, c.key)
		if len(set) == 0 {
			delete(e.copiesBy, c.indexedAt)
		}
	}
	c.indexed = false
}

func (e *Engine) dropCopy(c *backupCopy) {
	if e.dbg != nil {
		e.debugf(c.key, "copy of owner %v epoch %d version %d dropped", c.owner, c.epoch, c.version)
	}
	e.durMark(c.key)
	delete(e.copies, c.key)
	e.unindexCopy(c)
	e.store.Release(copyKey(c.key))
}

// copyKey is the page store's key of this node's backup copy of key: the
// page's key with the highest ref index, which no page's key has (page
// keys carry none), so that a copy and a replica the host maps of the same
// page are two physical pages, both counted by the capacity rule.
func copyKey(key gva.GVA) gva.GVA { return key.WithRefIndex(^uint32(0)) }

// handleReplicateAck runs at the owner.
func (e *Engine) handleReplicateAck(now time.Duration, f *noc.Frame) {
	if len(f.Payload) != replAckLn {
		e.malformed()
		return
	}
	epoch := binary.BigEndian.Uint64(f.Payload)
	inc := binary.BigEndian.Uint64(f.Payload[8:])
	flags := f.Payload[16]
	key := f.GVA.Key()
	pg := e.pages[key]
	if pg == nil || !pg.owner || pg.rep == nil {
		e.stats.Stale++
		switch {
		case flags&ackProbe != 0 && pg != nil && pg.owner && !e.replicated():
			// A handover's stand-in (durableStandIn) whose drop was lost
			// asks the heir, which owns the page: its copy ends.
			e.sendDrop(f.Src, key, max(epoch, pg.epoch))
		case flags&ackProbe != 0 && e.durableStandIn() && e.handed[key] != nil && e.handed[key].epoch > epoch:
			// The same, the heir having handed the page on since.
			e.sendDrop(f.Src, key, e.handed[key].epoch)
		case flags&ackProbe != 0:
			if h, ok := e.hints[key]; ok && e.splitRule() && (epoch == 0 || h.epoch > epoch) && h.owner != f.Src {
				// A heir releasing its stand-ins, or a backup probing its
				// fellows before a takeover, and this node knows of a
				// takeover: the prober may have been cut off by a split
				// while it happened (split.go). Said before the answer.
				e.sendSuperseded(f.Src, key, 0, h)
			}
			if c := e.copies[key]; c != nil && c.restored && c.owner == e.self && !c.hasHeir && epoch <= c.epoch &&
				!slices.Contains(c.backups, f.Src) {
				// This node owned the page before it restarted, and its
				// durable log names the backups it had then: the prober is
				// not one of them (a backup it gave up, whose drop was lost).
				// Its copy may lack versions those backups acknowledged, so
				// it is dropped, as this node's earlier run would have
				// (durable.go).
				e.sendDrop(f.Src, key, c.epoch)
				return
			}
			if c := e.copies[key]; c != nil && c.restored && c.owner == e.self && c.hasHeir && epoch == c.epoch &&
				f.Src != e.self && slices.Contains(c.backups, f.Src) {
				// This node handed the page over before it restarted and
				// stands in for the heir (its log says so); the prober is
				// a fellow stand-in that asks this node as its owner, so
				// it missed the word of the handover before the power cut.
				// It is told again (as handOverReplication tells it), and
				// stands in for the heir too instead of taking this node's
				// restart for the end of the page's owner.
				var p [handLen]byte
				binary.BigEndian.PutUint64(p[:], c.epoch)
				binary.BigEndian.PutUint32(p[8:], uint32(c.heir))
				binary.BigEndian.PutUint64(p[12:], c.heirInc)
				d := newFrame(noc.ClassControl, OpReplicaDrop, 0, e.self, f.Src, 0, key, 0, p[:])
				e.sendNode(&d)
				e.stats.ReplDrops++
			}
			if tomb, ok := e.goneHere(key, epoch); ok {
				// This node's earlier run gave the page up at that epoch
				// or later (its durable log's tombstone): the prober's copy
				// is stale (its owner's drop was lost, then the power cut
				// came). A copy of ours, or older than the tombstone, ends.
				e.sendDrop(f.Src, key, tomb)
			}
			// Not ours: tell the prober who we are (a restarted node is a
			// later incarnation: its backups take the page over).
			var b [goneLen]byte
			binary.BigEndian.PutUint64(b[:], epoch)
			binary.BigEndian.PutUint64(b[8:], e.inc)
			if pg != nil && pg.swap != nil && !pg.swap.out {
				b[16] = goneAcquiring // taking it over right now
			}
			var held gva.Version
			if c := e.copies[key]; c != nil && c.epoch >= epoch {
				b[16] |= goneHolds // a fellow backup that still stands for the page
				held = c.version
				if c.epoch > epoch {
					b[16] |= goneLater
				}
			}
			d := newFrame(noc.ClassControl, OpReplicaDrop, 0, e.self, f.Src, 0, key, held, b[:])
			e.sendNode(&d)
		case pg == nil || !pg.owner:
			if c := e.copies[key]; c != nil && c.hasHeir && c.owner == e.self && c.epoch == epoch && slices.Contains(c.backups, f.Src) {
				// A backup's answer that crossed this node's handover:
				// that backup stands in for the heir beside this node now
				// (handOverReplication told it so), and a drop would end
				// its copy while the heir may still fail to take the page
				// (dpu-sim seed 253, ring of 4, R = 2: the heir never got
				// the commit, this node died, the page was lost).
				return
			}
			e.sendDrop(f.Src, key, epoch)
		}
		return
	}
	i := slices.IndexFunc(pg.rep.backups, func(b backupLink) bool { return b.node == f.Src })
	if i < 0 {
		// A backup we gave up, or a fellow of an earlier epoch's backup
		// asking whether we still hold its copy: we own the page, at
		// this epoch, which ends its copy.
		e.sendDrop(f.Src, key, max(epoch, pg.epoch))
		if e.splitRule() && flags&ackProbe != 0 && epoch == 0 {
			// A heir fenced by a split releasing its stand-ins: this
			// stand-in took the page over (split.go).
			e.sendSuperseded(f.Src, key, pg.version, ownerHint{owner: e.self, inc: e.inc, epoch: pg.epoch})
		}
		return
	}
	if epoch > pg.epoch {
		// An epoch this page never had here: no copy of it came from us.
		e.stats.ReplAcksRefused++
		return
	}
	if epoch != pg.epoch {
		e.stats.Stale++
		return
	}
	b := &pg.rep.backups[i]
	if top := e.topVersion(pg); f.PageVersion > top {
		// A version this owner never made (it has committed up to
		// pg.version, staged at most one more): the backup's copy is not
		// ours. Refused, never counted as held: the backup is sent the
		// whole page again.
		e.stats.ReplAcksRefused++
		b.ok, b.inc = false, inc
		e.sendFull(pg, i)
		e.attend(key)
		e.armRepl(now)
		return
	}
	if flags&ackNoRoom != 0 {
		// No room there for a copy: another node takes it.
		if pg.rep.full == nil {
			pg.rep.full = map[noc.NodeID]time.Duration{}
		}
		pg.rep.full[f.Src] = now
		pg.rep.backups = slices.Delete(pg.rep.backups, i, i+1)
		e.unindexBackup(f.Src, key)
		e.attend(key)
		e.fillBackups(now, pg)
		e.armRepl(now)
		return
	}
	if flags&ackNeedFull != 0 {
		b.ok, b.inc = false, inc
		e.sendFull(pg, i)
		e.attend(key)
		e.armRepl(now)
		return
	}
	if b.inc != inc || !b.ok || f.PageVersion > b.acked {
		b.inc, b.acked, b.ok = inc, f.PageVersion, true
	}
	if f.RequestID&checkBit != 0 {
		e.checked(now, pg, b, f.RequestID)
		return
	}
	if f.RequestID&pinBit != 0 {
		e.pinAcked(now, pg, b, f.RequestID)
	}
	e.repProgress(now, pg)
}

// topVersion is the newest version a backup of pg may hold: the staged
// write's, or the committed one.
func (e *Engine) topVersion(pg *page) gva.Version {
	if pg.rep != nil && pg.rep.staged != nil && pg.rep.staged.version > pg.version {
		return pg.rep.staged.version
	}
	return pg.version
}

// repProgress commits the staged write once every backup holds it, and
// runs what waited.
func (e *Engine) repProgress(now time.Duration, pg *page) {
	rep := pg.rep
	if rep == nil {
		return
	}
	if e.fenced(pg) {
		return // confirmed first (split.go)
	}
	if sw := rep.staged; sw != nil && len(rep.backups) > 0 {
		for _, b := range rep.backups {
			if !b.ok || b.acked < sw.version {
				return
			}
		}
		e.commitStaged(now, pg)
		return
	}
	e.drainRep(now, pg)
}

// releaseOldBackups tells the stand-ins of the handover that gave us the
// page, once our backups hold it, that their copies are no longer needed,
// and asks each whether it still keeps one (a probe: its answer without
// goneHolds confirms the drop, standInReleased). Re-sent every
// RetryInterval until each has confirmed; a stand-in routing has lost for
// FailoverGrace is taken for dead (as a lost backup is) and told once
// more, for if it ever comes back.
func (e *Engine) releaseOldBackups(now time.Duration, pg *page) {
	rep := pg.rep
	if rep.oldSent != 0 && now-rep.oldSent < e.cfg.RetryInterval {
		return
	}
	rep.oldSent = now
	left := rep.oldBackups[:0:0]
	for _, n := range rep.oldBackups {
		if !slices.ContainsFunc(rep.backups, func(b backupLink) bool { return b.node == n }) && n != e.self {
			left = append(left, n) // else one of ours: our epoch replaced its copy
		}
	}
	rep.oldBackups = e.askDrops(now, pg, left, &rep.oldUnreach)
}

// askDrops tells each of nodes to drop its copy of pg, owned here, and
// asks it whether it still keeps one (a probe with epoch 0: its answer
// without goneHolds confirms the drop, standInReleased); it returns the
// nodes still to confirm. A node routing has lost for FailoverGrace
// (unreach: since when) is taken for dead, as a lost backup is, and told
// once more for if it ever comes back, but only where this node decides
// and pg is not fenced: beyond a split it may still hold the copy and
// take the page over.
func (e *Engine) askDrops(now time.Duration, pg *page, nodes []noc.NodeID, unreach *map[noc.NodeID]time.Duration) []noc.NodeID {
	keep := nodes[:0]
	for _, n := range nodes {
		if !e.routes(n) {
			since, seen := (*unreach)[n]
			switch {
			case !seen:
				if *unreach == nil {
					*unreach = map[noc.NodeID]time.Duration{}
				}
				(*unreach)[n] = now
			case now-since >= e.cfg.FailoverGrace && (!e.decides() || e.fenced(pg)):
				e.stats.SplitHeld++ // on the other side of a split it may take the page over
			case now-since >= e.cfg.FailoverGrace:
				delete(*unreach, n)
				e.sendDrop(n, pg.key, pg.epoch)
				continue
			}
			keep = append(keep, n)
			continue
		}
		delete(*unreach, n)
		e.sendDrop(n, pg.key, pg.epoch)
		var b [replAckLn]byte
		binary.BigEndian.PutUint64(b[8:], e.inc)
		b[16] = ackProbe
		f := newFrame(noc.ClassControl, OpReplicateAck, 0, e.self, n, 0, pg.key, pg.version, b[:])
		e.sendNode(&f)
		e.stats.ReplProbes++
		keep = append(keep, n)
	}
	return keep
}

// startFreeing starts the free r of pg, replicated and owned here: its
// backups are told to drop their copies and asked to confirm; the free
// takes effect and is acknowledged once each has (freeProgress). Until
// then r is a request in flight with the request's bound, and the page
// takes no write (repBusy).
func (e *Engine) startFreeing(now time.Duration, pg *page, r *request) {
	e.track(now, r)
	rep := pg.rep
	rep.freeing = r
	rep.freeWait = rep.freeWait[:0]
	for _, b := range rep.backups {
		if b.node != e.self {
			rep.freeWait = append(rep.freeWait, b.node)
		}
	}
	rep.freeUnrch, rep.freeSent = nil, 0
	e.stats.ReplFreeWaits++
	e.freeProgress(now, pg)
	if e.pages[pg.key] == pg {
		e.attend(pg.key)
		e.armRepl(now)
	}
}

// freeProgress tells the backups a free waits for to drop their copies
// (re-sent every RetryInterval) and commits the free once none is left to
// confirm. A backup routing has lost for FailoverGrace is taken for dead,
// as a lost backup is, only where this node decides and the page is not
// fenced: beyond a split it may still hold the copy.
func (e *Engine) freeProgress(now time.Duration, pg *page) {
	rep := pg.rep
	if len(rep.freeWait) > 0 && (rep.freeSent == 0 || now-rep.freeSent >= e.cfg.RetryInterval) {
		rep.freeSent = now
		rep.freeWait = e.askDrops(now, pg, rep.freeWait, &rep.freeUnrch)
	}
	if len(rep.freeWait) == 0 {
		e.commitFree(now, pg, rep.freeing)
	}
}

// abortFreeing gives up a free whose bound ran out before its backups
// confirmed (it ends ETIMEDOUT): the page lives on, and backups that
// dropped their copies are sent the whole page again.
func (e *Engine) abortFreeing(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if pg == nil || !pg.owner || pg.rep == nil || pg.rep.freeing != r {
		return
	}
	rep := pg.rep
	rep.freeing, rep.freeWait, rep.freeUnrch, rep.freeSent = nil, nil, nil, 0
	for i := range rep.backups {
		rep.backups[i].ok = false
	}
	e.stats.ReplFreeAborts++
	e.attend(pg.key)
	e.armRepl(now)
}

// standInReleased takes a probe's answer from node n without a copy of
// the page (of any epoch) as n's confirmation that it dropped its
// stand-in copy of a page owned here; writes go on once every stand-in
// has confirmed.
func (e *Engine) standInReleased(now time.Duration, key gva.GVA, n noc.NodeID) {
	pg := e.pages[key]
	if pg == nil || !pg.owner || pg.rep == nil {
		return
	}
	if pg.rep.freeing != nil && slices.Contains(pg.rep.freeWait, n) {
		pg.rep.freeWait = slices.DeleteFunc(pg.rep.freeWait, func(x noc.NodeID) bool { return x == n })
		if len(pg.rep.freeWait) == 0 {
			e.commitFree(now, pg, pg.rep.freeing)
		}
		return
	}
	if !slices.Contains(pg.rep.oldBackups, n) {
		return
	}
	if e.dbg != nil {
		e.debugf(key, "stand-in %v dropped its copy", n)
	}
	pg.rep.oldBackups = slices.DeleteFunc(pg.rep.oldBackups, func(x noc.NodeID) bool { return x == n })
	delete(pg.rep.oldUnreach, n)
	if len(pg.rep.oldBackups) == 0 {
		e.drainRep(now, pg)
	}
}

// handleReplicaDrop runs at a backup: a plain drop from the copy's owner
// (or from the heir it was handed to) forgets the copy; a drop naming an
// heir keeps it for the heir.
func (e *Engine) handleReplicaDrop(now time.Duration, f *noc.Frame) {
	if len(f.Payload) != dropLen && len(f.Payload) != handLen && len(f.Payload) != goneLen {
		e.malformed()
		return
	}
	epoch := binary.BigEndian.Uint64(f.Payload)
	if len(f.Payload) == goneLen && epoch == 0 && f.Payload[16]&goneHolds == 0 {
		e.standInReleased(now, f.GVA.Key(), f.Src) // no copy of any epoch there
	}
	c := e.copies[f.GVA.Key()]
	if c == nil || c.epoch > epoch {
		return
	}
	if len(f.Payload) == goneLen {
		inc := binary.BigEndian.Uint64(f.Payload[8:])
		if e.dbg != nil {
			e.debugf(c.key, "probe answer from %v inc %d flags %x: copy owner %v inc %d heir %v(%v) inc %d", f.Src, inc, f.Payload[16], c.owner, c.ownerInc, c.heir, c.hasHeir, c.heirInc)
		}
		if c.census && f.Src != e.self && f.Payload[16]&goneHolds != 0 && (f.Payload[16]&goneLater != 0 || f.PageVersion > c.version) {
			// A census before a takeover from a copy of the minority
			// (tryPromote): another node holds the page at a later epoch
			// or version, one the owner chose while this copy was cut off.
			// This copy is stale: that one takes the page over.
			if e.dbg != nil {
				e.debugf(c.key, "census: %v holds a later copy (version %d, later epoch %v) than ours (version %d epoch %d): dropped", f.Src, f.PageVersion, f.Payload[16]&goneLater != 0, c.version, c.epoch)
			}
			e.dropCopy(c)
			e.stats.ReplCopiesDropped++
			e.stats.ReplCensusDropped++
			return
		}
		if f.Payload[16]&goneHolds == 0 && slices.Contains(c.backups[:min(c.rank, len(c.backups))], f.Src) &&
			!slices.Contains(c.fellowsGone, f.Src) {
			c.fellowsGone = append(c.fellowsGone, f.Src) // it will not take the page over
		}
		if c.hasHeir {
			if f.Src == c.heir && f.Payload[16]&goneHolds != 0 && e.durableStandIn() {
				// The heir keeps a copy of a later epoch (it handed the
				// page on, and stands in for its own heir, or its disk
				// kept it): this stand-in's drop was lost, the page moved
				// on past it.
				e.dropCopy(c)
				e.stats.ReplCopiesDropped++
				return
			}
			if f.Src == c.heir && (inc != c.heirInc || f.Payload[16]&goneAcquiring == 0) {
				// The heir restarted before it took the page, or lives
				// without it: either it handed the page on (the home knows)
				// or it never took it. tryPromote asks the home.
				c.ownerGone = true
				e.probing[c.key] = true
				e.stats.ReplOwnersGone++
			}
			return // else the heir is still taking the page
		}
		if c.owner != f.Src {
			return
		}
		if inc != c.ownerInc {
			c.ownerGone = true // restarted: what it owned died with it
			e.probing[c.key] = true
			e.stats.ReplOwnersGone++
			return
		}
		e.dropCopy(c) // the same run no longer owns it
		e.stats.ReplCopiesDropped++
		if now-c.touched > e.cfg.CopyLease {
			e.stats.ReplCopiesExpired++
		}
		return
	}
	if len(f.Payload) == handLen {
		if c.owner == f.Src && !c.hasHeir {
			c.heir, c.hasHeir = noc.NodeID(binary.BigEndian.Uint32(f.Payload[8:])), true
			c.heirInc = binary.BigEndian.Uint64(f.Payload[12:])
			c.unreachAt, c.lostAt = 0, 0
			// The old owner keeps a copy too and ranks first.
			c.backups = append([]noc.NodeID{f.Src}, c.backups...)
			c.rank++
			c.fellowsGone = c.fellowsGone[:0]
			e.indexCopy(c)
			e.durMark(c.key)
		}
		return
	}
	// A heir's drop names its own epoch, past the copy's. One that does
	// not is a restarted node's word about an earlier epoch it held the
	// page in (its durable log's tombstone, durable.go): it ends a copy
	// it owned, not one kept for it as the heir.
	if c.owner == f.Src || epoch > c.epoch {
		e.dropCopy(c)
		e.stats.ReplCopiesDropped++
	}
}

// armRepl keeps the replication timer running.
func (e *Engine) armRepl(now time.Duration) {
	if e.replTimer == 0 {
		e.replTimer = e.schedule(now+e.cfg.RetryInterval, timer{kind: tRepl})
	}
}

// replTick re-sends what backups have not acknowledged, replaces backups
// that routing lost, and promotes copies whose owner is gone.
func (e *Engine) replTick(now time.Duration) {
	e.replTimer = 0
	grace := e.cfg.FailoverGrace
	busy := false
	// Owner side: backups routing lost, by backup node.
	nodes := make([]noc.NodeID, 0, len(e.backedBy))
	for n := range e.backedBy {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		if e.routes(n) {
			delete(e.backupUnreach, n)
			continue
		}
		since, seen := e.backupUnreach[n]
		if !seen {
			e.backupUnreach[n] = now
			busy = true
			continue
		}
		if now-since < grace {
			busy = true
			continue
		}
		if !e.decides() {
			// A minority gives no backup up: it may have taken the page
			// over on the other side (split.go).
			e.stats.SplitHeld++
			busy = true
			continue
		}
		delete(e.backupUnreach, n)
		ks := slices.SortedFunc(maps.Keys(e.backedBy[n]), gva.Compare)
		for _, key := range ks {
			pg := e.pages[key]
			if pg == nil || pg.rep == nil {
				continue
			}
			if e.fenced(pg) {
				// Not confirmed since a minority: the lost backup may have
				// taken it over meanwhile. It stays until it answers.
				e.stats.SplitHeld++
				continue
			}
			if i := slices.IndexFunc(pg.rep.backups, func(b backupLink) bool { return b.node == n }); i >= 0 {
				e.sendDrop(n, key, pg.epoch) // if it ever comes back
				pg.rep.backups = slices.Delete(pg.rep.backups, i, i+1)
				e.unindexBackup(n, key)
				e.stats.ReplBackupsLost++
				e.attend(key)
			}
		}
	}
	// Owner side: pages with something pending (a staged write, a backup
	// to sync, too few backups).
	keys := slices.SortedFunc(maps.Keys(e.attention), gva.Compare)
	for _, key := range keys {
		pg := e.pages[key]
		if pg == nil || !pg.owner || pg.rep == nil {
			delete(e.attention, key)
			continue
		}
		rep := pg.rep
		if rep.freeing != nil {
			busy = true
			e.freeProgress(now, pg)
			continue
		}
		if len(rep.backups) < e.cfg.Replicas-1 {
			e.fillBackups(now, pg)
		}
		if e.splitRule() && e.fenced(pg) {
			e.confirmPage(now, pg)
		}
		if len(rep.pinWait) > 0 {
			e.pinProgress(now, pg)
			busy = true
		}
		if len(rep.oldBackups) > 0 && e.repSynced(pg) {
			e.releaseOldBackups(now, pg) // stand-ins yet to confirm
		}
		if !e.repBusy(pg) {
			e.drainRep(now, pg)
			// What drainRep ran may have staged a write: the page stays in
			// attention until its backups hold it (a lost delta is sent
			// again below at the next tick).
			if pg.rep != nil && len(pg.rep.backups) >= e.cfg.Replicas-1 && !e.repBusy(pg) {
				delete(e.attention, key)
			} else {
				busy = true
			}
			continue
		}
		busy = true
		for i := range rep.backups {
			b := &rep.backups[i]
			switch {
			case !b.ok || b.acked < pg.version:
				e.sendFull(pg, i)
			case rep.staged != nil && b.acked < rep.staged.version:
				e.sendDelta(pg, b)
			}
		}
	}
	// Backup side: probes due, owners found restarted.
	if len(e.probing) > 0 {
		busy = true
		for _, key := range slices.SortedFunc(maps.Keys(e.probing), gva.Compare) {
			c := e.copies[key]
			switch {
			case c == nil:
				delete(e.probing, key)
			case c.ownerGone:
				if c.goneAt == 0 {
					c.goneAt = now
				}
				if c.hasHeir && now-c.goneAt < 2*e.cfg.FailoverGrace {
					// The heir's own backups, if any, go first (their
					// failover names a newer epoch and drops this copy).
					continue
				}
				if !e.lowerRankAlive(now, c) {
					e.tryPromote(now, c) // the copy leaves e.probing when it goes
				}
			case c.probeDue == 0:
				delete(e.probing, key)
			case now >= c.probeDue:
				c.probeDue = 0
				delete(e.probing, key)
				e.probe(now, c)
			}
		}
	}
	// Backup side: copies whose owner routing lost.
	owners := make([]noc.NodeID, 0, len(e.copiesBy))
	for o := range e.copiesBy {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		if e.routes(o) {
			for key := range e.copiesBy[o] {
				e.copies[key].unreachAt = 0
			}
			continue
		}
		busy = true
		ks := make([]gva.GVA, 0, len(e.copiesBy[o]))
		for key := range e.copiesBy[o] {
			ks = append(ks, key)
		}
		slices.SortFunc(ks, gva.Compare)
		for _, key := range ks {
			c := e.copies[key]
			if c.unreachAt == 0 {
				c.unreachAt = now
			}
			if c.lostAt == 0 {
				c.lostAt = now
			}
			wait := grace
			if c.hasHeir {
				// The heir's own backups, if it had any yet, go first: their
				// failover (a newer epoch) drops this copy.
				wait = 2 * grace
			}
			if e.splitRule() {
				wait += e.cfg.SplitGrace // an owner cut off in a minority fences itself first
			}
			if now-c.unreachAt < wait {
				continue
			}
			if e.dbg != nil {
				e.debugf(key, "copy's node %v unreachable since %v (owner %v heir %v/%v)", o, c.unreachAt, c.owner, c.heir, c.hasHeir)
			}
			if !c.ownerGone && c.lostAt-c.touched > e.cfg.CopyLease {
				// The owner had stopped counting on it before it died (a
				// copy whose owner restarted since is the page's, though:
				// that run never confirms it).
				e.dropCopy(c)
				e.stats.ReplCopiesExpired++
				continue
			}
			if c.hasHeir && e.durableStandIn() {
				continue // the heir's disk may hold the page: it answers when it is back
			}
			if e.lowerRankAlive(now, c) {
				continue
			}
			e.tryPromote(now, c)
		}
	}
	if busy || len(e.backedBy) > 0 || len(e.copies) > 0 {
		e.armRepl(now)
	}
}

// probe asks a copy's owner whether it still counts on the copy.
func (e *Engine) probe(now time.Duration, c *backupCopy) {
	if now-c.probedAt < e.cfg.RetryInterval && c.probedAt != 0 {
		return
	}
	c.probedAt = now
	e.sendProbe(c, c.watched())
}

// tellStandIns tells the stand-ins of a swap this node confirmed but
// gives up as lost (its old owner failed, and its home has no word of the
// commit) that it does not take the page: the answer a probe of the heir
// would get. If the old owner did commit, they keep the page and the first
// of them alive takes it over; if it did not, they hold no heir and ignore
// it.
func (e *Engine) tellStandIns(key gva.GVA, sw *swapState) {
	var b [goneLen]byte
	binary.BigEndian.PutUint64(b[:], sw.epoch)
	binary.BigEndian.PutUint64(b[8:], e.inc)
	for _, n := range sw.oldBackups {
		if n != e.self {
			d := newFrame(noc.ClassControl, OpReplicaDrop, 0, e.self, n, 0, key, 0, b[:])
			e.sendNode(&d)
		}
	}
}

// sendProbe asks node n about c's page: an owner that counts on the copy
// ignores it; any other node answers with its incarnation and whether it
// is acquiring the page or keeps a copy of it (OpReplicaDrop, goneLen).
func (e *Engine) sendProbe(c *backupCopy, n noc.NodeID) {
	var b [replAckLn]byte
	binary.BigEndian.PutUint64(b[:], c.epoch)
	binary.BigEndian.PutUint64(b[8:], e.inc)
	b[16] = ackProbe
	f := newFrame(noc.ClassControl, OpReplicateAck, 0, e.self, n, 0, c.key, c.version, b[:])
	e.sendNode(&f)
	e.stats.ReplProbes++
}

// neighbourChanged probes the owner of every copy kept for the node
// behind a port that went down or came up: it may have restarted.
func (e *Engine) neighbourChanged(now time.Duration, nb noc.NodeID) {
	if !e.replicated() || len(e.copiesBy[nb]) == 0 {
		return
	}
	keys := make([]gva.GVA, 0, len(e.copiesBy[nb]))
	for key := range e.copiesBy[nb] {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, gva.Compare)
	for _, key := range keys {
		c := e.copies[key]
		c.probedAt = 0
		c.probeDue = now + e.cfg.RetryInterval
		e.probing[key] = true
	}
	e.armRepl(now)
}

// expireCopies probes the owner (or heir) of every copy it has not
// confirmed within CopyLease, or missed two confirmations of (run with
// the homes' refresh). The copy is dropped only on the answer of the
// same run of that node, which no longer counts on it (handleReplicaDrop):
// never for the silence alone. A node that went on without confirming
// may have died and come back as a later incarnation that holds nothing,
// while the rest of the fabric was too small to take its pages over: the
// copy is then the page's last (its answer makes the copy take the page
// over, see tryPromote).
func (e *Engine) expireCopies(now time.Duration) {
	for key, c := range e.copies {
		if c.ownerGone || c.probeDue != 0 {
			continue
		}
		if now-c.touched > min(e.cfg.CopyLease, 2*e.cfg.HomeRefresh) {
			c.probeDue = now // its owner missed a confirmation: still there?
			e.probing[key] = true
			e.armRepl(now)
		}
	}
}

// lowerRankAlive reports whether a backup ranked before this one is still
// reachable and has not answered that it lacks the copy: that one takes
// the page over. Such a node is probed (once per RetryInterval): a node
// that restarted, or dropped its copy, answers without one and stops
// holding this copy back (the first-ranked stand-in of a handover is the
// old owner, which may have restarted as fast as routing noticed).
func (e *Engine) lowerRankAlive(now time.Duration, c *backupCopy) bool {
	alive := false
	probe := c.fellowsProbedAt == 0 || now-c.fellowsProbedAt >= e.cfg.RetryInterval
	for i := 0; i < c.rank && i < len(c.backups); i++ {
		n := c.backups[i]
		if n == e.self || slices.Contains(c.fellowsGone, n) {
			continue
		}
		if !e.routes(n) {
			continue
		}
		alive = true
		if probe {
			e.sendProbe(c, n)
		}
	}
	if alive && probe {
		c.fellowsProbedAt = now
	}
	return alive
}

// promote makes this node the owner of a page whose owner died, from its
// backup copy.
func (e *Engine) promote(now time.Duration, c *backupCopy) {
	key := c.key
	pg := e.pages[key]
	var stopped *swapState
	if pg != nil && pg.swap != nil {
		sw := pg.swap
		if sw.out || sw.stage > stageGranted || sw.stage == stageGranted && sw.peer != c.watched() {
			// A transfer of the page to this node that a live owner may
			// have committed (the content came), or one granted by
			// another node: it ends first, by its own rules.
			c.queries, c.queryAt, c.query = 0, 0, 0 // ask again then: the answer may be stale
			return                                  // try again at the next tick
		}
		// This node's own acquire, not granted yet or granted by the dead
		// node before it sent the content: no owner can commit it, and
		// waiting for it to end would leave the page without an owner
		// until the request's bound. It stops here; its request is
		// answered by the page owned here once the takeover is done.
		e.cancel(sw.timer)
		pg.swap = nil
		stopped = sw
		e.stats.ReplAcquiresStopped++
	}
	if stopped != nil {
		defer func() {
			e.replay(now, stopped.held)
			if r := stopped.req; r != nil && e.reqs[r.id] == r {
				e.cancel(r.retry)
				r.retry = 0
				e.hostAcquire(now, r)
			}
		}()
	}
	if pg == nil {
		// The copy's physical page becomes the page's: its slot is given
		// back first, so that a full store still takes the page.
		held := slices.Clone(e.copyBytes(c))
		e.store.Release(copyKey(key))
		content, err := e.store.Alloc(key, c.huge)
		if err != nil {
			if c.content, err = e.store.Alloc(copyKey(key), c.huge); err == nil {
				copy(e.copyBytes(c), held)
			}
			e.stats.ReplPromoteFailed++
			return
		}
		c.content = held
		pg = &page{key: key, huge: c.huge, content: content}
		e.pages[key] = pg
	}
	if pg.has && pg.version > c.version {
		// A replica here is newer than the copy: a write was committed
		// that this backup did not hold. It cannot happen while backups
		// acknowledge before commits; keep the newer content.
		e.stats.PathAnomalies++
	} else {
		e.replaced(now, pg, c.version)
		copy(e.pageBytes(pg), e.copyBytes(c))
		pg.version = c.version
	}
	// Two past the copy's: a handover the dead owner committed without a
	// word to this backup (its heir holds c.epoch+1, a split may have kept
	// it alive) is older than this takeover, and the heir gives way
	// (split.go); a stand-in's heir's epoch was c.epoch+1 as well.
	epoch := c.epoch + 2
	pg.has, pg.owner, pg.epoch, pg.ownerNode = true, true, epoch, e.self
	e.durMark(key)
	e.ownedHere(now, pg)
	e.takeReplies(now, pg, pageReplies{from: c.recFrom, recs: c.replies}, c.recKnown)
	e.forgetCommits(key)
	if c.hasAttr {
		pg.attr, pg.hasAttr = c.attr, true
	}
	// The copy's fellows (the dead owner's other backups, or a handover's
	// other stand-ins) keep copies of the old epoch: they are told to
	// drop them as a handover's stand-ins are, and the page takes no
	// write until each confirmed it (or routing lost it for
	// FailoverGrace). The takeover's flood tells them too, but a flood
	// is sent once: a fellow it missed, not chosen as a backup here, kept
	// its copy, and once a split put this node in a minority it took the
	// page over from its copy in the majority, versions short (dpu-sim
	// seed 103, 16 nodes, every fault, R = 3).
	fellows := slices.DeleteFunc(slices.Clone(c.backups), func(n noc.NodeID) bool { return n == e.self })
	e.dropCopy(c)
	e.stats.Promotions++
	if e.dbg != nil {
		e.debugf(key, "promoted from backup at version %d epoch %d", pg.version, pg.epoch)
	}
	e.ownEntry(now, pg, noc.NoPort)
	e.arb.Own(key)
	if until := e.heldPinUntil(c); until > now {
		// The dead owner's lock stands until its pin's bound ran out
		// there: a holder cut off beyond a split may live on. The page
		// is taken over and copied again now, but takes no acquire or
		// lock before then (split.go, heldPin).
		if err := e.arb.Pin(now, key, heldPin, min(until-now, e.arb.Config().MaxPin)); err == nil {
			e.stats.SplitPinsHeld++
		}
	}
	if e.cfg.Tracer != nil {
		if pt, ok := e.cfg.Tracer.(PromotionTracer); ok {
			pt.Promoted(e.self, key, pg.version, e.pageBytes(pg))
		}
	}
	if homeOf(key) == e.self {
		rec := e.home[key]
		if rec == nil {
			rec = &homeRecord{}
			e.home[key] = rec
		}
		rec.owner, rec.ownerInc, rec.epoch, rec.freed = e.self, e.inc, pg.epoch, false
		e.durHomeMark(key)
	} else {
		// Told even when routing does not reach the home now (a cut link):
		// the notice is re-sent until the home acknowledges it, or 32
		// times. Waiting for the next HomeRefresh instead left the home
		// naming the dead owner for up to a refresh period, and a fellow
		// backup that asked it then took the page over from its stale
		// copy.
		e.notify(now, key, &notice{owner: e.self, ownerInc: e.inc, epoch: pg.epoch})
	}
	e.setHint(key, ownerHint{owner: e.self, inc: e.inc, epoch: pg.epoch})
	e.floodFailover(noc.NoPort, key, pg.version, ownerHint{owner: e.self, inc: e.inc, epoch: pg.epoch})
	e.closeFetch(key)
	e.startReplication(now, pg)
	if pg.rep != nil {
		pg.rep.oldBackups = fellows
		pg.rep.settling = true // nothing of it is shown until it settles
	}
	e.wake(now, pg)
	e.failInFlight(now, key)
}

// forgetCommits forgets the handovers of key this node committed as its
// old owner: it took the page over (a stand-in of a heir it lost), and a
// heir that comes back asking for its done (its confirmation re-sent
// after a split) must learn that the swap ended, not take the page at the
// handover's epoch beside this node.
func (e *Engine) forgetCommits(key gva.GVA) {
	for k, c := range e.commits { // order-free: each is forgotten alone
		if c.key == key {
			e.cancel(c.timer)
			delete(e.commits, k)
		}
	}
	delete(e.handed, key)
}

// maxQueries bounds the questions a backup asks a page's home before it
// takes the page over.
const maxQueries = 3

// queryBit marks the request ids of a backup's questions to a page's home
// (swap ids are host request ids, far below it).
const queryBit = 1 << 62

// tryPromote takes a page over from a dead owner unless the page's home
// says the page moved on past this copy's owner (a handover whose word
// to this backup died with its sender). It asks the home first when the
// home is another live node; without an answer after maxQueries tries, or
// with no home to ask, it takes the page over, unless under the split rule
// the copy is from the minority (touched before this node's majority term)
// and routing does not reach the home: then it waits.
func (e *Engine) tryPromote(now time.Duration, c *backupCopy) {
	if e.restoredWait(c) {
		return // reloaded from disk: the home learns its owners first (durable.go)
	}
	if !e.decides() {
		e.stats.SplitHeld++ // a minority takes nothing over (split.go)
		c.standInDue = 0    // a stand-in's wait starts again with the majority
		return
	}
	if e.splitRule() && c.term != e.split.term && c.queryTerm != e.split.term {
		// What the home said before this majority term is stale: the
		// page may have moved on beyond a split, where the home may have
		// been too. Ask again, and ask every fellow backup first: one
		// that was in the majority knows of a takeover there and answers
		// with it, which drops this copy (split.go).
		c.queries, c.queryAt, c.query, c.queryErr, c.queryTerm = 0, 0, 0, false, e.split.term
		c.fellowsAskedAt = now
		asked := c.backups
		if c.census = !e.noRiskSince(c.term); c.census {
			// The minority this copy was cut off in could have left a
			// majority deciding without it: its owner may have given it
			// up and chosen another backup it does not know of, and
			// committed writes there (a home that restarted has no
			// record to say so). Every node routing reaches is asked; one
			// that holds a later copy drops this one (handleReplicaDrop).
			asked = e.reachableNodes()
		}
		for _, n := range asked {
			if n != e.self {
				if e.routes(n) {
					e.sendProbe(c, n)
				}
			}
		}
		if c.census {
			e.stats.ReplCensuses++
		}
	}
	if e.splitRule() && c.queryTerm == e.split.term && now-c.fellowsAskedAt < 2*e.cfg.RetryInterval {
		return // their answers may still come
	}
	if e.splitRule() && c.term != e.split.term && !e.noRiskSince(c.term) && !c.ownerGone {
		// A copy from the minority whose owner (or heir) is cut off, not
		// known dead: while this node was in the minority that owner, in
		// the majority, may have taken it for dead and committed writes
		// with backups that are out of reach now, with them (its home
		// knows nothing of the give-up, nor does a census of this side).
		// It takes the page over only once that node answers as a later
		// incarnation; until then the page waits (dpu-sim seed 1952, 13
		// nodes, line, every fault, R = 2: a handover's stand-ins, the
		// page's home among them, cut off, given up by the heir, which
		// wrote on with its own backup; both then fell into a minority
		// and the stand-ins, in the next majority, took the page over
		// from the handover's version).
		e.stats.SplitHeld++
		return
	}
	want := c.epoch
	if c.hasHeir {
		want++
	}
	if hint, ok := e.hints[c.key]; ok && hint.epoch > want && hint.owner != e.self {
		// A takeover past this copy's owner (or heir) was heard of: the
		// page lives on there (a split kept this copy from its word).
		e.dropCopy(c)
		e.stats.ReplCopiesDropped++
		return
	}
	h := homeOf(c.key)
	if h == e.self {
		if e.movedOn(c, e.home[c.key]) {
			e.dropCopy(c)
			e.stats.ReplCopiesDropped++
			return
		}
		c.homeSaid = c.homeSaid || e.home[c.key] != nil
		if e.standInMayPromote(now, c) {
			e.promote(now, c)
		}
		return
	}
	reach := e.routes(h)
	if e.splitRule() && c.term != e.split.term && !reach && !e.noRiskSince(c.term) {
		// A copy from the minority with no home to ask takes nothing
		// over: its fellows may all have been in the minority with it,
		// and the page may have moved on in a majority that gave this
		// copy up (a heir that gave up its lost stand-ins and committed
		// without them, fenced since: dpu-sim seed 141, 13 nodes, line).
		// Unless no majority could have formed without this node since
		// the copy was confirmed: the nodes out of its reach were too few
		// (half the fabric down, the page's home among them: a ring of 4
		// at R = 2 whose owner and then new owner died held the last copy
		// back for ever).
		e.stats.SplitHeld++
		return
	}
	if !reach || c.queries >= maxQueries {
		if e.standInMayPromote(now, c) {
			e.promote(now, c)
		}
		return
	}
	wait := 2 * e.cfg.RetryInterval
	if c.queryErr {
		// The home has no record (it restarted lately, say): the page's
		// owner, if any lives, tells it within a refresh period.
		wait = e.cfg.HomeRefresh
	}
	if c.queryAt != 0 && now-c.queryAt < wait {
		return // an answer may still come
	}
	e.nextReq++
	c.query, c.queryAt = queryBit|e.nextReq, now
	c.queries++
	f := newFrame(noc.ClassControl, OpOwnerQuery, 0, e.self, h, c.query, c.key, 0, nil)
	e.sendNode(&f)
	e.stats.ReplQueries++
}

// standInMayPromote reports whether a copy may be promoted now, once
// everything else allowed it. A stand-in (a copy kept for a heir) whose
// home gave no record to go by (the home restarted, or routing cannot
// reach it) waits HomeRefresh + 2 FailoverGrace more: the heir's own
// backups, if it had any, hold the page at a later epoch and decide on
// the same silence of the home, maybe later than this node (its questions
// are asked once per HomeRefresh); their takeover's flood (OpFailover)
// drops this copy. Without the wait both took the page over: two owners
// (dpu-sim seed 197, 16 nodes, every fault, R = 2: the heir, the page's
// home, died before its stand-in confirmed the drop and came back; the
// stand-in, probing the unconfirmed copy's heir, found it restarted).
//
// With the home's word it still waits 2 FailoverGrace from the moment
// everything else allowed it: the heir's backups were held by the same
// things (a minority, most often, until enough nodes came back) and
// decide at the same moment; their flood must reach this node first
// (dpu-sim seed 117, 16 nodes, every fault, R = 3: the stand-in and the
// heir's backup took the page over in the same tick as the fabric's
// majority came back).
func (e *Engine) standInMayPromote(now time.Duration, c *backupCopy) bool {
	if !c.hasHeir {
		return true
	}
	if c.standInDue == 0 {
		wait := 2 * e.cfg.FailoverGrace
		if !c.homeSaid {
			wait += e.cfg.HomeRefresh
		}
		c.standInDue = now + wait
	}
	return now >= c.standInDue
}

// movedOn reports whether a home record names a later owner than the one
// this copy stands for (its owner's epoch, or the heir's: one more).
func (e *Engine) movedOn(c *backupCopy, rec *homeRecord) bool {
	if rec == nil {
		return false
	}
	want := c.epoch
	if c.hasHeir {
		want++
	}
	return rec.freed || rec.epoch > want
}

// queryAnswered acts on the home's answer to a backup's question: a
// record, or an errno (EAGAIN: the home restarted lately and is still
// learning its records; EHOSTDOWN: it has none, and every live owner must
// have told it: no node owns the page).
func (e *Engine) queryAnswered(now time.Duration, c *backupCopy, rec *homeRecord, errno syscall.Errno) {
	c.query = 0
	if rec == nil && errno == syscall.EAGAIN {
		c.queryErr = true // ask again later, or take it over after maxQueries
		return
	}
	if rec == nil {
		c.queries = maxQueries // no owner on record: take it over at the next tick
		return
	}
	if e.movedOn(c, rec) {
		if e.dbg != nil {
			e.debugf(c.key, "home says the page moved on (epoch %d, owner %v): copy of epoch %d dropped", rec.epoch, rec.owner, c.epoch)
		}
		e.dropCopy(c)
		e.stats.ReplCopiesDropped++
		return
	}
	c.homeSaid = true
	c.queries = maxQueries // decided: take it over at the next tick
}

// PromotionTracer is implemented by tracers that check failovers: a backup
// took a page over at version v with content (Promoted), and the takeover
// settled (Settled: its backups hold the page, its fellows dropped theirs;
// from then on its content is shown, and v is committed).
type PromotionTracer interface {
	Promoted(self noc.NodeID, key gva.GVA, v gva.Version, content []byte)
	Settled(self noc.NodeID, key gva.GVA, v gva.Version, content []byte)
}

func (e *Engine) setHint(key gva.GVA, h ownerHint) {
	if _, ok := e.hints[key]; !ok {
		if len(e.hintOrder) >= maxHints {
			delete(e.hints, e.hintOrder[0])
			e.hintOrder = e.hintOrder[1:]
		}
		e.hintOrder = append(e.hintOrder, key)
	}
	e.hints[key] = h
}

// floodFailover sends OpFailover on every port but except.
func (e *Engine) floodFailover(except noc.PortID, key gva.GVA, v gva.Version, h ownerHint) {
	var b [failLen]byte
	binary.BigEndian.PutUint32(b[:], uint32(h.owner))
	binary.BigEndian.PutUint64(b[4:], h.inc)
	binary.BigEndian.PutUint64(b[12:], h.epoch)
	f := newFrame(noc.ClassControl, OpFailover, 0, h.owner, noc.BroadcastNode, 0, key, v, b[:])
	for p := noc.PortID(0); p < maxPortScan; p++ {
		if p == except {
			continue
		}
		if _, ok := e.rt.Neighbour(p); ok {
			e.sendPort(p, &f)
		}
	}
}

// handleFailover keeps the newest failover of a page as the first guess of
// its owner and passes it on once.
func (e *Engine) handleFailover(now time.Duration, in noc.PortID, f *noc.Frame) {
	if len(f.Payload) != failLen {
		e.malformed()
		return
	}
	h := ownerHint{
		owner: noc.NodeID(binary.BigEndian.Uint32(f.Payload)),
		inc:   binary.BigEndian.Uint64(f.Payload[4:]),
		epoch: binary.BigEndian.Uint64(f.Payload[12:]),
	}
	key := f.GVA.Key()
	if pg := e.pages[key]; pg != nil && e.yields(pg, h, f.PageVersion, f.Src == h.owner) {
		e.abdicate(now, pg, h) // taken over past this node, or while it was fenced (split.go)
	} else if pg != nil && pg.owner && pg.swap == nil && f.Src == h.owner && h.owner != e.self && h.epoch <= pg.epoch {
		// Another owner says it owns the page, at this node's epoch or an
		// earlier one, and this node keeps it: that one is told so, and
		// gives way.
		e.sendSuperseded(h.owner, key, pg.version, ownerHint{owner: e.self, inc: e.inc, epoch: pg.epoch})
	} else if pg != nil && e.splitRule() && pg.swap != nil && !pg.swap.out && pg.swap.stage >= stageCommitting && pg.swap.epoch < h.epoch {
		// Our transfer's old owner lives beyond a split and its backups
		// took the page over past the epoch it gave us: its done, re-sent
		// when the halves join, must not make us a second owner.
		if e.dbg != nil {
			e.debugf(key, "gives its swap of epoch %d up: %v took the page over at epoch %d", pg.swap.epoch, h.owner, h.epoch)
		}
		e.stats.SwapsLost++
		e.revertIn(now, pg)
	}
	if old, ok := e.hints[key]; ok && old.epoch >= h.epoch {
		return
	}
	e.setHint(key, h)
	if c := e.copies[key]; c != nil && c.epoch < h.epoch && !(c.hasHeir && c.heir == h.owner && c.heirInc == h.inc) {
		// a copy of an epoch that ended (a stand-in for the very owner
		// named stays until that owner's backups hold the page)
		e.dropCopy(c)
		e.stats.ReplCopiesDropped++
	}
	if homeOf(key) == e.self {
		if rec := e.home[key]; rec == nil || rec.epoch < h.epoch {
			e.home[key] = &homeRecord{owner: h.owner, ownerInc: h.inc, epoch: h.epoch}
			e.durHomeMark(key)
		}
	}
	if pg := e.pages[key]; pg != nil && !pg.owner && pg.swap == nil {
		pg.ownerNode = h.owner
	}
	if f.Dst == noc.BroadcastNode {
		e.floodFailover(in, key, f.PageVersion, h)
	}
	e.failInFlight(now, key)
}

// failInFlight sends this node's host writes and atomics in flight for a
// page that just failed over again, at once, to the node that took it
// over: their copies went to an owner that died. The new owner answers a
// copy the dead one applied from the reply records that came with its
// backup copy, and applies one it has no record of only if those records
// cover the request's life (resend.go); otherwise it answers "outcome
// unknown" (ETIMEDOUT). A request an owner already answered "outcome
// unknown" ends so now.
func (e *Engine) failInFlight(now time.Duration, key gva.GVA) {
	var ids []uint64
	for id, r := range e.reqs {
		if r.hr.Op.writes() && r.key == key && !r.waiting {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := e.reqs[id]
		if r == nil {
			continue
		}
		if r.live == 0 && !r.orphaned {
			continue // none of its copies is out: it waits for its retry
		}
		if r.unknown || now-r.start >= e.cfg.RequestTimeout {
			e.stats.ReplFailedInFlight++
			e.completeErr(now, r, syscall.ETIMEDOUT, "the page's owner failed and a backup took the page over: outcome unknown")
			continue
		}
		// The copies out went to the dead owner: none of them will be
		// answered, and the next copy is marked re-sent.
		r.live, r.orphaned = 0, true
		e.stats.ReplResentInFlight++
		e.cancel(r.retry)
		r.retry, r.resendArmed = 0, true
		e.retry(now, r)
	}
}

// hintOwner returns the owner a failover named for key, if routing
// reaches it.
func (e *Engine) hintOwner(key gva.GVA) (noc.NodeID, bool) {
	h, ok := e.hints[key]
	if !ok || h.owner == e.self {
		return 0, false
	}
	if !e.routes(h.owner) {
		return 0, false
	}
	return h.owner, true
}

// touchBackups tells every backup of every page owned here that the owner
// still counts on its copy (run with the homes' refresh): a copy not
// touched within Config.CopyLease asks its owner (expireCopies).
func (e *Engine) touchBackups(keys []gva.GVA) {
	for _, key := range keys {
		pg := e.pages[key]
		if pg == nil || !pg.owner || pg.rep == nil {
			continue
		}
		for i, b := range pg.rep.backups {
			e.sendReplicate(pg, b.node, i, replTouch, pg.version, 0, nil)
			e.stats.ReplTouches++
		}
	}
}

// standIns lists the nodes that keep a page for its next owner until the
// next owner's backups hold it: this node (the old owner), then its
// backups. Nil when the page is not replicated.
func (e *Engine) standIns(key gva.GVA) []noc.NodeID {
	bs := e.Backups(key)
	if bs == nil {
		return nil
	}
	return append([]noc.NodeID{e.self}, bs...)
}

// Backing reports, for checkers, whether this node keeps a backup copy of
// key, and its version.
func (e *Engine) Backing(key gva.GVA) (gva.Version, bool) {
	c := e.copies[key]
	if c == nil {
		return 0, false
	}
	return c.version, true
}

// CopyFor returns, for checkers, the version of this node's backup copy of
// key and the node (with its incarnation) whose death promotes it: the
// copy's owner, or the heir it stands in for (standIn).
func (e *Engine) CopyFor(key gva.GVA) (v gva.Version, watched noc.NodeID, inc uint64, standIn, ok bool) {
	c := e.copies[key]
	if c == nil {
		return 0, 0, 0, false, false
	}
	if c.hasHeir {
		return c.version, c.heir, c.heirInc, true, true
	}
	return c.version, c.owner, c.ownerInc, false, true
}

// Backups returns the nodes a page owned here is replicated to (nil if it
// is not owned here or not replicated).
func (e *Engine) Backups(key gva.GVA) []noc.NodeID {
	pg := e.pages[key]
	if pg == nil || !pg.owner || pg.rep == nil {
		return nil
	}
	out := make([]noc.NodeID, 0, len(pg.rep.backups))
	for _, b := range pg.rep.backups {
		out = append(out, b.node)
	}
	return out
}
