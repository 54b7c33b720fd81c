package coherence

import (
	"encoding/binary"
	"errors"
	"syscall"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// ownerOp is a request at the owner waiting for (or being given) the
// arbiter's decision: a write-through, an atomic or an acquire.
type ownerOp struct {
	f   noc.Frame // header; Payload aliases buf
	buf []byte
	in  noc.PortID
	at  time.Duration // when it reached this owner
}

// atOwner runs an up-going request that reached the page's owner.
func (e *Engine) atOwner(now time.Duration, in noc.PortID, f *noc.Frame, pg *page) {
	key := pg.key
	if f.Class == noc.ClassLoad {
		if e.settling(pg) {
			// A takeover shows nothing before it settles (replica.go):
			// the host's loads wait on the page, a ref here.
			if in != noc.LocalPort {
				e.holdRead(pg, in, f)
			}
			return
		}
		ent := e.ownerEntry(now, pg)
		if in == noc.LocalPort {
			e.wake(now, pg)
			return
		}
		if ent == nil || !e.vouched(now, in, f, pg, ent) {
			return
		}
		e.noteAccess(now, pg, f.Src, false)
		if _, rf, _ := decodeRef(f.Payload); rf&refGraft != 0 {
			e.sendGraft(ent, f.Src, f.RequestID, key, pg.version, e.self, pg.huge, e.pageBytes(pg))
			return
		}
		ent.Down, _ = ent.Down.Add(in)
		e.sendContent(ent, in, f.RequestID, pg.version, e.self, pg.huge, e.pageBytes(pg))
		return
	}
	if f.Class == noc.ClassControl && f.Src == e.self && in != noc.LocalPort {
		e.stats.PathAnomalies++ // our own acquire came back to us
		return
	}
	if !e.vouched(now, in, f, pg, nil) {
		return
	}
	if f.Class != noc.ClassControl && e.duplicate(now, pg, f) {
		return
	}
	k := opKey{f.Src, f.RequestID}
	if e.ownerOps[k] != nil {
		e.stats.Duplicates++
		return
	}
	if f.Class != noc.ClassControl {
		e.noteAccess(now, pg, f.Src, true)
	}
	op := e.newOwnerOp(now, in, f)
	e.ownerOps[k] = op
	req := arbiter.Request{ID: f.RequestID, Page: key, Priority: f.Priority, Port: in, Node: f.Src}
	switch f.Class {
	case noc.ClassStore:
		req.Kind = arbiter.KindWrite
	case noc.ClassAtomic:
		req.Kind = arbiter.KindAtomic
	case noc.ClassControl:
		req.Kind = arbiter.KindAcquire
		if a, err := decodeAcquire(f.Payload); err == nil {
			req.Losses, req.WaitStart = a.losses, time.Duration(a.waitStart)
		}
	}
	if ans, imm := e.arb.Submit(now, req); imm {
		e.answers = append(e.answers, ans)
	}
	e.processAnswers(now)
	if f.Class != noc.ClassControl && e.cfg.Placement.Mode == PlacementAuto {
		e.considerPlacement(now, pg)
	}
}

func (e *Engine) newOwnerOp(now time.Duration, in noc.PortID, f *noc.Frame) *ownerOp {
	var op *ownerOp
	if n := len(e.opFree); n > 0 {
		op = e.opFree[n-1]
		e.opFree = e.opFree[:n-1]
	} else {
		op = &ownerOp{}
	}
	op.f = *f
	op.buf = append(op.buf[:0], f.Payload...)
	op.f.Payload = op.buf
	op.f.Contents = nil
	op.in, op.at = in, now
	return op
}

func (e *Engine) freeOwnerOp(op *ownerOp) {
	if len(e.opFree) < 256 && cap(op.buf) <= 256 {
		e.opFree = append(e.opFree, op)
	}
}

// ownerEntry returns the owner's path cache entry, re-creating it if it was
// ever lost.
func (e *Engine) ownerEntry(now time.Duration, pg *page) *pathcache.Entry {
	ent, ok := e.cache.Get(pg.key, now)
	if ok {
		return ent
	}
	ent, err := e.upsert(now, pg.key)
	if err != nil {
		return nil
	}
	ent.Owner, ent.Up, ent.Huge, ent.Version = true, noc.NoPort, pg.huge, pg.version
	ent.Attr, ent.HasAttr = pg.attr, pg.hasAttr
	return ent
}

// advanceArbiter runs the arbiter's ticks and timers.
func (e *Engine) advanceArbiter(now time.Duration) {
	ans, faults := e.arb.Advance(now)
	e.answers = append(e.answers, ans...)
	for _, fr := range faults {
		if fr.Holder == heldPin {
			continue // a dead owner's lock, kept past a takeover, ran out
		}
		e.stats.HostFaults++
		e.event(Event{Kind: EventHostFault, GVA: fr.Page, Holder: uint64(fr.Holder), Fault: fr, At: now})
	}
	e.processAnswers(now)
}

func (e *Engine) copyAnswers(ans []arbiter.Answer) { e.answers = append(e.answers, ans...) }

// processAnswers acts on the arbiter's answers queued in e.answers, in
// order, including answers that acting on them produces.
func (e *Engine) processAnswers(now time.Duration) {
	if e.answering {
		return
	}
	e.answering = true
	for i := 0; i < len(e.answers); i++ {
		e.onAnswer(now, e.answers[i])
	}
	e.answers = e.answers[:0]
	e.answering = false
}

func (e *Engine) onAnswer(now time.Duration, a arbiter.Answer) {
	k := opKey{a.Request.Node, a.Request.ID}
	op := e.ownerOps[k]
	if op == nil || a.Outcome == arbiter.OutcomeQueued {
		return
	}
	delete(e.ownerOps, k)
	switch a.Outcome {
	case arbiter.OutcomeGrant:
		if e.execute(now, op) {
			return // kept: staged, or waiting behind a staged write
		}
	case arbiter.OutcomeDeny:
		switch a.Reason {
		case arbiter.ReasonMoved, arbiter.ReasonNotOwner:
			e.stats.Rerouted++
			e.reroute(now, op.in, &op.f)
		default:
			e.opFail(now, op, syscall.EBUSY)
		}
	default:
		if a.Reason == arbiter.ReasonHostFault {
			e.opFail(now, op, syscall.EOWNERDEAD)
		} else {
			e.opFail(now, op, syscall.EINVAL)
		}
	}
	e.freeOwnerOp(op)
}

// reroute sends on a request that waited at this node while the page
// moved: it may now leave by the port it came in by (the flip turned it
// into our way up), which is no sign of a broken branch.
func (e *Engine) reroute(now time.Duration, in noc.PortID, f *noc.Frame) {
	e.rerouting = true
	e.handleUp(now, in, f)
	e.rerouting = false
}

// opFail answers an owner-side request with an error: an acquire gets a
// deny, the others an error reply.
func (e *Engine) opFail(now time.Duration, op *ownerOp, errno syscall.Errno) {
	if op.f.Class == noc.ClassControl && op.f.Src != e.self {
		var b [errnoLen]byte
		binary.BigEndian.PutUint32(b[:], uint32(errno))
		f := newFrame(noc.ClassControl, OpDeny, 0, e.self, op.f.Src, op.f.RequestID, op.f.GVA, 0, b[:])
		e.sendNode(&f)
		return
	}
	e.fail(now, &op.f, errno)
}

// execute carries out a granted request at the owner. It reports whether
// it kept op (a replicated page stages writes until its backups hold them,
// see replica.go); otherwise the caller frees op.
func (e *Engine) execute(now time.Duration, op *ownerOp) bool {
	f := &op.f
	pg := e.pages[f.GVA.Key()]
	if pg == nil || !pg.owner {
		e.reroute(now, op.in, f)
		return false
	}
	if e.gate(now, pg, op) {
		return true
	}
	switch f.Class {
	case noc.ClassStore:
		s, err := decodeStore(f.GVA, f.Payload)
		if err != nil {
			e.opFail(now, op, syscall.EINVAL)
			return false
		}
		off := int(f.GVA.Offset())
		e.applyWrite(now, pg, off, s.data)
		e.stats.Writes++
		e.remember(now, pg, f, pg.version, atomicResult{})
		e.reply(now, f.Src, f.RequestID, noc.ClassStore, OpStore, 0, f.GVA, pg.version, nil)
	case noc.ClassAtomic:
		a, err := decodeAtomic(f.Op, f.GVA, f.Payload)
		if err != nil {
			e.opFail(now, op, syscall.EINVAL)
			return false
		}
		off := int(f.GVA.Offset())
		cur := binary.LittleEndian.Uint64(e.pageBytes(pg)[off:])
		res := atomicResult{prev: cur}
		nv := cur + a.operand
		if f.Op == OpCAS {
			nv = a.operand
			res.swapped = cur == a.expected
		} else {
			res.swapped = true
		}
		if res.swapped {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], nv)
			e.applyWrite(now, pg, off, b[:])
		}
		e.stats.Atomics++
		e.remember(now, pg, f, pg.version, res)
		var pb [atomicReply]byte
		e.reply(now, f.Src, f.RequestID, noc.ClassAtomic, f.Op, 0, f.GVA, pg.version, appendAtomicReply(pb[:0], res))
	case noc.ClassControl:
		if op.in == noc.LocalPort {
			e.grantLocal(now, pg, f.RequestID)
			return false
		}
		e.startSwapOut(now, pg, op)
	}
	return false
}

// applyWrite applies a write at the owner: next version, then propagation
// down every live branch.
func (e *Engine) applyWrite(now time.Duration, pg *page, off int, data []byte) {
	if !pg.owner || off < 0 || off+len(data) > len(e.pageBytes(pg)) {
		e.broken(now, "write of %d bytes at %d applied to %v: owner=%v, %d bytes", len(data), off, pg.key, pg.owner, len(e.pageBytes(pg)))
	}
	copy(e.pageBytes(pg)[off:], data)
	pg.version++
	e.durMark(pg.key)
	if e.cfg.Tracer != nil {
		e.cfg.Tracer.Applied(e.self, pg.key, pg.version, off, data)
	}
	update := len(data) <= e.cfg.UpdateThreshold
	if pg.maps > 0 {
		// the host maps the primary: it is told of every version, as the
		// replicas' hosts are (a write of its own too; it may know it)
		if update {
			e.event(Event{Kind: EventUpdated, GVA: pg.key, Version: pg.version, At: now, Offset: off, Data: data})
		} else {
			e.event(Event{Kind: EventInvalidated, GVA: pg.key, Version: pg.version, At: now})
		}
	}
	ent := e.ownerEntry(now, pg)
	if ent == nil {
		return
	}
	ent.Version = pg.version
	fl := noc.FlagPath
	if pg.huge {
		fl |= noc.FlagHuge
	}
	var f noc.Frame
	if update {
		f = newFrame(noc.ClassStore, OpUpdate, fl, e.self, noc.BroadcastNode, 0, pg.key.WithOffset(uint16(off)), pg.version, data)
	} else {
		f = newFrame(noc.ClassStore, OpInvalidate, fl, e.self, noc.BroadcastNode, 0, pg.key, pg.version, nil)
	}
	for p := range ent.Down.All() {
		if p == noc.LocalPort {
			continue
		}
		e.sendPort(p, &f)
		if update {
			e.stats.UpdatesSent++
		} else {
			e.stats.InvalidatesSent++
		}
	}
}

// grantLocal ends a local acquire or lock at the owner.
func (e *Engine) grantLocal(now time.Duration, pg *page, id uint64) {
	r := e.reqs[id]
	if r == nil {
		return
	}
	if r.hr.Op == HostLock {
		if err := e.arb.Pin(now, pg.key, arbiter.HolderID(r.hr.Holder), e.cfg.PinBound); err != nil {
			if errors.Is(err, arbiter.ErrPinned) || errors.Is(err, arbiter.ErrSwapping) {
				e.retryLater(now, r, syscall.EBUSY)
				return
			}
			e.completeErr(now, r, syscall.EINVAL, err.Error())
			return
		}
		e.stats.Locks++
		e.lockPinned(now, pg, r)
		return
	}
	e.complete(now, r, Completion{Version: pg.version})
}

// hostUnlock lowers the caller's pin (unlock), or ends its claim (release).
func (e *Engine) hostUnlock(now time.Duration, r *request) {
	pg := e.pages[r.key]
	if pg == nil || !pg.owner {
		e.completeErr(now, r, syscall.EPERM, "not owned here")
		return
	}
	if r.hr.Op == HostRelease {
		st, ok := e.arb.Page(r.key)
		if !ok || !st.Pinned || st.Holder != arbiter.HolderID(r.hr.Holder) {
			e.complete(now, r, Completion{Version: pg.version})
			return
		}
	}
	ans, err := e.arb.Unpin(now, r.key, arbiter.HolderID(r.hr.Holder))
	if err != nil {
		e.completeErr(now, r, syscall.EPERM, err.Error())
		return
	}
	e.copyAnswers(ans)
	e.unpinned(pg)
	e.stats.Unlocks++
	e.complete(now, r, Completion{Version: pg.version})
	e.processAnswers(now)
}
