package coherence

import (
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// graftWaiter is a requester without a path waiting at this node, which is
// on the page's tree: the answer is routed to it and builds its path.
type graftWaiter struct {
	node noc.NodeID
	id   uint64
}

// handleRef runs a ref at a node that is not the owner. ent is the node's
// entry (nil: the node is not on the page's tree).
func (e *Engine) handleRef(now time.Duration, in noc.PortID, f *noc.Frame, pg *page, ent *pathcache.Entry) {
	if e.dbg != nil {
		_, rf, _ := decodeRef(f.Payload)
		e.debugf(f.GVA.Key(), "ref in=%d src=%v min=%d flags=%x entry=%v", in, f.Src, f.PageVersion, rf, ent != nil)
	}
	key := f.GVA.Key()
	_, rf, _ := decodeRef(f.Payload)
	graft := rf&refGraft != 0
	min := f.PageVersion
	if ent == nil {
		// Off the tree: record nothing, route on toward the home or owner.
		// The answer comes back routed and builds the path from the top.
		if !graft && in != noc.LocalPort {
			// A ref that follows its entry came up to us, who are not on
			// the tree: the sender's branch is dangling and must re-ref.
			x := newFrame(noc.ClassLoad, OpDetach, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, 0, nil)
			e.sendPort(in, &x)
			e.stats.Detaches++
		}
		if in == noc.LocalPort {
			if fe := e.fetches[key]; fe != nil && fe.merging && fe.min >= min {
				fe.ports, _ = fe.ports.Add(noc.LocalPort)
				e.stats.Merges++
				return
			}
			fe := e.openFetch(now, key, nil)
			fe.min = max(fe.min, min)
			fe.ports, _ = fe.ports.Add(noc.LocalPort)
		}
		up, dst, target, errno := e.nextUp(key, in, f, nil)
		if errno != 0 {
			e.fail(now, f, errno)
			return
		}
		e.forwardUp(in, up, dst, target, true, refGraft, f)
		return
	}
	if in != ent.Up && !e.vouched(now, in, f, pg, ent) {
		// On the tree, this node serves the ref (from its replica, or by
		// merging it into a fetch and adding the sender below it): the
		// sender's user must be allowed to read the page.
		return
	}
	if !graft {
		if ent.Up == in {
			// A ref that followed the sender's entry into our up port: a
			// flip is passing by. The requester asks again.
			e.stats.PathAnomalies++
			e.fail(now, f, syscall.EAGAIN)
			return
		}
		ent.Down, _ = ent.Down.Add(in)
	}
	if in != noc.LocalPort && pg != nil && ent.Down.Has(noc.LocalPort) && pg.has &&
		pg.version >= ent.Version && pg.version >= min && (pg.swap == nil || pg.swap.stage < stageGranted) {
		// A valid replica answers instead of forwarding.
		if e.dbg != nil {
			e.debugf(key, "answered from the replica (v %d)", pg.version)
		}
		e.stats.AnsweredByReplica++
		if graft {
			e.sendGraft(ent, f.Src, f.RequestID, pg.key, pg.version, e.ownerOf(pg), pg.huge, e.pageBytes(pg))
		} else {
			e.sendContent(ent, in, f.RequestID, pg.version, e.ownerOf(pg), pg.huge, e.pageBytes(pg))
		}
		return
	}
	fe := e.fetches[key]
	if fe != nil && fe.merging && fe.min >= min {
		if e.dbg != nil {
			e.debugf(key, "merged into the open fetch (min %d)", fe.min)
		}
		e.addWaiter(fe, in, f, graft)
		e.stats.Merges++
		return
	}
	fe = e.openFetch(now, key, ent)
	fe.min = max(fe.min, min)
	e.addWaiter(fe, in, f, graft)
	target, _ := upPrefix(f.Payload)
	e.forwardUp(in, ent.Up, f.Dst, target, false, 0, f)
}

func (e *Engine) addWaiter(fe *fetch, in noc.PortID, f *noc.Frame, graft bool) {
	if !graft {
		fe.ports, _ = fe.ports.Add(in)
		return
	}
	for _, g := range fe.grafts {
		if g.node == f.Src {
			return
		}
	}
	fe.grafts = append(fe.grafts, graftWaiter{node: f.Src, id: f.RequestID})
}

// openFetch opens the fetch of key for a ref this node sends up, or opens
// the merge window of the fetch already there again (its waiters stay);
// ent (if any) is held against aging while the fetch is open.
func (e *Engine) openFetch(now time.Duration, key gva.GVA, ent *pathcache.Entry) *fetch {
	fe := e.fetches[key]
	if fe == nil {
		fe = &fetch{}
		e.fetches[key] = fe
	} else {
		e.cancel(fe.timer)
	}
	if ent != nil && !fe.pinned {
		ent.Pin()
		ent.Fetching = true
		fe.pinned = true
	}
	fe.merging = true
	fe.timer = e.schedule(now+e.cfg.MergeTTL, timer{kind: tMerge, key: key})
	return fe
}

// mergeEnded closes the merge window of key's fetch: a fetch no other node
// waits on ends (this node's host needs none: the answer installs its
// replica on its own); one with waiters below keeps them until the answer
// passes, for at most RequestTimeout (every request waiting below ends by
// then).
func (e *Engine) mergeEnded(now time.Duration, key gva.GVA, fe *fetch) {
	if !fe.merging || !fe.waited() {
		e.closeFetch(key)
		return
	}
	fe.merging = false
	fe.timer = e.schedule(now+e.cfg.RequestTimeout, timer{kind: tMerge, key: key})
}

// waited reports whether a port below this node or a graft waits on the
// fetch.
func (fe *fetch) waited() bool {
	return !fe.ports.Without(noc.LocalPort).Empty() || len(fe.grafts) > 0
}

// closeFetch ends the open fetch of key.
func (e *Engine) closeFetch(key gva.GVA) {
	if e.dbg != nil {
		e.debugf(key, "close fetch")
	}
	fe := e.fetches[key]
	if fe == nil {
		return
	}
	e.cancel(fe.timer)
	delete(e.fetches, key)
	if ent, ok := e.cache.Peek(key); ok {
		if fe.pinned {
			ent.Unpin()
		}
		ent.Fetching = false
	}
}

// sendRef sends (or merges) a ref for pg from this node's host, on behalf
// of request id, made for cred (errors come back to it).
func (e *Engine) sendRef(now time.Duration, pg *page, id uint64, cred Cred, min gva.Version) {
	var fl noc.Flags = noc.FlagPath
	if pg.huge {
		fl |= noc.FlagHuge
	}
	f := newFrame(noc.ClassLoad, OpRef, fl, e.self, e.guessOwner(pg.key), id, pg.key, min, appendRef(e.hostPay[:0], 0, cred, 0))
	e.handleUp(now, noc.LocalPort, &f)
}

// sendContent answers a ref that came up port p, with the attributes of
// ent's page when this node knows them.
func (e *Engine) sendContent(ent *pathcache.Entry, p noc.PortID, id uint64, v gva.Version, owner noc.NodeID, huge bool, content []byte) {
	fl := noc.FlagPath | noc.FlagReply
	if huge {
		fl |= noc.FlagHuge
	}
	b := appendRefReply(e.pay[:0], 0, owner, ent.Attr, ent.HasAttr, content)
	f := newFrame(noc.ClassLoad, OpRef, fl, e.self, noc.BroadcastNode, id, ent.Key, v, b)
	e.sendPort(p, &f)
}

// sendGraft answers a ref of a requester without a path: the answer is
// routed to it, and every node on the way joins the tree.
func (e *Engine) sendGraft(ent *pathcache.Entry, dst noc.NodeID, id uint64, key gva.GVA, v gva.Version, owner noc.NodeID, huge bool, content []byte) {
	next, ok := e.liveHop(dst)
	if e.dbg != nil {
		e.debugf(key, "graft to %v by port %d (%v)", dst, next, ok)
	}
	if !ok {
		return // the requester re-sends
	}
	var rf uint8 = refGraft
	if !ent.Owner && next == ent.Up {
		rf |= refNotAdded
	} else {
		ent.Down, _ = ent.Down.Add(next)
	}
	fl := noc.FlagPath | noc.FlagReply
	if huge {
		fl |= noc.FlagHuge
	}
	b := appendRefReply(e.pay[:0], rf, owner, ent.Attr, ent.HasAttr, content)
	f := newFrame(noc.ClassLoad, OpRef, fl, e.self, dst, id, key, v, b)
	e.sendPort(next, &f)
	e.stats.Grafts++
	if ent.Version > v && rf&refNotAdded == 0 {
		// Versions after the content already went by: the new branch
		// learns its content is stale.
		x := newFrame(noc.ClassStore, OpInvalidate, fl&^noc.FlagReply, e.self, noc.BroadcastNode, 0, key, ent.Version, nil)
		e.sendPort(next, &x)
		e.stats.InvalidatesSent++
	}
}

// liveHop returns the port routing sends frames for dst by, if that port's
// link is up: routing may still name a link whose port-down this engine
// has already handled, and a branch added toward it would never be
// removed.
func (e *Engine) liveHop(dst noc.NodeID) (noc.PortID, bool) {
	p, _, ok := e.rt.NextHop(dst)
	if !ok {
		return 0, false
	}
	if _, up := e.rt.Neighbour(p); !up {
		return 0, false
	}
	return p, true
}

// guessOwner is where a request without a path is sent first: the owner
// this node last heard of, else the page's home (which knows the owner).
func (e *Engine) guessOwner(key gva.GVA) noc.NodeID {
	if h, ok := e.hintOwner(key); ok {
		return h // a failover named it lately
	}
	if pg := e.pages[key]; pg != nil && pg.ownerNode != e.self {
		return pg.ownerNode
	}
	if rec := e.home[key]; rec != nil && !rec.freed && rec.owner != e.self {
		return rec.owner
	}
	return homeOf(key)
}

func (e *Engine) ownerOf(pg *page) noc.NodeID {
	if pg.owner {
		return e.self
	}
	return pg.ownerNode
}

// handleRefReply installs content coming down and passes it on to what
// waits for it here.
func (e *Engine) handleRefReply(now time.Duration, in noc.PortID, f *noc.Frame) {
	if e.dbg != nil {
		e.debugf(f.GVA.Key(), "ref reply in=%d dst=%v v=%d", in, f.Dst, f.PageVersion)
	}
	rr, err := decodeRefReply(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	var ent *pathcache.Entry
	if rr.flags&refGraft != 0 {
		var ok bool
		if ent, ok = e.graftHop(now, in, f, rr); !ok || f.Dst != e.self {
			return
		}
	} else {
		var ok bool
		if ent, ok = e.cache.Peek(key); !ok || ent.Owner {
			e.notBranch(now, key, in) // a ref we forwarded, answered after we left the tree
			return
		}
		if ent.Up != in && in != noc.LocalPort {
			// Answered by the node our ref went up to before we moved (a
			// reset and a re-join elsewhere): it added us as a branch, we
			// hang below another node now. The content is as good.
			e.notBranch(now, key, in)
		}
		if rr.flags&refAttr != 0 {
			e.learnAttr(key, rr.attr)
		}
	}
	w := f.PageVersion
	ent.Version = max(ent.Version, w)
	if pg := e.pages[key]; pg != nil && !pg.owner && ent.Down.Has(noc.LocalPort) &&
		(pg.swap == nil || pg.swap.stage < stageGranted) {
		if !pg.has || w > pg.version {
			e.replaced(now, pg, w)
			e.advanced(pg, w)
			copy(e.pageBytes(pg), rr.content)
			pg.has, pg.version = true, w
			e.stats.Installs++
		}
		pg.ownerNode = rr.owner
		e.syncReplica(ent, pg)
		e.wake(now, pg)
	}
	e.deliver(now, key, ent, in, w, rr.owner, f.Flags&noc.FlagHuge != 0, rr.content)
}

// deliver passes content at version w to the open fetch's waiters below
// this node, and closes the fetch if w is what it asked for.
func (e *Engine) deliver(now time.Duration, key gva.GVA, ent *pathcache.Entry, except noc.PortID, w gva.Version, owner noc.NodeID, huge bool, content []byte) {
	fe := e.fetches[key]
	if fe == nil {
		return
	}
	for p := range fe.ports.All() {
		if p != noc.LocalPort && p != except {
			e.sendContent(ent, p, 0, w, owner, huge, content)
		}
	}
	for _, g := range fe.grafts {
		e.sendGraft(ent, g.node, g.id, key, w, owner, huge, content)
	}
	fe.grafts = fe.grafts[:0]
	if w >= fe.min {
		e.closeFetch(key)
	} else {
		fe.ports = fe.ports.Remove(noc.LocalPort)
	}
}

// graftHop runs one hop of a routed answer: the node joins the tree under
// the sender (or keeps its own place and tells the sender so), and the
// answer goes on toward the requester. It reports the node's entry and
// whether the node is attached to the tree.
func (e *Engine) graftHop(now time.Duration, in noc.PortID, f *noc.Frame, rr refReply) (*pathcache.Entry, bool) {
	key := f.GVA.Key()
	last := f.Dst == e.self
	next := noc.LocalPort
	stop := last // the answer goes no further
	if last {
		if pg := e.pages[key]; pg == nil || pg.maps == 0 || pg.owner {
			next = noc.NoPort // nothing to attach here any more
		}
	} else if p, ok := e.liveHop(f.Dst); ok {
		next = p
	} else {
		// No way on (routing lost the requester, or still names a link
		// that is down): the answer ends here, the requester re-sends.
		next, stop = noc.NoPort, true
	}
	if e.dbg != nil {
		e.debugf(key, "graft hop in=%d next=%d flags=%x", in, next, rr.flags)
	}
	added := rr.flags&refNotAdded == 0
	ent, found := e.cache.Peek(key)
	attached := true
	switch {
	case !found && added && next != noc.NoPort:
		var err error
		if ent, err = e.upsert(now, key); err != nil {
			return nil, false
		}
		ent.Up, ent.Huge = in, f.Flags&noc.FlagHuge != 0
		if m, ok := e.unrefd[key]; ok && m.port == in {
			// Our unref of an older entry may reach the sender after it
			// added us: tell it again that we are its branch.
			delete(e.unrefd, key)
			x := newFrame(noc.ClassLoad, OpAttach, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, f.PageVersion, nil)
			e.sendPort(in, &x)
		}
	case !found:
		attached = false
		if added {
			// The sender counts us as its branch: we are none.
			u := newFrame(noc.ClassLoad, OpUnref, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, 0, nil)
			e.sendPort(in, &u)
			e.markUnref(now, key, in)
		}
	case ent.Owner || ent.Up != in:
		if added {
			// The sender counts us as its branch, and we hang below
			// another port: remembered, so that a re-join below the
			// sender, which this unref may cross, tells it again
			// (dpu-sim seed 750, 16 nodes, every fault, R = 2: a node
			// detached from its own upstream re-joined below the sender
			// by a graft it routed, and the sender, its unref arrived
			// after, never counted it again: replicas there stayed valid
			// at an old version).
			u := newFrame(noc.ClassLoad, OpUnref, noc.FlagPath, e.self, noc.BroadcastNode, 0, key, 0, nil)
			e.sendPort(in, &u)
			e.markUnref(now, key, in)
		}
	}
	if attached && rr.flags&refAttr != 0 {
		ent.Attr, ent.HasAttr = rr.attr, true
		if pg := e.pages[key]; pg != nil {
			pg.attr, pg.hasAttr = rr.attr, true
		}
	}
	rf := rr.flags &^ refNotAdded
	// A node already on the tree may know a newer version than the answer
	// carries: the branch it now grafts never got the updates between.
	stale := attached && found && ent.Version > f.PageVersion
	if attached && next != noc.NoPort {
		ent.Version = max(ent.Version, f.PageVersion)
		if !ent.Owner && next == ent.Up {
			rf |= refNotAdded
		} else {
			ent.Down, _ = ent.Down.Add(next)
		}
	} else {
		rf |= refNotAdded
	}
	if stop {
		if attached && next == noc.NoPort {
			e.prune(now, ent)
			return ent, false
		}
		return ent, attached && last
	}
	g := *f
	g.Hops++
	if pg := e.pages[key]; stale && pg != nil && pg.has && (pg.owner || pg.version >= ent.Version) {
		// We hold the newer content: pass it on instead.
		a, aok := e.attrOf(pg, ent)
		g.Payload = appendRefReply(e.pay[:0], rf, e.ownerOf(pg), a, aok, e.pageBytes(pg))
		g.PageVersion = pg.version
		stale = false
	} else {
		b := append(e.pay[:0], f.Payload...)
		b[0] = rf
		g.Payload = b
	}
	e.sendPort(next, &g)
	if stale && rf&refNotAdded == 0 {
		// The branch gets the old content, then learns it is stale.
		fl := noc.FlagPath | f.Flags&noc.FlagHuge
		x := newFrame(noc.ClassStore, OpInvalidate, fl, e.self, noc.BroadcastNode, 0, key, ent.Version, nil)
		e.sendPort(next, &x)
		e.stats.InvalidatesSent++
	}
	return ent, attached
}
