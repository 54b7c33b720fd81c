package coherence

import (
	"slices"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Re-sent writes and atomics, and the owner's replies to them.
//
// A write or atomic travels hop by hop; a link that goes down drops what it
// had queued or in flight, and nothing tells the requester. So the
// requester sends it again, with the same request id, every
// Config.ResendInterval (doubling, jittered) and whenever its node's
// routing changes, until it is answered or Config.RequestTimeout after it
// started. A re-sent frame is marked (header version 1). The owner
// recognises a request it already holds (waiting for the arbiter, staged
// for its backups, or queued behind them) and drops the copy; one it
// already answered is answered again from its reply records, so an atomic
// is never applied twice. A re-sent request that the owner has no record
// of, at an owner whose records do not cover the request's lifetime (it
// took the page lately, or forgot records for room), may have been applied
// elsewhere: it is answered "outcome unknown" (ETIMEDOUT), which the
// requester takes only when no other copy of the request can still be
// answered.

// resentMark is the header version of a re-sent write or atomic (0 on
// its first copy).
const resentMark gva.Version = 1

// routesVersioner is implemented by the node's routing (node.Core): a
// number that changes whenever the routing table does.
type routesVersioner interface {
	RoutesVersion() uint64
}

// replyRecord is what the owner answered to a write or atomic.
type replyRecord struct {
	at      time.Duration
	class   noc.Class
	op      noc.Op
	version gva.Version
	res     atomicResult
}

// replies is the owner's table of reply records: bounded by count
// (Config.MaxReplies, oldest first out) and age (Config.ReplyTTL).
type replies struct {
	recs  map[opKey]replyRecord
	order []opKey // insertion order, oldest first from head
	head  int
	// lost: the newest time of a record dropped for room before its TTL
	// (records before it may be missing); haveLost: there was one.
	lost     time.Duration
	haveLost bool
}

// remember records the answer to request f (a write or an atomic) that the
// owner applied.
func (e *Engine) remember(now time.Duration, f *noc.Frame, v gva.Version, res atomicResult) {
	if f.Src == e.self {
		return // answered in the same step: never re-sent
	}
	t := &e.replies
	k := opKey{f.Src, f.RequestID}
	if _, ok := t.recs[k]; ok {
		return
	}
	e.forgetReplies(now)
	for len(t.order)-t.head >= e.cfg.MaxReplies {
		old := t.order[t.head]
		t.head++
		if rec, ok := t.recs[old]; ok {
			if now < rec.at+e.cfg.ReplyTTL {
				t.lost, t.haveLost = max(t.lost, rec.at), true
				e.stats.RepliesForgotten++
			}
			delete(t.recs, old)
		}
	}
	t.recs[k] = replyRecord{at: now, class: f.Class, op: f.Op, version: v, res: res}
	t.order = append(t.order, k)
	if t.head > 1024 && t.head > len(t.order)/2 {
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
}

// forgetReplies drops the records older than Config.ReplyTTL.
func (e *Engine) forgetReplies(now time.Duration) {
	t := &e.replies
	for t.head < len(t.order) {
		k := t.order[t.head]
		if rec, ok := t.recs[k]; ok && now < rec.at+e.cfg.ReplyTTL {
			return
		}
		delete(t.recs, k)
		t.head++
	}
}

// duplicate runs at the owner before a write or atomic goes to the
// arbiter. It reports whether f was handled: answered again from its
// record, dropped as a copy of a request held here, or answered "outcome
// unknown".
func (e *Engine) duplicate(now time.Duration, pg *page, f *noc.Frame) bool {
	if pg.recEpoch != pg.epoch || !pg.recSet {
		// The page is ours in a new ownership epoch: our records of it
		// start now. A page created here that never moved has them all.
		pg.recSet, pg.recEpoch, pg.recFrom = true, pg.epoch, now
		if pg.epoch == 0 && homeOf(pg.key) == e.self {
			pg.recFrom = e.born - e.cfg.ReplyTTL
		}
	}
	k := opKey{f.Src, f.RequestID}
	if rec, ok := e.replies.recs[k]; ok && now < rec.at+e.cfg.ReplyTTL {
		e.stats.Duplicates++
		e.stats.RepliesAgain++
		var payload []byte
		var pb [atomicReply]byte
		if rec.class == noc.ClassAtomic {
			payload = appendAtomicReply(pb[:0], rec.res)
		}
		e.reply(now, f.Src, f.RequestID, rec.class, rec.op, 0, f.GVA, rec.version, payload)
		return true
	}
	if e.ownerOps[k] != nil || e.repHolds(pg, k) {
		e.stats.Duplicates++
		return true
	}
	if f.PageVersion != 0 && !e.repliesCover(now, pg) {
		// Re-sent, and an earlier copy may have been applied by an owner
		// whose records we do not have.
		e.stats.ResendsUnknown++
		e.fail(now, f, syscall.ETIMEDOUT)
		return true
	}
	return false
}

// repliesCover reports whether this node's reply records of pg cover every
// request that may still be re-sent: a re-sent request is at most
// RequestTimeout old, and records are kept ReplyTTL (twice that).
func (e *Engine) repliesCover(now time.Duration, pg *page) bool {
	from := pg.recFrom
	if e.replies.haveLost {
		from = max(from, e.replies.lost)
	}
	return from+e.cfg.ReplyTTL <= now
}

// repHolds reports whether request k is staged on pg, or queued behind
// its backups.
func (e *Engine) repHolds(pg *page, k opKey) bool {
	if pg.rep == nil {
		return false
	}
	if s := pg.rep.staged; s != nil && s.op != nil && (opKey{s.op.f.Src, s.op.f.RequestID}) == k {
		return true
	}
	for _, op := range pg.rep.queue {
		if op.f.Class != noc.ClassControl && (opKey{op.f.Src, op.f.RequestID}) == k {
			return true
		}
	}
	return false
}

// resendable: r is a write or atomic that left this node (or may have)
// and may be sent again.
func (e *Engine) resendable(now time.Duration, r *request) bool {
	switch r.hr.Op {
	case HostStore, HostCAS, HostFetchAdd:
	default:
		return false
	}
	return r.live > 0 && !r.unknown && now-r.start < e.cfg.RequestTimeout
}

// routesChanged re-sends at once the writes and atomics in flight that
// were last sent at least RetryInterval ago, when the node's routing
// changed: what a lost link dropped goes again, by the new routes.
func (e *Engine) routesChanged(now time.Duration) {
	rv, ok := e.rt.(routesVersioner)
	if !ok {
		return
	}
	v := rv.RoutesVersion()
	if v == e.rtVersion {
		return
	}
	e.rtVersion = v
	var ids []uint64
	for id, r := range e.reqs {
		if e.resendable(now, r) && now-r.lastSent >= e.cfg.RetryInterval {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if r := e.reqs[id]; r != nil {
			e.cancel(r.retry)
			r.retry, r.resendArmed = 0, true
			e.retry(now, r)
		}
	}
}
