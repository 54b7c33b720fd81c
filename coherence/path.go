package coherence

import (
	"encoding/binary"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// handleUp runs an up-going request (ref, store, atomic, acquire) at this
// node: it arrived on port in (noc.LocalPort: from this node's host).
func (e *Engine) handleUp(now time.Duration, in noc.PortID, f *noc.Frame) {
	key := f.GVA.Key()
	if f.Hops > e.cfg.MaxHops || f.Hops == math.MaxUint8 { // a full count cannot grow
		e.stats.HopLimit++
		return
	}
	if !e.validUp(f) {
		e.malformed()
		return
	}
	pg := e.pages[key]
	if e.dbg != nil && f.Class != noc.ClassLoad {
		e.debugf(key, "up %v/%d in=%d src=%v dst=%v", f.Class, f.Op, in, f.Src, f.Dst)
	}
	if pg != nil && pg.swap != nil && !pg.swap.out && pg.swap.stage >= stageGranted {
		e.hold(pg, in, f)
		return
	}
	if pg != nil && pg.owner {
		e.atOwner(now, in, f, pg)
		return
	}
	ent, _ := e.cache.Get(key, now)
	if ent != nil && ent.Owner {
		ent = nil // an owner entry without its page: freed under our feet
	}
	if ent != nil && ent.Up == in && !e.rerouting && routedHere(f) {
		// Our way up routed a request to us: it is off the tree and does
		// not count us as a branch. Our branch is cut off. (A request that
		// followed the sender's entry down our up port is a flip in
		// progress: it just goes back up.)
		e.stats.PathAnomalies++
		e.resetEntry(now, ent)
		ent = nil
	}
	if f.Class == noc.ClassLoad {
		e.handleRef(now, in, f, pg, ent)
		return
	}
	up, dst, target, errno := e.nextUp(key, in, f, ent)
	if errno != 0 {
		e.fail(now, f, errno)
		return
	}
	e.forwardUp(in, up, dst, target, ent == nil, 0, f)
}

// routedHere reports whether the sender of an up-going request was off
// the page's tree (it routed the request).
func routedHere(f *noc.Frame) bool {
	if f.Class == noc.ClassLoad {
		_, rf, err := decodeRef(f.Payload)
		return err == nil && rf&refGraft != 0
	}
	_, routed := upPrefix(f.Payload)
	return routed
}

// validUp checks the payload of an up-going request.
func (e *Engine) validUp(f *noc.Frame) bool {
	switch f.Class {
	case noc.ClassLoad:
		_, _, err := decodeRef(f.Payload)
		return err == nil
	case noc.ClassStore:
		_, err := decodeStore(f.GVA, f.Payload)
		return err == nil
	case noc.ClassAtomic:
		_, err := decodeAtomic(f.Op, f.GVA, f.Payload)
		return err == nil
	case noc.ClassControl:
		_, err := decodeAcquire(f.Payload)
		return err == nil
	}
	return false
}

// nextUp picks the port an up-going request leaves by: the entry's up port,
// or, without an entry, the route toward the page's home, which redirects
// toward the owner it knows.
func (e *Engine) nextUp(key gva.GVA, in noc.PortID, f *noc.Frame, ent *pathcache.Entry) (up noc.PortID, dst noc.NodeID, target uint64, errno syscall.Errno) {
	dst = f.Dst
	target, _ = upPrefix(f.Payload)
	redirected := false
	if ent != nil && ent.Up != noc.NoPort {
		return ent.Up, dst, target, 0
	}
	if dst == e.self && target == 0 && homeOf(key) != e.self {
		// Sent here as the last known owner; it is not here: ask the home.
		dst, redirected = homeOf(key), true
		if c := e.handed[key]; c != nil && e.routes(c.peer) {
			// We handed it over lately: on to the new owner (a hint here
			// may be older than this node's own ownership, and name a
			// node whose hint names this one back).
			dst = c.peer
		} else if h, ok := e.hintOwner(key); ok {
			dst = h // a failover named the owner lately
		}
	}
	if dst == e.self {
		if target != 0 {
			// Directed here as the owner, but the page is not here.
			if target != e.inc {
				if e.comingBack() {
					// The owner restarted: a backup takes the page over
					// and tells the home, whose redirect then finds it.
					return 0, 0, 0, syscall.EAGAIN
				}
				// The owner restarted, and no backup took the page over
				// in the time a takeover takes (the page was lost in a
				// swap whose other side failed, say): it is lost.
				return 0, 0, 0, syscall.EHOSTDOWN
			}
			c := e.handed[key]
			if c == nil {
				return 0, 0, 0, syscall.EAGAIN // it moved on; the home will learn of it
			}
			// We handed it over lately: follow it to the new owner.
			dst, target, redirected = c.peer, c.inc, true
		}
	}
	if dst == e.self {
		rec := e.home[key]
		if e.dbg != nil {
			e.debugf(key, "home lookup %+v born=%v", rec, e.born)
		}
		switch {
		case rec == nil && e.cfg.AllocEpoch != 0 && AllocEpochOf(key) >= e.cfg.AllocEpoch:
			return 0, 0, 0, syscall.ENOENT // this run allocated no such page
		case rec == nil && e.learning():
			return 0, 0, 0, syscall.EAGAIN // restarted lately: its owner will tell us
		case rec == nil && e.staleAtHome(key) && (e.copiesMayReturn() || e.copyAskedLately(key)):
			return 0, 0, 0, syscall.EAGAIN // a node came back lately: a copy may take it over
		case rec == nil && e.staleAtHome(key):
			return 0, 0, 0, syscall.ESTALE // an earlier run's page, lost with it (stale.go)
		case rec == nil:
			return 0, 0, 0, syscall.EHOSTDOWN // unknown at its home: lost with a restart
		case rec.freed:
			return 0, 0, 0, syscall.ENOENT // freed: no such page any more
		case rec.owner == e.self && rec.ownerInc != e.inc && e.comingBack():
			return 0, 0, 0, syscall.EAGAIN // an earlier run's page: a copy, maybe reloaded here, takes it over
		case rec.owner == e.self:
			return 0, 0, 0, syscall.EHOSTDOWN
		}
		dst, target = rec.owner, rec.ownerInc
		redirected = true
	}
	p, _, ok := e.rt.NextHop(dst)
	if !ok {
		h, hok := e.hintOwner(key)
		if !hok || h == dst {
			return 0, 0, 0, syscall.EHOSTUNREACH
		}
		// The owner we were sent to is gone; a failover named its heir.
		dst, target, redirected = h, 0, true
		if p, _, ok = e.rt.NextHop(dst); !ok {
			return 0, 0, 0, syscall.EHOSTUNREACH
		}
	}
	if p == in && !redirected {
		e.stats.PathAnomalies++
		return 0, 0, 0, syscall.EAGAIN
	}
	return p, dst, target, 0
}

// forwardUp re-sends an up-going request on port up, with the destination
// and target incarnation nextUp chose; an acquire records its arrival
// port; a ref carries refFlags.
func (e *Engine) forwardUp(in, up noc.PortID, dst noc.NodeID, target uint64, routed bool, refFlags uint8, f *noc.Frame) {
	g := *f
	g.Hops++
	g.Dst = dst
	g.Flags |= noc.FlagPath
	if routed {
		target |= prefixRouted
	}
	cur := binary.BigEndian.Uint64(f.Payload)
	rec := f.Class == noc.ClassControl && in != noc.LocalPort
	body := upBody(f.Payload) // validUp accepted the payload
	ref := f.Class == noc.ClassLoad && f.Payload[body] != refFlags
	if cur != target || rec || ref {
		p := append(e.pay[:0], f.Payload...)
		binary.BigEndian.PutUint64(p, target)
		if f.Class == noc.ClassLoad {
			p[body] = refFlags
		}
		if rec {
			n := acquireRouteLen(p)
			p[n]++
			p = binary.BigEndian.AppendUint16(p, uint16(in))
			if int(p[n]) > maxRoute {
				e.stats.HopLimit++
				return
			}
		}
		g.Payload = p
	}
	e.sendPort(up, &g)
}

// upsert returns the entry of key, creating it; evictions it causes are
// acted upon.
func (e *Engine) upsert(now time.Duration, key gva.GVA) (*pathcache.Entry, error) {
	ent, _, evs, err := e.cache.Upsert(key, now)
	if err != nil {
		e.stats.CacheFull++
		return nil, err
	}
	if len(evs) > 0 {
		e.evicted(now, evs)
	}
	return ent, nil
}

// evictedLater keeps evictions that happened where no Sender is at hand;
// they are acted upon at the next Tick... which must therefore be soon.
func (e *Engine) evictedLater(evs []pathcache.Eviction) {
	e.evicts = append(e.evicts, evs...)
}

// evicted acts on aged-out entries: invalidate + unref toward every down
// port, invalidate the local replica, unref toward the up port.
func (e *Engine) evicted(now time.Duration, evs []pathcache.Eviction) {
	list := append(e.evicts, evs...)
	e.evicts = nil
	for _, ev := range list {
		e.stats.Evictions++
		for p := range ev.Down.All() {
			if p == noc.LocalPort {
				if pg := e.pages[ev.Key]; pg != nil && !pg.owner {
					e.lostReplica(now, pg, ev.Version)
				}
				continue
			}
			f := newFrame(noc.ClassLoad, OpDetach, noc.FlagPath, e.self, noc.BroadcastNode, 0, ev.Key, ev.Version, nil)
			e.sendPort(p, &f)
		}
		if ev.Up != noc.NoPort {
			f := newFrame(noc.ClassLoad, OpUnref, noc.FlagPath, e.self, noc.BroadcastNode, 0, ev.Key, ev.Version, nil)
			e.sendPort(ev.Up, &f)
			e.markUnref(now, ev.Key, ev.Up)
		}
	}
}

// syncReplica mirrors the local replica's state into its entry.
func (e *Engine) syncReplica(ent *pathcache.Entry, pg *page) {
	switch {
	case pg == nil || pg.owner || !ent.Down.Has(noc.LocalPort):
		ent.Replica = pathcache.ReplicaNone
	case pg.swap != nil && !pg.swap.out && pg.swap.stage >= stageGranted:
		ent.Replica = pathcache.ReplicaSwapping
	case pg.has && pg.version >= ent.Version:
		ent.Replica = pathcache.ReplicaValid
	default:
		ent.Replica = pathcache.ReplicaInvalid
	}
}

// replaced tells a host that maps pg that its content is about to be
// replaced by a whole page of a newer version v (a ref's answer, the
// content an ownership transfer or a takeover brings): the host's copy of
// the old version is no longer current.
func (e *Engine) replaced(now time.Duration, pg *page, v gva.Version) {
	if pg.maps > 0 && pg.has && v > pg.version {
		e.event(Event{Kind: EventInvalidated, GVA: pg.key, Version: v, At: now})
	}
}

// lostReplica tells the host that its replica of pg left the page's tree:
// it is no longer current, whatever its version.
func (e *Engine) lostReplica(now time.Duration, pg *page, v gva.Version) {
	if pg.maps > 0 {
		e.event(Event{Kind: EventInvalidated, GVA: pg.key, Version: v, At: now, Lost: true})
	}
}

// invalidated tells the host that its replica of pg is no longer current.
func (e *Engine) invalidated(now time.Duration, pg *page, v gva.Version) {
	if pg.maps > 0 {
		e.event(Event{Kind: EventInvalidated, GVA: pg.key, Version: v, At: now})
	}
}

// handleDown runs an update or invalidate coming down the tree.
func (e *Engine) handleDown(now time.Duration, in noc.PortID, f *noc.Frame) {
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "down op=%d v=%d in=%d", f.Op, f.PageVersion, in)
	}
	key := f.GVA.Key()
	var data []byte
	if f.Op == OpUpdate {
		var err error
		if data, err = decodeUpdate(f.GVA, f.Payload); err != nil {
			e.malformed()
			return
		}
	} else if len(f.Payload) != 0 {
		e.malformed()
		return
	}
	ent, ok := e.cache.Peek(key)
	if !ok || ent.Owner || ent.Up != in {
		// The sender still counts us as a branch; we are not one.
		e.notBranch(now, key, in)
		return
	}
	v := f.PageVersion
	ent.Version = max(ent.Version, v)
	if pg := e.pages[key]; pg != nil && !pg.owner {
		pg.ownerNode = f.Src // updates come from the owner
	}
	if pg := e.pages[key]; pg != nil && !pg.owner && ent.Down.Has(noc.LocalPort) {
		// A replica locked by a swap granted to this node stays as it
		// is (the swap installs the owner's content, or reverts).
		locked := pg.swap != nil && pg.swap.stage >= stageGranted
		switch {
		case !locked && data != nil && pg.has && pg.version+1 == v:
			e.advanced(pg, v)
			copy(e.pageBytes(pg)[f.GVA.Offset():], data)
			pg.version = v
			e.stats.UpdatesApplied++
			if pg.maps > 0 {
				e.event(Event{Kind: EventUpdated, GVA: pg.key, Version: v, At: now, Offset: int(f.GVA.Offset()), Data: data})
			}
		case pg.version < v:
			// Behind (it was valid, a gap came while it was not on the
			// tree, or the owner wrote on after it called a swap off
			// that this node has not heard of yet): the host is told
			// every time, as a copy it holds may not know it is behind.
			e.invalidated(now, pg, v)
		}
		if !locked {
			e.syncReplica(ent, pg)
			e.wake(now, pg)
		}
	}
	g := *f
	g.Hops++
	for p := range ent.Down.All() {
		if p != noc.LocalPort {
			e.sendPort(p, &g)
		}
	}
}

// notBranch answers a down-going message from a node that counts this one
// as a branch of the page's tree when it is none (it has no entry, owns
// the page, or hangs below another port): an unref, so that the sender
// drops the branch, remembered so that a re-join under the sender tells it
// again (OpAttach).
func (e *Engine) notBranch(now time.Duration, key gva.GVA, in noc.PortID) {
	e.stats.Stale++
	if in == noc.LocalPort {
		return
	}
	u := newFrame(noc.ClassLoad, OpUnref, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, 0, nil)
	e.sendPort(in, &u)
	e.markUnref(now, key, in)
}

// handleUnref removes the arrival port from the page's down set.
func (e *Engine) handleUnref(now time.Duration, in noc.PortID, f *noc.Frame) {
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "unref in=%d", in)
	}
	if len(f.Payload) != 0 {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	ent, ok := e.cache.Peek(key)
	if !ok {
		e.stats.Stale++
		return
	}
	ent.Down = ent.Down.Remove(in)
	if fe := e.fetches[key]; fe != nil {
		fe.ports = fe.ports.Remove(in)
	}
	e.prune(now, ent)
}

// prune removes an entry that no longer leads anywhere, unref'ing it
// upstream.
func (e *Engine) prune(now time.Duration, ent *pathcache.Entry) {
	if e.dbg != nil {
		e.debugf(ent.Key, "prune? up=%d down=%v owner=%v", ent.Up, ent.Down, ent.Owner)
	}
	if ent.Owner || !ent.Down.Empty() {
		return
	}
	if fe := e.fetches[ent.Key]; fe != nil {
		if fe.merging || fe.waited() {
			return
		}
		e.closeFetch(ent.Key) // past its merge window, waited on by nobody
	}
	if pg := e.pages[ent.Key]; pg != nil && pg.swap != nil {
		return
	}
	if ent.Up != noc.NoPort {
		f := newFrame(noc.ClassLoad, OpUnref, noc.FlagPath, e.self, noc.BroadcastNode, 0, ent.Key, ent.Version, nil)
		e.sendPort(ent.Up, &f)
		e.markUnref(now, ent.Key, ent.Up)
	}
	e.cache.Remove(ent.Key)
	e.stats.Pruned++
}

// markUnref remembers that this node unref'd key toward port p. The marks
// are a hint kept for a while (a bounded set, dropped in bulk when full).
func (e *Engine) markUnref(now time.Duration, key gva.GVA, p noc.PortID) {
	if len(e.unrefd) >= 4096 {
		clear(e.unrefd)
	}
	e.unrefd[key] = unrefMark{port: p, at: now}
}

// handleAttach re-adds a branch whose unref crossed its re-join.
func (e *Engine) handleAttach(now time.Duration, in noc.PortID, f *noc.Frame) {
	if len(f.Payload) != 0 {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	ent, ok := e.cache.Peek(key)
	if !ok || !ent.Owner && ent.Up == in {
		// We are not on the tree (or the sender is our own way up): the
		// sender's branch leads nowhere; it must re-ref.
		x := newFrame(noc.ClassLoad, OpDetach, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, 0, nil)
		e.sendPort(in, &x)
		e.stats.Detaches++
		return
	}
	ent.Down, _ = ent.Down.Add(in)
	e.stats.Attaches++
	if ent.Version > f.PageVersion {
		// Updates may have gone by while the branch was cut off.
		x := newFrame(noc.ClassStore, OpInvalidate, noc.FlagPath|f.Flags&noc.FlagHuge, e.self, noc.BroadcastNode, 0, key, ent.Version, nil)
		e.sendPort(in, &x)
		e.stats.InvalidatesSent++
	}
}

// handleDetach resets this node's entry when its up branch is gone.
func (e *Engine) handleDetach(now time.Duration, in noc.PortID, f *noc.Frame) {
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "detach in=%d", in)
	}
	if len(f.Payload) != 0 {
		e.malformed()
		return
	}
	ent, ok := e.cache.Peek(f.GVA.Key())
	if !ok || ent.Owner || ent.Up != in {
		e.stats.Stale++
		return
	}
	e.resetEntry(now, ent)
}

// resetEntry drops an entry whose path to the owner is cut: the subtree
// below is detached, the local replica becomes invalid, local waiters
// re-ref by the home route.
func (e *Engine) resetEntry(now time.Duration, ent *pathcache.Entry) {
	if e.dbg != nil {
		e.debugf(ent.Key, "reset up=%d down=%v", ent.Up, ent.Down)
	}
	key := ent.Key
	e.stats.Resets++
	e.detachBelow(now, ent)
	local := false
	if fe := e.fetches[key]; fe != nil {
		local = fe.ports.Has(noc.LocalPort)
		e.closeFetch(key)
	}
	e.cache.Remove(key)
	pg := e.pages[key]
	if pg == nil || pg.owner {
		return
	}
	if pg.swap != nil && !pg.swap.out {
		pg.swap.upBroken = true
	}
	if ent.Down.Has(noc.LocalPort) {
		e.lostReplica(now, pg, ent.Version)
	}
	if (local || len(pg.waiters) > 0) && len(pg.waiters) > 0 {
		if pg.swap == nil || pg.swap.stage < stageGranted {
			min := pg.seen
			for _, r := range pg.waiters {
				min = max(min, r.min)
			}
			e.sendRef(now, pg, pg.waiters[0].id, pg.waiters[0].hr.Cred, min)
		}
	}
}

// detachBelow sends a detach down every branch of ent.
func (e *Engine) detachBelow(now time.Duration, ent *pathcache.Entry) {
	for p := range ent.Down.All() {
		if p == noc.LocalPort {
			continue
		}
		f := newFrame(noc.ClassLoad, OpDetach, noc.FlagPath, e.self, noc.BroadcastNode, 0, ent.Key, ent.Version, nil)
		e.sendPort(p, &f)
		e.stats.Detaches++
	}
}

// handleReply completes (or retries) a host request answered by a routed
// reply.
func (e *Engine) handleReply(now time.Duration, f *noc.Frame) {
	if !validReply(f) {
		e.malformed()
		return
	}
	r := e.reqs[f.RequestID]
	if r == nil {
		e.stats.Stale++
		return
	}
	if f.Flags&noc.FlagError != 0 {
		errno, err := decodeErrno(f.Payload)
		if err != nil {
			e.malformed()
			return
		}
		e.requestFailed(now, r, errno)
		return
	}
	switch {
	case r.hr.Op == HostStore && f.Class == noc.ClassStore,
		bugsCompiled && r.hr.Op == HostCAS && f.Class == noc.ClassStore && e.cfg.Bug == BugStaleCAS:
		if len(f.Payload) != 0 {
			e.malformed()
			return
		}
		v := f.PageVersion
		e.ownWrite(now, r.key, int(r.hr.GVA.Offset()), r.data, v)
		if r.hr.Op == HostCAS {
			e.complete(now, r, Completion{Value: r.hr.Expected, Swapped: true, Version: v})
			return
		}
		e.complete(now, r, Completion{Version: v})
	case (r.hr.Op == HostCAS || r.hr.Op == HostFetchAdd) && f.Class == noc.ClassAtomic:
		res, err := decodeAtomicReply(f.Payload)
		if err != nil {
			e.malformed()
			return
		}
		v := f.PageVersion
		var nv uint64
		changed := true
		if r.hr.Op == HostCAS {
			nv, changed = r.hr.Operand, res.swapped
		} else {
			nv = res.prev + r.hr.Operand
		}
		if changed {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], nv)
			e.ownWrite(now, r.key, int(r.hr.GVA.Offset()), b[:], v)
		} else {
			e.seen(r.key, v)
		}
		e.complete(now, r, Completion{Value: res.prev, Swapped: res.swapped, Version: v})
	default:
		e.malformed()
	}
}

// validReply checks the payload of a routed reply.
func validReply(f *noc.Frame) bool {
	switch {
	case f.Flags&noc.FlagError != 0:
		_, err := decodeErrno(f.Payload)
		return err == nil
	case f.Class == noc.ClassStore:
		return len(f.Payload) == 0
	case f.Class == noc.ClassAtomic:
		_, err := decodeAtomicReply(f.Payload)
		return err == nil
	}
	return false
}

// ownWrite applies this host's own acknowledged write to its replica when
// it is the next version (read-your-writes without waiting for the
// update), and raises the host's session floor. The entry's version stays:
// it is the newest version that came down the tree here, so the newest
// this node's branches may have been sent; the owner's update of v, still
// on its way, brings it. A node that becomes the owner before that update
// came (its acquire's content carried v) finds its branches behind and
// invalidates them (ownEntry).
func (e *Engine) ownWrite(now time.Duration, key gva.GVA, off int, data []byte, v gva.Version) {
	e.seen(key, v)
	pg := e.pages[key]
	if pg == nil || pg.owner || !pg.has || pg.version+1 != v || (pg.swap != nil && pg.swap.stage >= stageGranted) {
		return
	}
	ent, ok := e.cache.Peek(key)
	if !ok || !ent.Down.Has(noc.LocalPort) || ent.Version >= v || pg.version < ent.Version {
		return
	}
	e.advanced(pg, v)
	copy(e.pageBytes(pg)[off:], data)
	pg.version = v
	e.syncReplica(ent, pg)
	if pg.maps > 0 {
		// The host that made it usually applied it already; one whose
		// caller gave up on it (abandoned: no completion reaches the host
		// interface) did not, and its copy would stay at the old version.
		e.event(Event{Kind: EventUpdated, GVA: key, Version: v, At: now, Offset: off, Data: data})
	}
}

// advanced reports a replica's content moving to version v.
func (e *Engine) advanced(pg *page, v gva.Version) {
	if pg.has && v < pg.version {
		// A copy here newer than what is installed over it: the updates
		// and contents a replica takes come from the owner, whose version
		// only grows, so a step back is a write of the newer version lost.
		e.broken(e.now, "replica of %v goes back from version %d to %d", pg.key, pg.version, v)
	}
	if e.cfg.Tracer != nil {
		e.cfg.Tracer.ReplicaAdvanced(e.self, pg.key, pg.has, pg.version, v)
	}
}

// seen raises the host's session floor for key.
func (e *Engine) seen(key gva.GVA, v gva.Version) {
	if pg := e.pages[key]; pg != nil && v > pg.seen {
		pg.seen = v
	}
}

// takeoverWait bounds how long after this node restarted a backup takes
// over a page it owned before: the failover's and the split rule's grace
// and a request's bound, twice over.
func (e *Engine) takeoverWait() time.Duration {
	return 2 * (e.cfg.FailoverGrace + e.cfg.SplitGrace + e.cfg.RequestTimeout)
}

// comingBack reports whether pages this node owned before it restarted
// may still come back (a backup's takeover, or a copy reloaded from a
// durable log): requests for them are answered "retry" until then.
func (e *Engine) comingBack() bool {
	wait := e.takeoverWait()
	if e.cfg.Durable != nil {
		wait += e.restoreGrace()
	} else if !e.replicated() {
		return false
	}
	return e.now-e.born < wait
}

// mayHaveApplied reports whether r is a write or atomic a copy of which may
// have been applied without its answer reaching here.
func (e *Engine) mayHaveApplied(r *request) bool {
	return r.hr.Op.writes() && (r.live > 0 || r.orphaned)
}

// requestFailed handles an error answer: retryable ones are retried until
// the request's bound, others complete the request.
func (e *Engine) requestFailed(now time.Duration, r *request, errno syscall.Errno) {
	if r.live > 0 {
		r.live-- // one copy is answered
	}
	if errno == syscall.ETIMEDOUT && r.live > 0 {
		// A re-sent copy's outcome is unknown at the owner; an earlier
		// copy may still be answered. Wait for it (until the bound), and
		// send no more: the re-send armed at the last copy is cancelled.
		r.unknown = true
		e.cancel(r.retry)
		r.retry, r.resendArmed = 0, false
		return
	}
	switch errno {
	case syscall.EAGAIN, syscall.EBUSY, syscall.EHOSTUNREACH:
		if r.hr.Op == HostAcquire || r.hr.Op == HostLock {
			r.losses++
		}
		e.retryLater(now, r, errno)
	case syscall.EACCES, syscall.EPERM:
		// This request's user is refused; other waiters of the page keep
		// theirs (a re-sent ref carries their own credentials).
		e.completeErr(now, r, errno, "refused by the node that serves the page")
	default:
		if e.mayHaveApplied(r) {
			// A copy of this write or atomic may have been applied (one
			// is unanswered, or went to an owner that failed): an error
			// from the copy that failed says nothing of it. Wait for the
			// unanswered one until the bound, or end "outcome unknown".
			if r.live > 0 {
				r.unknown = true
				return
			}
			e.completeErr(now, r, syscall.ETIMEDOUT, fmt.Sprintf("%v after a copy went to an owner that failed: outcome unknown", errno))
			return
		}
		if r.hr.Op == HostRef || r.hr.Op == HostLoad {
			// The page itself is gone: every waiter of it learns so.
			if pg := e.pages[r.key]; pg != nil {
				for len(pg.waiters) > 0 {
					e.completeErr(now, pg.waiters[0], errno, lostMsg(errno))
				}
			}
			if e.reqs[r.id] == nil {
				return
			}
		}
		e.completeErr(now, r, errno, lostMsg(errno))
	}
}

// lostMsg says why a request for a page that no node serves any more ends:
// EHOSTDOWN from the owner's later incarnation or the page's home (no
// backup took it over within a takeover's time, no record of it), ESTALE
// from a restarted home (a page of its earlier run). Either way, every
// copy of the page was on nodes that died.
func lostMsg(errno syscall.Errno) string {
	switch errno {
	case syscall.EHOSTDOWN:
		return "page lost: every copy was on nodes that died (no live node owns it or holds a copy)"
	case syscall.ESTALE:
		return "page lost: every copy was on nodes that died (a page of an earlier run of its home)"
	}
	return ""
}

// routes reports whether routing reaches node n now.
func (e *Engine) routes(n noc.NodeID) bool {
	_, _, ok := e.rt.NextHop(n)
	return ok
}
