package coherence

import (
	"encoding/binary"
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
//
// The records travel with the page. A swap's content (OpData) carries the
// page's records younger than ReplyTTL, and how far back they are
// complete; so does every full copy sent to a backup (OpReplicate), and
// every write or atomic staged for the backups carries its own. The new
// owner of a swap, or a backup that takes the page over, answers copies
// from them, and its records cover the page from where the carried ones
// did: a re-sent copy it has no record of was never applied, and a first
// copy delayed past its re-sends finds its record. At most
// Config.PageReplies of a page's records travel, the newest: past that
// bound, a re-sent copy of an older request is answered "outcome unknown"
// until ReplyTTL after the newest one left behind. A CAS that did not
// swap changes nothing and travels to no backup: applied again after a
// takeover, it is a new comparison within the request's lifetime, which
// its caller could not tell from the first.

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
	key     gva.GVA // the page
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
func (e *Engine) remember(now time.Duration, pg *page, f *noc.Frame, v gva.Version, res atomicResult) {
	if !e.mayRepeat(f) {
		return
	}
	e.record(now, pg, opKey{f.Src, f.RequestID}, replyRecord{at: now, key: pg.key, class: f.Class, op: f.Op, version: v, res: res})
}

// mayRepeat reports whether another copy of request f may reach an owner:
// always for another node's; for this node's host, when it was sent more
// than once (its first copy left while another node owned the page, which
// came here since). A request of this node's host sent once is answered
// in the step that applies it and never sent again.
func (e *Engine) mayRepeat(f *noc.Frame) bool {
	if f.Src != e.self {
		return true
	}
	r := e.reqs[f.RequestID]
	return r != nil && (r.resends > 0 || r.orphaned)
}

// record keeps rec, the answer to request k on page pg, unless a record
// of k is kept already.
func (e *Engine) record(now time.Duration, pg *page, k opKey, rec replyRecord) {
	t := &e.replies
	if old, ok := t.recs[k]; ok {
		if old.key == pg.key && now < old.at+e.cfg.ReplyTTL && !slices.Contains(pg.recKeys, k) {
			e.indexReply(now, pg, k) // kept from an earlier ownership of the page
		}
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
	t.recs[k] = rec
	t.order = append(t.order, k)
	if t.head > 1024 && t.head > len(t.order)/2 {
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
	e.indexReply(now, pg, k)
}

// indexReply files record k under its page, whose newest
// Config.PageReplies records travel with it.
func (e *Engine) indexReply(now time.Duration, pg *page, k opKey) {
	for len(pg.recKeys) > 0 {
		rec, ok := e.replies.recs[pg.recKeys[0]]
		if ok && now < rec.at+e.cfg.ReplyTTL && len(pg.recKeys) < e.cfg.PageReplies {
			break
		}
		if ok && now < rec.at+e.cfg.ReplyTTL {
			pg.recCut, pg.haveCut = max(pg.recCut, rec.at), true // left out for room
		}
		pg.recKeys = pg.recKeys[1:]
	}
	pg.recKeys = append(pg.recKeys, k)
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
	e.noteReplies(now, pg)
	k := opKey{f.Src, f.RequestID}
	if rec, ok := e.replies.recs[k]; ok && now < rec.at+e.cfg.ReplyTTL {
		e.stats.Duplicates++
		if !e.heldByBackups(pg, rec.version) {
			// A write a backup took the page over with (the dead owner's
			// staged write, which only this node's copy held), not yet
			// copied to the page's new backups: acknowledged now, it was
			// held by one node, and lost when a split then put this node
			// in a minority whose far side took the page over from an
			// older copy (dpu-sim seed 103, 16 nodes, every fault, R = 3).
			// Its requester sends it again; it is answered once the
			// backups hold it.
			return true
		}
		e.stats.RepliesAgain++
		var payload []byte
		var pb [atomicReply]byte
		if rec.class == noc.ClassAtomic {
			payload = appendAtomicReply(pb[:0], rec.res)
		}
		e.reply(now, f.Src, f.RequestID, rec.class, rec.op, 0, f.GVA, rec.version, payload)
		return true
	}
	if e.ownerOps[k] != nil || e.repHolds(pg, k) || f.Src == e.self && e.reqs[f.RequestID] == nil {
		// (A copy of this node's host's request that ended: answered.)
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

// heldByBackups reports whether version v of pg, owned here, is held by
// R−1 backups (always, unreplicated), and, for a takeover, whether it
// settled (ownerRep.settling).
func (e *Engine) heldByBackups(pg *page, v gva.Version) bool {
	if !e.replicated() || !pg.owner || pg.rep == nil {
		return true
	}
	if len(pg.rep.backups) < e.cfg.Replicas-1 || pg.rep.settling {
		return false // (a takeover's fellows may still hold older copies)
	}
	for i := range pg.rep.backups {
		if b := &pg.rep.backups[i]; !b.ok || b.acked < v {
			return false
		}
	}
	return true
}

// noteReplies notes since when this node's records of pg, owned here,
// are complete, unless it was noted in the page's ownership epoch (when
// the page came with records, or at the first request): a page that came
// without records has them from now; a page created here that never moved
// has them all.
func (e *Engine) noteReplies(now time.Duration, pg *page) {
	if pg.recSet && pg.recEpoch == pg.epoch {
		return
	}
	pg.recSet, pg.recEpoch, pg.recFrom = true, pg.epoch, now
	if pg.epoch == 0 && homeOf(pg.key) == e.self {
		pg.recFrom = e.born - e.cfg.ReplyTTL
	}
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
	return r.hr.Op.writes() && r.live > 0 && !r.unknown && now-r.start < e.cfg.RequestTimeout
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

// Reply records on the wire, as they travel with a page (OpData, and
// OpReplicate: a full copy carries the page's, a staged write its own):
// cover (4: for how long before the frame left the records are complete,
// in microseconds, 0xFFFFFFFF for as long or longer), n (2, at most
// MaxPageReplies), then n records of replyLen bytes: requester (4),
// request id (8), age (4, microseconds), class (1), op (1), version
// after (8), previous value (8), swapped (1). Ages, not times: nodes do
// not share a clock; a record is only older than it reads on arrival,
// and kept a little longer for it.
const (
	repliesHead = 4 + 2
	replyLen    = 4 + 8 + 4 + 1 + 1 + 8 + 8 + 1
)

// carriedReply is a reply record with its request's name, as it travels
// with a page and as a backup keeps it (rec.at in this node's time).
type carriedReply struct {
	k   opKey
	rec replyRecord
}

// pageReplies is a page's reply records as they travel: complete since
// from (this node's time), oldest first.
type pageReplies struct {
	from time.Duration
	recs []carriedReply
}

// micros is d in microseconds, within 0 … 0xFFFFFFFF.
func micros(d time.Duration) uint32 {
	return uint32(min(max(d/time.Microsecond, 0), 0xFFFFFFFF))
}

func appendReplies(b []byte, now time.Duration, pr pageReplies) []byte {
	n := min(len(pr.recs), MaxPageReplies)
	b = binary.BigEndian.AppendUint32(b, micros(now-pr.from))
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	for _, r := range pr.recs[len(pr.recs)-n:] {
		b = binary.BigEndian.AppendUint32(b, uint32(r.k.node))
		b = binary.BigEndian.AppendUint64(b, r.k.id)
		b = binary.BigEndian.AppendUint32(b, micros(now-r.rec.at))
		b = append(b, byte(r.rec.class), byte(r.rec.op))
		b = binary.BigEndian.AppendUint64(b, uint64(r.rec.version))
		b = binary.BigEndian.AppendUint64(b, r.rec.res.prev)
		sw := byte(0)
		if r.rec.res.swapped {
			sw = 1
		}
		b = append(b, sw)
	}
	return b
}

// repliesSize is the length of the records block at the start of p.
func repliesSize(p []byte) (int, error) {
	if len(p) < repliesHead {
		return 0, errMalformed
	}
	n := int(binary.BigEndian.Uint16(p[4:]))
	if n > MaxPageReplies || len(p) < repliesHead+n*replyLen {
		return 0, errMalformed
	}
	return repliesHead + n*replyLen, nil
}

// decodeReplies reads a records block (exactly p) of page key, received
// at now, appending the records to dst.
func decodeReplies(p []byte, now time.Duration, key gva.GVA, dst []carriedReply) (pageReplies, error) {
	size, err := repliesSize(p)
	if err != nil || size != len(p) {
		return pageReplies{}, errMalformed
	}
	pr := pageReplies{from: now - time.Duration(binary.BigEndian.Uint32(p))*time.Microsecond, recs: dst}
	for q := p[repliesHead:]; len(q) >= replyLen; q = q[replyLen:] {
		c, op := noc.Class(q[16]), noc.Op(q[17])
		switch {
		case c == noc.ClassStore && op == OpStore, c == noc.ClassAtomic && (op == OpCAS || op == OpFetchAdd):
		default:
			return pageReplies{}, errMalformed
		}
		if q[34] > 1 {
			return pageReplies{}, errMalformed
		}
		pr.recs = append(pr.recs, carriedReply{
			k: opKey{noc.NodeID(binary.BigEndian.Uint32(q)), binary.BigEndian.Uint64(q[4:])},
			rec: replyRecord{
				at:      now - time.Duration(binary.BigEndian.Uint32(q[12:]))*time.Microsecond,
				key:     key,
				class:   c,
				op:      op,
				version: gva.Version(binary.BigEndian.Uint64(q[18:])),
				res:     atomicResult{prev: binary.BigEndian.Uint64(q[26:]), swapped: q[34] == 1},
			},
		})
	}
	return pr, nil
}

// pageReplies collects the records of pg, owned here, that travel with
// it: those younger than ReplyTTL, and since when they are complete.
func (e *Engine) pageReplies(now time.Duration, pg *page) pageReplies {
	e.noteReplies(now, pg)
	pr := pageReplies{from: pg.recFrom}
	if e.replies.haveLost {
		pr.from = max(pr.from, e.replies.lost)
	}
	if pg.haveCut {
		pr.from = max(pr.from, pg.recCut)
	}
	for _, k := range pg.recKeys {
		if rec, ok := e.replies.recs[k]; ok && rec.key == pg.key && now < rec.at+e.cfg.ReplyTTL {
			pr.recs = append(pr.recs, carriedReply{k: k, rec: rec})
		}
	}
	return pr
}

// takeReplies starts the records of pg, owned here from now in a new
// ownership epoch, from those that came with it (known: the page came
// with records; a node that predates them sends none, and the records
// then start now).
func (e *Engine) takeReplies(now time.Duration, pg *page, pr pageReplies, known bool) {
	pg.recKeys, pg.recCut, pg.haveCut = pg.recKeys[:0], 0, false
	pg.recSet, pg.recEpoch, pg.recFrom = true, pg.epoch, now
	if !known {
		return
	}
	pg.recFrom = min(pr.from, now)
	for _, r := range pr.recs {
		if now < r.rec.at+e.cfg.ReplyTTL {
			r.rec.key = pg.key
			e.record(now, pg, r.k, r.rec)
			e.stats.RepliesCarried++
		}
	}
}

// keepReply adds a record to a backup's copy: the newest
// Config.PageReplies are kept, and the copy's records are complete only
// after the newest one left out for room.
func (e *Engine) keepReply(now time.Duration, c *backupCopy, r carriedReply) {
	for len(c.replies) > 0 {
		old := c.replies[0].rec.at
		if now < old+e.cfg.ReplyTTL && len(c.replies) < e.cfg.PageReplies {
			break
		}
		if now < old+e.cfg.ReplyTTL {
			c.recFrom = max(c.recFrom, old)
		}
		c.replies = c.replies[1:]
	}
	c.replies = append(c.replies, r)
}
