package coherence

import (
	"encoding/binary"
	"syscall"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// Stages of a swap at the acquirer.
const (
	stageAcquiring  = 1 // acquire sent, no answer yet
	stageGranted    = 2 // granted: the replica is locked, path messages wait here
	stageCommitting = 3 // content installed and confirmed, waiting for done
	stageQuerying   = 4 // the old owner failed or went silent: asking the home whether it committed
)

// swapState is an ownership transfer in progress, at the old owner (out) or
// at the acquirer.
type swapState struct {
	out     bool
	id      uint64     // the acquirer's request id: names the swap with the acquirer's node
	seq     uint64     // the owner's number for this attempt
	peer    noc.NodeID // out: the acquirer; in: the owner that granted
	peerInc uint64
	route   []byte // out: the acquire's route, this node's arrival port last
	version gva.Version
	epoch   uint64 // the ownership epoch the page gets
	timer   arbiter.TimerID
	stage   uint8
	// acquirer only
	lock     bool
	holder   uint64
	prio     uint8
	req      *request
	held     []heldMsg
	upBroken bool
	giveUp   time.Duration
	// oldBackups: the old owner's backups, told to drop their copies once
	// ours hold the page (replicas > 1)
	oldBackups []noc.NodeID
	// out only: the stand-ins the content named (this node, then its
	// backups when it sent it): those the acquirer will release
	standIns []noc.NodeID
	// in only: the page's reply records that came with its content
	// (hasReplies: the old owner sent them).
	replies    pageReplies
	hasReplies bool
	// placed: a placement acquire (placement.go), at the acquirer
	placed bool
}

// heldMsg is a path message that reached the acquirer during its swap.
type heldMsg struct {
	in    noc.PortID
	frame []byte
}

// hold parks an up-going message at the acquirer until its swap ends.
func (e *Engine) hold(pg *page, in noc.PortID, f *noc.Frame) {
	b, err := f.AppendTo(nil)
	if err != nil {
		e.malformed()
		return
	}
	pg.swap.held = append(pg.swap.held, heldMsg{in: in, frame: b})
	e.stats.Held++
}

// replay delivers held messages as if they arrived now.
func (e *Engine) replay(now time.Duration, held []heldMsg) {
	for _, h := range held {
		var f noc.Frame
		if err := f.Decode(h.frame); err != nil {
			continue
		}
		e.handleUp(now, h.in, &f)
	}
}

// hostAcquire takes ownership (acquire) or ownership and the pin (lock) of
// a mapped page.
func (e *Engine) hostAcquire(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if pg == nil || (!pg.owner && pg.maps == 0) {
		e.completeErr(now, r, syscall.EINVAL, "page not mapped (ref it first)")
		return
	}
	lock := r.hr.Op == HostLock
	if pg.owner {
		if pg.swap != nil {
			e.retryLater(now, r, syscall.EBUSY) // being handed over right now
			return
		}
		if !lock {
			e.complete(now, r, Completion{Version: pg.version})
			return
		}
		e.sendAcquire(now, pg, r) // the local arbiter orders it with the others
		return
	}
	if sw := pg.swap; sw != nil {
		if sw.req != r || sw.stage != stageAcquiring {
			if sw.req != r {
				e.retryLater(now, r, syscall.EBUSY) // another acquire of this node is under way
			}
			return
		}
	} else {
		pg.swap = &swapState{id: r.id, req: r, stage: stageAcquiring, lock: lock, holder: r.hr.Holder, prio: r.hr.Priority, placed: r.placed}
	}
	e.sendAcquire(now, pg, r)
	// A lost acquire (its link went down) is sent again.
	e.cancel(r.retry)
	r.retry = e.schedule(now+e.jitter(max(4*e.cfg.RetryInterval, 2*e.cfg.SwapTimeout)), timer{kind: tRetry, id: r.id})
}

func (e *Engine) sendAcquire(now time.Duration, pg *page, r *request) {
	var fl uint8
	if r.hr.Op == HostLock {
		fl = acquireLock
	}
	if r.placed {
		fl |= acquirePlace
	}
	p := appendAcquire(e.hostPay[:0], acquireReq{cred: r.hr.Cred, flags: fl, losses: r.losses, waitStart: int64(r.start), inc: e.inc})
	f := newFrame(noc.ClassControl, OpAcquire, noc.FlagPath, e.self, e.guessOwner(r.key), r.id, r.key, 0, p)
	f.Priority = r.hr.Priority
	e.stats.Acquires++
	e.handleUp(now, noc.LocalPort, &f)
}

// startSwapOut begins handing a page over to a granted acquirer: grant,
// then the single content transfer.
func (e *Engine) startSwapOut(now time.Duration, pg *page, op *ownerOp) {
	a, err := decodeAcquire(op.f.Payload)
	switch {
	case err != nil:
		e.refuseGrant(now, pg, op, syscall.EINVAL)
		return
	case now < pg.settleUntil:
		e.refuseGrant(now, pg, op, syscall.EBUSY) // the last swap's route is not settled yet
		return
	case a.flags&acquirePlace != 0 && !e.placeAllowed(now, pg, op.f.Src):
		e.stats.PlaceRefused++
		e.refuseGrant(now, pg, op, syscall.EBUSY) // placement no longer names the acquirer
		return
	}
	route := append([]byte(nil), a.route...)
	route = binary.BigEndian.AppendUint16(route, uint16(op.in))
	e.swapSeq++
	sw := &swapState{out: true, id: op.f.RequestID, seq: e.swapSeq, peer: op.f.Src, peerInc: a.inc, route: route,
		version: pg.version, epoch: pg.epoch + 1}
	pg.swap = sw
	var gb [grantLen]byte
	f := newFrame(noc.ClassControl, OpGrant, 0, e.self, sw.peer, sw.id, pg.key, pg.version,
		appendGrant(gb[:0], grantMsg{ownerInc: e.inc, epoch: sw.epoch, seq: sw.seq}))
	e.sendNode(&f)
	var fl noc.Flags
	var df uint8
	if pg.huge {
		fl, df = noc.FlagHuge, dataHuge
	}
	if pg.hasAttr {
		df |= dataAttr // attributes travel with ownership
	}
	df |= dataReplies // and so do the reply records (resend.go)
	recs := appendReplies(nil, now, e.pageReplies(now, pg))
	sw.standIns = e.standIns(pg.key)
	b := appendData(e.pay[:0], dataMsg{epoch: sw.epoch, seq: sw.seq, flags: df, attr: pg.attr, content: e.pageBytes(pg), replies: recs, backups: sw.standIns})
	f = newFrame(noc.ClassControl, OpData, fl, e.self, sw.peer, sw.id, pg.key, pg.version, b)
	e.sendNode(&f)
	sw.timer = e.schedule(now+e.cfg.SwapTimeout, timer{kind: tSwapOut, key: pg.key})
	e.stats.SwapsStarted++
}

// refuseGrant denies an acquire the arbiter granted: the page is idle again.
func (e *Engine) refuseGrant(now time.Duration, pg *page, op *ownerOp, errno syscall.Errno) {
	if ans, err := e.arb.SwapAbort(now, pg.key); err == nil {
		e.copyAnswers(ans)
	}
	e.opFail(now, op, errno)
}

// swapIn finds the acquirer-side swap a frame answers.
func (e *Engine) swapIn(f *noc.Frame) (*page, *swapState) {
	pg := e.pages[f.GVA.Key()]
	if pg == nil || pg.swap == nil || pg.swap.out || pg.swap.id != f.RequestID {
		return nil, nil
	}
	return pg, pg.swap
}

// refuse tells a granting owner that this node does not take the page
// (swap attempt seq).
func (e *Engine) refuse(f *noc.Frame, seq uint64) {
	e.stats.SwapsRefused++
	var b [dataAckLen]byte
	a := newFrame(noc.ClassControl, OpDataAck, noc.FlagError, e.self, f.Src, f.RequestID, f.GVA.Key(), f.PageVersion,
		appendDataAck(b[:0], dataAckMsg{inc: e.inc, seq: seq}))
	e.sendNode(&a)
}

func (e *Engine) handleGrant(now time.Duration, f *noc.Frame) {
	g, err := decodeGrant(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	pg, sw := e.swapIn(f)
	if sw == nil || sw.stage != stageAcquiring || sw.req == nil || pg.has && pg.version > f.PageVersion {
		// Not (or no longer) acquiring, or a grant older than our replica.
		e.refuse(f, g.seq)
		return
	}
	sw.stage, sw.peer, sw.peerInc, sw.version, sw.epoch, sw.seq = stageGranted, f.Src, g.ownerInc, f.PageVersion, g.epoch, g.seq
	e.cancel(sw.req.retry)
	sw.req.retry = 0
	sw.timer = e.schedule(now+2*e.cfg.SwapTimeout, timer{kind: tSwapIn, key: pg.key})
	if ent, ok := e.cache.Peek(pg.key); ok {
		e.syncReplica(ent, pg)
	}
}

func (e *Engine) handleDeny(now time.Duration, f *noc.Frame) {
	errno, err := decodeErrno(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	pg, sw := e.swapIn(f)
	if sw == nil || sw.stage != stageAcquiring {
		e.stats.Stale++
		return
	}
	r := sw.req
	pg.swap = nil
	switch {
	case r != nil && r.placed:
		e.complete(now, r, Completion{}) // a placement acquire is not retried
	case r != nil:
		e.requestFailed(now, r, errno)
	}
}

func (e *Engine) handleData(now time.Duration, f *noc.Frame) {
	d, err := decodeData(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	var recs pageReplies
	if d.flags&dataReplies != 0 {
		if recs, err = decodeReplies(d.replies, now, f.GVA.Key(), nil); err != nil {
			e.malformed()
			return
		}
	}
	pg, sw := e.swapIn(f)
	if sw == nil || sw.stage != stageGranted || sw.peer != f.Src || sw.seq != d.seq || sw.version != f.PageVersion {
		e.refuse(f, d.seq)
		return
	}
	sw.replies, sw.hasReplies = recs, d.flags&dataReplies != 0
	if !pg.has || pg.version != f.PageVersion {
		e.replaced(now, pg, f.PageVersion)
		e.advanced(pg, f.PageVersion)
	}
	if !(bugsCompiled && e.cfg.Bug == BugSwapStaleContent && pg.has) {
		copy(e.pageBytes(pg), d.content)
	}
	pg.has, pg.version, pg.huge = true, f.PageVersion, d.flags&dataHuge != 0
	if d.flags&dataAttr != 0 {
		pg.attr, pg.hasAttr = d.attr, true
	}
	sw.epoch = d.epoch
	sw.oldBackups = append(sw.oldBackups[:0], d.backups...)
	// The entry's version stays what came down the tree: becomeOwner
	// compares it with the content's.
	sw.stage = stageCommitting
	sw.giveUp = now + e.cfg.SwapGiveUp
	e.sendDataAck(pg, sw)
	e.cancel(sw.timer)
	sw.timer = e.schedule(now+2*e.cfg.RetryInterval, timer{kind: tSwapIn, key: pg.key})
}

func (e *Engine) sendDataAck(pg *page, sw *swapState) {
	var b [dataAckLen]byte
	f := newFrame(noc.ClassControl, OpDataAck, 0, e.self, sw.peer, sw.id, pg.key, pg.version,
		appendDataAck(b[:0], dataAckMsg{inc: e.inc, ownerInc: sw.peerInc, seq: sw.seq}))
	e.sendNode(&f)
}

// swapInTimer re-sends the confirmation, or gives the swap up.
func (e *Engine) swapInTimer(now time.Duration, pg *page) {
	sw := pg.swap
	switch {
	case sw.stage == stageCommitting && now < sw.giveUp:
		e.sendDataAck(pg, sw)
		sw.timer = e.schedule(now+e.jitter(2*e.cfg.RetryInterval), timer{kind: tSwapIn, key: pg.key})
	case sw.stage == stageCommitting, sw.stage == stageQuerying && now < sw.giveUp:
		e.queryHome(now, pg) // the old owner is silent: ask its home
	case sw.stage == stageQuerying:
		e.stats.SwapsLost++
		e.tellStandIns(pg.key, sw)
		e.revertIn(now, pg)
	default:
		e.revertIn(now, pg)
	}
}

// handleDataAck runs at the old owner: commit, refusal, or a re-sent
// confirmation of a swap already decided.
func (e *Engine) handleDataAck(now time.Duration, f *noc.Frame) {
	m, err := decodeDataAck(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	if e.dbg != nil {
		e.debugf(key, "data ack from %v seq=%d flags=%x", f.Src, m.seq, f.Flags)
	}
	pg := e.pages[key]
	var sw *swapState
	if pg != nil && pg.swap != nil && pg.swap.out && pg.swap.id == f.RequestID && pg.swap.peer == f.Src && pg.swap.seq == m.seq {
		sw = pg.swap
	}
	if f.Flags&noc.FlagError != 0 {
		if sw != nil {
			e.abortOut(now, pg)
		}
		return
	}
	switch {
	case sw != nil && m.ownerInc == e.inc:
		e.commitOut(now, pg, m.inc)
	case e.commits[opKey{f.Src, f.RequestID}] != nil && e.commits[opKey{f.Src, f.RequestID}].seq == m.seq:
		c := e.commits[opKey{f.Src, f.RequestID}]
		var b [doneHead]byte
		d := newFrame(noc.ClassControl, OpDone, 0, e.self, f.Src, f.RequestID, c.key, c.ver,
			appendDone(b[:0], doneMsg{flags: doneRouted | doneBroken, seq: c.seq}))
		e.sendNode(&d)
		e.stats.DoneResent++
	default:
		e.sendAbort(f.Src, f.RequestID, key, m.seq)
	}
}

func (e *Engine) sendAbort(dst noc.NodeID, id uint64, key gva.GVA, seq uint64) {
	var b [abortLen]byte
	binary.BigEndian.PutUint64(b[:], seq)
	binary.BigEndian.PutUint64(b[8:], e.inc)
	a := newFrame(noc.ClassControl, OpAbort, 0, e.self, dst, id, key, 0, b[:])
	e.sendNode(&a)
}

// commitOut is the old owner's commit: the page now belongs to the
// acquirer. The old owner's entry flips (its up port leads to the new
// owner), its primary becomes a replica, the path's entries flip as the
// done travels down the acquire's route.
func (e *Engine) commitOut(now time.Duration, pg *page, peerInc uint64) {
	if e.dbg != nil {
		e.debugf(pg.key, "commit to %v", pg.swap.peer)
	}
	sw := pg.swap
	key := pg.key
	if !pg.owner || sw == nil || !sw.out || sw.epoch != pg.epoch+1 {
		e.broken(now, "commit of %v to a new owner: owner=%v swap=%+v epoch=%d", key, pg.owner, sw, pg.epoch)
	}
	e.cancel(sw.timer)
	e.handOverReplication(now, pg, sw.peer, peerInc, sw.epoch, sw.standIns)
	if e.durableStandIn() {
		e.keepStandIn(now, pg, sw.peer, peerInc, []noc.NodeID{e.self})
	}
	ans, err := e.arb.SwapDone(now, key)
	if err == nil {
		e.copyAnswers(ans)
	}
	n := len(sw.route) / 2
	toward := routePort(sw.route, n-1)
	ent := e.ownerEntry(now, pg)
	pg.owner, pg.swap, pg.ownerNode, pg.epoch = false, nil, sw.peer, sw.epoch
	e.durMark(key)
	pg.recKeys, pg.haveCut = nil, false // the records went with the page
	switch h := homeOf(key); {
	case h == e.self:
		if rec := e.home[key]; rec != nil && sw.epoch > rec.epoch {
			rec.owner, rec.ownerInc, rec.epoch = sw.peer, peerInc, sw.epoch
			e.durHomeMark(key)
		}
	case h != sw.peer:
		// Tell the home now: if the acquirer fails before it takes the
		// page, the home's record makes later requests end with EHOSTDOWN
		// at once.
		e.notify(now, key, &notice{owner: sw.peer, ownerInc: peerInc, epoch: sw.epoch})
	}
	k := opKey{sw.peer, sw.id}
	if old := e.commits[k]; old != nil {
		e.cancel(old.timer)
	}
	e.commits[k] = &commitRecord{key: key, peer: sw.peer, inc: peerInc, ver: pg.version, seq: sw.seq, epoch: sw.epoch,
		timer: e.schedule(now+e.cfg.CommitTTL, timer{kind: tCommit, node: sw.peer, id: sw.id})}
	e.handed[key] = e.commits[k]
	b := appendDone(e.pay[:0], doneMsg{seq: sw.seq, route: sw.route[:2*(n-1)]})
	d := newFrame(noc.ClassControl, OpDone, noc.FlagPath, e.self, sw.peer, sw.id, key, pg.version, b)
	e.sendPort(toward, &d)
	e.stats.SwapsCommitted++
	e.event(Event{Kind: EventOwnershipLost, GVA: key, Version: pg.version, At: now})
	if ent != nil {
		ent.Owner, ent.Up = false, toward
		ent.Down = ent.Down.Remove(toward)
		if pg.maps > 0 {
			ent.Down, _ = ent.Down.Add(noc.LocalPort)
		}
		ent.Version = pg.version
		e.syncReplica(ent, pg)
		if _, live := e.rt.Neighbour(toward); !live {
			// The acquire's last link went down since it came: the done
			// is lost on it and nothing would reset an entry turned
			// toward it. Our branch re-refs; the acquirer learns of the
			// commit from its re-sent confirmation.
			e.stats.FlipsCut++
			e.resetEntry(now, ent)
		}
	}
	if pg.maps == 0 {
		e.store.Release(key)
		delete(e.pages, key)
	} else {
		e.noteMove(now, pg, MoveOwner)
	}
	e.processAnswers(now) // queued requests follow the page (ReasonMoved)
	if ent, ok := e.cache.Peek(key); ok {
		e.prune(now, ent)
	}
}

// abortOut calls a swap off at the old owner: it stays the owner.
func (e *Engine) abortOut(now time.Duration, pg *page) {
	if e.dbg != nil {
		e.debugf(pg.key, "abort out to %v", pg.swap.peer)
	}
	sw := pg.swap
	e.cancel(sw.timer)
	pg.swap = nil
	if ans, err := e.arb.SwapAbort(now, pg.key); err == nil {
		e.copyAnswers(ans)
	}
	e.sendAbort(sw.peer, sw.id, pg.key, sw.seq)
	e.stats.SwapsAborted++
	e.processAnswers(now)
}

func (e *Engine) handleAbort(now time.Duration, f *noc.Frame) {
	seq, inc, err := decodeAbort(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	pg, sw := e.swapIn(f)
	if sw == nil || sw.stage < stageGranted || sw.peer != f.Src || (sw.seq != seq && inc == sw.peerInc) {
		e.stats.Stale++
		return
	}
	if sw.stage >= stageCommitting && inc != sw.peerInc {
		// The old owner restarted after we confirmed: it may have
		// committed before it failed. Its home knows if it did.
		e.queryHome(now, pg)
		return
	}
	e.revertIn(now, pg)
}

// queryHome asks the page's home whether the old owner committed the swap
// before it failed (it tells the home at its commit).
func (e *Engine) queryHome(now time.Duration, pg *page) {
	sw := pg.swap
	if sw.stage != stageQuerying {
		sw.stage = stageQuerying
		sw.giveUp = now + max(e.cfg.SwapGiveUp/2, 4*e.cfg.RetryInterval)
	}
	e.cancel(sw.timer)
	if h := homeOf(pg.key); h == e.self {
		e.settleQuery(now, pg, e.home[pg.key])
		return
	}
	f := newFrame(noc.ClassControl, OpOwnerQuery, 0, e.self, homeOf(pg.key), sw.id, pg.key, 0, nil)
	e.sendNode(&f)
	sw.timer = e.schedule(now+e.jitter(2*e.cfg.RetryInterval), timer{kind: tSwapIn, key: pg.key})
}

// settleQuery ends a swap whose old owner failed: ours if the home's
// record says the old owner committed it to us, otherwise lost with it.
func (e *Engine) settleQuery(now time.Duration, pg *page, rec *homeRecord) {
	sw := pg.swap
	if rec != nil && rec.owner == e.self && rec.ownerInc == e.inc && rec.epoch == sw.epoch {
		e.stats.SwapsRecovered++
		e.becomeOwner(now, pg, noc.NoPort)
		return
	}
	e.stats.SwapsLost++
	e.tellStandIns(pg.key, sw)
	e.revertIn(now, pg)
}

func (e *Engine) handleOwnerQuery(now time.Duration, f *noc.Frame) {
	key := f.GVA.Key()
	if f.Flags&noc.FlagReply == 0 {
		if len(f.Payload) != 0 {
			e.malformed()
			return
		}
		rec := e.home[key]
		if rec == nil || homeOf(key) != e.self {
			errno := syscall.EHOSTDOWN
			if homeOf(key) == e.self {
				errno = e.homeAnswer()
				if f.RequestID&queryBit != 0 && e.staleAtHome(key) {
					e.noteCopyAsked(now, key)
				}
			}
			var b [errnoLen]byte
			binary.BigEndian.PutUint32(b[:], uint32(errno))
			a := newFrame(noc.ClassControl, OpOwnerQuery, noc.FlagReply|noc.FlagError, e.self, f.Src, f.RequestID, key, 0, b[:])
			e.sendNode(&a)
			return
		}
		var b [movedLen]byte
		a := newFrame(noc.ClassControl, OpOwnerQuery, noc.FlagReply, e.self, f.Src, f.RequestID, key, 0,
			appendMoved(b[:0], movedMsg{owner: rec.owner, ownerInc: rec.ownerInc, epoch: rec.epoch}))
		e.sendNode(&a)
		return
	}
	var rec *homeRecord
	var errno syscall.Errno
	if f.Flags&noc.FlagError != 0 {
		var err error
		if errno, err = decodeErrno(f.Payload); err != nil {
			e.malformed()
			return
		}
	} else {
		m, err := decodeMoved(f.Payload)
		if err != nil {
			e.malformed()
			return
		}
		rec = &homeRecord{owner: m.owner, ownerInc: m.ownerInc, epoch: m.epoch}
	}
	if c := e.copies[key]; c != nil && c.query != 0 && c.query == f.RequestID {
		e.queryAnswered(now, c, rec, errno)
		return
	}
	pg, sw := e.swapIn(f)
	if sw == nil || sw.stage != stageQuerying || errno == syscall.EAGAIN {
		e.stats.Stale++ // (a home still learning its records: asked again)
		return
	}
	e.settleQuery(now, pg, rec)
}

// revertIn ends a swap that did not happen at the acquirer: the replica is
// ordinary again, held messages go on toward the owner, the request
// retries.
func (e *Engine) revertIn(now time.Duration, pg *page) {
	if e.dbg != nil {
		e.debugf(pg.key, "revert in")
	}
	sw := pg.swap
	e.cancel(sw.timer)
	pg.swap = nil
	if ent, ok := e.cache.Peek(pg.key); ok {
		e.syncReplica(ent, pg)
	}
	e.replay(now, sw.held)
	if r := sw.req; r != nil && r.placed {
		e.complete(now, r, Completion{}) // a placement acquire is not retried
	} else if r != nil {
		r.losses++
		e.retryLater(now, r, syscall.EBUSY)
	}
	if len(pg.waiters) > 0 {
		e.sendRef(now, pg, pg.waiters[0].id, pg.waiters[0].hr.Cred, pg.seen)
	}
}

// handleDone flips an entry on the acquire's route, or, at the acquirer,
// makes it the owner.
func (e *Engine) handleDone(now time.Duration, in noc.PortID, f *noc.Frame) {
	d, err := decodeDone(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	path := f.Flags&noc.FlagPath != 0
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "done from %v in=%d path=%v route=%d flags=%x seq=%d", f.Src, in, path, len(d.route)/2, d.flags, d.seq)
	}
	if path && len(d.route) > 0 {
		e.flip(now, in, f, d)
		return
	}
	pg, sw := e.swapIn(f)
	if sw == nil || sw.stage != stageCommitting || sw.peer != f.Src || sw.seq != d.seq {
		if pg := e.pages[f.GVA.Key()]; path && pg != nil && pg.owner &&
			pg.doneSwap == (opKey{f.Src, f.RequestID}) && pg.doneSeq == d.seq {
			if d.flags&doneBroken != 0 {
				pg.settleUntil = 0 // it came: the route is settled
				return
			}
			e.lateGraft(now, pg, in, f.PageVersion)
			return
		}
		e.stats.Stale++
		if path && d.flags&doneBroken == 0 {
			// The sender turned its entry toward this node for a swap it
			// does not have (the acquirer was an earlier incarnation of
			// this node, or gave the swap up): it counts on us as its way
			// up and we are not the owner. Left so, its entry and ours
			// (grafted under it since) would make a cycle no request
			// leaves. Its side re-refs.
			e.detachSender(now, in, f.GVA.Key())
		}
		return
	}
	graft := noc.NoPort
	if path && d.flags&doneBroken == 0 {
		graft = in
	}
	e.becomeOwner(now, pg, graft)
	if !path {
		// The done that travels the route may still come and flip the
		// entries on it: the page must not move on before it does (or
		// before it must have been lost with a link).
		pg.settleUntil = now + e.cfg.SwapGiveUp
	}
}

// flip turns an entry on the acquire's route around as the done passes:
// its up port now leads toward the acquirer, the port toward the old owner
// becomes a down port (if the sender flipped too).
func (e *Engine) flip(now time.Duration, in noc.PortID, f *noc.Frame, d doneMsg) {
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "flip in=%d flags=%x", in, d.flags)
	}
	n := len(d.route) / 2
	next := routePort(d.route, n-1)
	_, live := e.rt.Neighbour(next)
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "flip next=%d live=%v", next, live)
	}
	senderFlipped := d.flags&doneBroken == 0
	ent, ok := e.cache.Peek(f.GVA.Key())
	flipped := ok && !ent.Owner && ent.Up == in
	if next == in {
		// A U-turn: the acquire came back the way it went (it waited at an
		// old owner that sent it on up its flipped path). Nothing to turn
		// here; the next node may count us as a branch if we lead to it.
		ent = nil
	}
	switch {
	case next == in:
	case !live:
		// The route's next link is down: the done goes no further, and an
		// entry turned toward that link would lead nowhere (its port-down
		// has passed: nothing would reset it). Our branch, and the
		// sender's, which now counts on us as its way up, leave the tree
		// and re-ref.
		e.stats.FlipsCut++
		if flipped {
			e.resetEntry(now, ent)
		}
		if senderFlipped {
			e.detachSender(now, in, f.GVA.Key())
		}
		return
	case flipped:
		ent.Up = next
		ent.Down = ent.Down.Remove(next)
		if senderFlipped {
			ent.Down, _ = ent.Down.Add(in)
		}
		e.stats.Flips++
	case senderFlipped:
		// The sender now counts on us as its way up; we are not on its
		// path, so its side must re-ref.
		e.detachSender(now, in, f.GVA.Key())
	}
	var fl uint8
	if !flipped {
		fl = doneBroken
	}
	b := appendDone(e.pay[:0], doneMsg{flags: fl, seq: d.seq, route: d.route[:2*(n-1)]})
	g := *f
	g.Hops++
	g.Payload = b
	e.sendPort(next, &g)
	if flipped && ent != nil {
		e.prune(now, ent)
	}
}

// detachSender detaches the side of a done's sender that turned its entry
// toward this node, which is not on its path: it re-refs, and it is no
// longer a branch here either (a detached node resets its entry and sends
// no unref).
func (e *Engine) detachSender(now time.Duration, in noc.PortID, key gva.GVA) {
	x := newFrame(noc.ClassLoad, OpDetach, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, 0, nil)
	e.sendPort(in, &x)
	e.stats.Detaches++
	if ent, ok := e.cache.Peek(key); ok && ent.Down.Has(in) {
		ent.Down = ent.Down.Remove(in)
		if fe := e.fetches[key]; fe != nil {
			fe.ports = fe.ports.Remove(in)
		}
		e.prune(now, ent)
	}
}

// becomeOwner completes a swap at the acquirer.
func (e *Engine) becomeOwner(now time.Duration, pg *page, graft noc.PortID) {
	if e.dbg != nil {
		e.debugf(pg.key, "become owner graft=%d", graft)
	}
	sw := pg.swap
	key := pg.key
	if pg.owner || sw == nil || sw.out {
		e.broken(now, "%v becomes owned here: owner=%v swap=%+v", key, pg.owner, sw)
	}
	e.cancel(sw.timer)
	pg.swap = nil
	pg.owner, pg.epoch, pg.ownerNode = true, sw.epoch, e.self
	e.durMark(pg.key)
	e.ownedHere(now, pg)
	if sw.placed {
		e.placedOwner(now, pg)
	}
	pg.doneSwap, pg.doneSeq = opKey{sw.peer, sw.id}, sw.seq
	e.takeReplies(now, pg, sw.replies, sw.hasReplies)
	ent := e.ownEntry(now, pg, graft)
	e.arb.Own(key)
	e.startReplication(now, pg)
	if pg.rep != nil {
		pg.rep.oldBackups = sw.oldBackups
	}
	if e.durableStandIn() {
		// The old owner's stand-in copy (its log held the page while
		// ours did not): ours holds it now, before the drop leaves.
		e.sendDrop(sw.peer, key, sw.epoch)
	}
	e.stats.SwapsCompleted++
	if homeOf(key) == e.self {
		if rec := e.home[key]; rec != nil && sw.epoch > rec.epoch {
			rec.owner, rec.ownerInc, rec.epoch, rec.freed = e.self, e.inc, sw.epoch, false
			e.durHomeMark(key)
		}
	}
	if ent != nil {
		e.deliver(now, key, ent, noc.NoPort, pg.version, e.self, pg.huge, e.pageBytes(pg))
	}
	e.closeFetch(key)
	if r := sw.req; r != nil {
		if sw.lock {
			if err := e.arb.Pin(now, key, arbiter.HolderID(sw.holder), e.cfg.PinBound); err != nil {
				e.completeErr(now, r, syscall.EBUSY, err.Error())
			} else {
				e.stats.Locks++
				e.lockPinned(now, pg, r)
			}
		} else {
			e.complete(now, r, Completion{Version: pg.version})
		}
	}
	e.wake(now, pg)
	e.replay(now, sw.held)
}

// lateGraft grafts the branch of a done that travelled the route but
// arrived after a re-sent, routed done had already ended the swap. The
// branch may have missed the writes made since: it is invalidated to the
// current version.
func (e *Engine) lateGraft(now time.Duration, pg *page, in noc.PortID, v gva.Version) {
	pg.settleUntil = 0
	ent := e.ownerEntry(now, pg)
	if ent == nil {
		return
	}
	ent.Down, _ = ent.Down.Add(in)
	e.stats.LateGrafts++
	if pg.version > v {
		fl := noc.FlagPath
		if pg.huge {
			fl |= noc.FlagHuge
		}
		f := newFrame(noc.ClassStore, OpInvalidate, fl, e.self, noc.BroadcastNode, 0, pg.key, pg.version, nil)
		e.sendPort(in, &f)
		e.stats.InvalidatesSent++
	}
}

// notify starts telling key's home who owns the page now.
func (e *Engine) notify(now time.Duration, key gva.GVA, n *notice) {
	if old := e.notices[key]; old != nil {
		e.cancel(old.timer)
	}
	e.notices[key] = n
	e.sendNotice(now, key, n)
}

// sendNotice tells the page's home who owns it (or that it was freed).
func (e *Engine) sendNotice(now time.Duration, key gva.GVA, n *notice) {
	if n.tries >= 32 {
		delete(e.notices, key)
		e.stats.NoticesLost++
		return
	}
	n.tries++
	var b [movedLen]byte
	binary.BigEndian.PutUint32(b[:], uint32(n.owner))
	binary.BigEndian.PutUint64(b[4:], n.ownerInc)
	binary.BigEndian.PutUint64(b[12:], n.epoch)
	f := newFrame(noc.ClassControl, OpOwnerMoved, 0, e.self, homeOf(key), n.epoch, key, 0, b[:])
	e.sendNode(&f)
	n.timer = e.schedule(now+e.jitter(e.cfg.RetryInterval<<min(n.tries, 3)), timer{kind: tNotice, key: key})
}

func (e *Engine) handleOwnerMoved(now time.Duration, f *noc.Frame) {
	m, err := decodeMoved(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	if e.dbg != nil {
		e.debugf(key, "owner moved from %v: owner %v epoch %d", f.Src, m.owner, m.epoch)
	}
	if homeOf(key) == e.self {
		e.durHomeMark(key) // the record below may change
	}
	if rec := e.home[key]; rec == nil && homeOf(key) == e.self && m.owner != noc.BroadcastNode {
		// A home that restarted learns its record again from the owner.
		e.home[key] = &homeRecord{owner: m.owner, ownerInc: m.ownerInc, epoch: m.epoch}
		if m.hasAttr && f.Src == m.owner {
			e.home[key].recordAttr(m.attr) // and the page's attributes
		}
	} else if rec != nil && !rec.freed && !rec.hasAttr && m.hasAttr && f.Src == m.owner && m.owner == rec.owner {
		rec.recordAttr(m.attr) // a record learned from a notice: the owner's refresh brings the attributes
	}
	if rec := e.home[key]; rec != nil && m.epoch > rec.epoch {
		rec.epoch = m.epoch
		if m.owner == noc.BroadcastNode {
			rec.freed = true
		} else {
			rec.owner, rec.ownerInc, rec.freed = m.owner, m.ownerInc, false
		}
	} else if rec != nil && m.epoch < rec.epoch && m.owner == f.Src && rec.owner != f.Src && !rec.freed {
		// An owner of an earlier epoch says it owns the page (a backup
		// whose copy outlived its epoch took it over): it gives way to
		// the owner the record names.
		e.sendSuperseded(f.Src, key, 0, ownerHint{owner: rec.owner, inc: rec.ownerInc, epoch: rec.epoch})
	}
	if f.RequestID != 0 { // periodic refreshes are not acknowledged
		a := newFrame(noc.ClassControl, OpOwnerMovedAck, 0, e.self, f.Src, f.RequestID, key, 0, nil)
		e.sendNode(&a)
	}
}

func (e *Engine) handleOwnerMovedAck(f *noc.Frame) {
	key := f.GVA.Key()
	if n := e.notices[key]; n != nil && n.epoch == f.RequestID {
		e.cancel(n.timer)
		delete(e.notices, key)
	}
}

// ownEntry makes this node's path-cache entry of pg the owner's, at pg's
// version, when pg's content has just become this node's (a transfer, a
// backup's promotion). Updates up to that version still on their way down
// to this node are dropped now that it owns the page; a tree below it that
// was not sent them is invalidated to the content's version. graft, unless
// NoPort, joins the tree below. It returns the entry (nil when the cache
// had no room).
func (e *Engine) ownEntry(now time.Duration, pg *page, graft noc.PortID) *pathcache.Entry {
	key := pg.key
	ent, ok := e.cache.Peek(key)
	if !ok {
		ent, _ = e.upsert(now, key)
	}
	if ent == nil {
		return nil
	}
	behind := ent.Version < pg.version
	ent.Owner, ent.Up, ent.Huge = true, noc.NoPort, pg.huge
	if pg.hasAttr {
		ent.Attr, ent.HasAttr = pg.attr, true
	}
	ent.Down = ent.Down.Remove(noc.LocalPort)
	if behind {
		fl := noc.FlagPath
		if pg.huge {
			fl |= noc.FlagHuge
		}
		f := newFrame(noc.ClassStore, OpInvalidate, fl, e.self, noc.BroadcastNode, 0, key, pg.version, nil)
		for p := range ent.Down.All() {
			e.sendPort(p, &f)
			e.stats.InvalidatesSent++
		}
	}
	if graft != noc.NoPort {
		ent.Down, _ = ent.Down.Add(graft)
	}
	ent.Version = pg.version
	e.syncReplica(ent, pg)
	return ent
}
