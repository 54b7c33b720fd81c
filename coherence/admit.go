package coherence

import (
	"container/heap"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
)

// Admission: the one permission check of a host request.
//
// A session's request made for a user other than root (Request.Cred) that
// reads or writes a page (ref, load, store, compare-and-swap, fetch-add,
// acquire, lock, where) is checked here, in the core's step, against the
// page's attributes before the engine sees it: the page's mode decides
// by the file-mode rule (gva.Allows), and a refusal is EACCES at once.
// Free is checked at the allocator (its owner or root, start). The
// attributes come from what the node knows, in this order:
//
//   - the allocation record of a page allocated here (Hosts.attrs);
//   - the page held here, or its path cache entry (attributes travel with
//     content and ownership, cred.go);
//   - the attributes remembered from an earlier check (Hosts.known, at
//     most Config.AttrCache pages, least recently used out first: they
//     never change while a page lives);
//   - else the request waits in its session for a HostStat of its page
//     (the home answers, attrs.go), within the request's own bound, and
//     then is checked and starts; a page its home says does not exist
//     fails with ENOENT. When the home cannot say (down, restarting, or
//     with no record of a page of its earlier run, which may live on at
//     a backup that took it over) the request goes out unchecked here:
//     the node that serves it checks it (below), this node included.
//     A where, which only this node answers, then fails unless the node
//     learnt the page's attributes meanwhile (whereUnchecked).
//
// A request that passes carries its user's credentials on (the page's
// group first among them when the user has more supplementary groups
// than travel), and the nodes that serve it check them again (vouched):
// a node whose host layer skips the check (Config.Unchecked, the
// simulator's modified node) still gets nothing its users may not have.

// accessFor is the access a host request needs of its page (0: none is
// checked here).
func accessFor(op HostOp) uint32 {
	switch op {
	case HostRef, HostLoad, HostWhere:
		return AccessRead
	case HostStore:
		return AccessWrite
	case HostCAS, HostFetchAdd, HostAcquire, HostLock:
		return AccessRead | AccessWrite
	}
	return 0
}

// admit checks request r of a session before it starts. It returns true
// when r may start now; false when it ended (refused) or waits for its
// page's attributes (a HostStat step: advance resumes it).
func (h *Hosts) admit(now time.Duration, r *hostReq) bool {
	need := accessFor(r.hr.Op)
	if need == 0 || r.hr.Cred.UID == 0 || h.unchecked() {
		return true
	}
	key := r.hr.GVA.Key()
	if a, ok := h.attrOf(key); ok {
		return h.allowed(now, r, a)
	}
	switch errno, why := h.absentHere(key); errno {
	case syscall.ENOENT:
		h.fail(now, r, errno, why)
		return false
	case syscall.ESTALE:
		// a page of an earlier run of this node, which may live on at a
		// backup that took it over: the engine finds out, and the node
		// that serves it checks it
		r.unsure = errno
		return true
	}
	r.admitting = true
	if r.bound.idx < 0 {
		// one engine step no more: the request's own bound covers both
		r.bound = hostTimer{at: r.deadline, r: r, bound: true}
		heap.Push(&h.timers, &r.bound)
	}
	h.step(now, r, Request{Op: HostStat, GVA: key})
	return false
}

// admitted resumes request r after the HostStat that admit sent for it
// (completion c): it is checked and starts, or ends.
func (h *Hosts) admitted(now time.Duration, r *hostReq, c Completion) {
	r.admitting = false
	if r.abandon {
		// its caller gave up (or its bound passed): nothing was taken
		h.finish(now, r, Completion{Err: &HostError{Op: r.hr.Op, GVA: r.hr.GVA, Errno: syscall.ECANCELED}})
		return
	}
	switch errno := c.Errno(); errno {
	case 0:
	case syscall.ENOENT, syscall.EFAULT, syscall.EACCES:
		// the home's word: no such page
		h.fail(now, r, errno, "the page's attributes: "+errMsg(c.Err))
		return
	default:
		// The home cannot say now (it is down or restarting, or has no
		// record of a page of its earlier run that may live on at a
		// backup): the request goes out with its user's credentials, and
		// the node that serves it checks them once it knows the page's
		// attributes (vouched), as for every node's requests.
		r.statted, r.unsure = false, errno
		h.start(now, r)
		return
	}
	key := r.hr.GVA.Key()
	r.statted = true
	h.known.Add(key, c.Attr)
	h.e.learnAttr(key, c.Attr)
	if h.allowed(now, r, c.Attr) {
		h.start(now, r)
	}
}

// allowed checks r's user against attributes a: true when the request
// may go on (its credentials then carry the page's group where it
// matters), false when it was refused with EACCES.
func (h *Hosts) allowed(now time.Duration, r *hostReq, a Attr) bool {
	cred := r.hr.Cred
	if bugsCompiled && h.e.cfg.Bug == BugAdmitNoGroups {
		cred.Groups = nil
	}
	if !Allows(a, cred, accessFor(r.hr.Op)) {
		h.e.stats.Refused++
		h.fail(now, r, syscall.EACCES, fmt.Sprintf("page mode %#o owner %d:%d", a.Mode, a.UID, a.GID))
		return false
	}
	r.hr.Cred = groupFirst(r.hr.Cred, a.GID)
	r.checked = true
	return true
}

// whereUnchecked ends Where r, with errno (else with what made admission
// let it out unchecked), when its user is one this node checks and it
// was not checked: the page's home could not say, and the engine's
// answer would name the location of a page to a user who may not read
// it, or one made up for a page that does not exist. Attributes learnt
// since are checked now. It reports whether r ended.
func (h *Hosts) whereUnchecked(now time.Duration, r *hostReq, errno syscall.Errno) bool {
	if r.checked || r.hr.Cred.UID == 0 || h.unchecked() {
		return false
	}
	if a, ok := h.attrOf(r.hr.GVA.Key()); ok {
		return !h.allowed(now, r, a)
	}
	if errno == 0 {
		errno = r.unsure
	}
	if errno == 0 {
		errno = syscall.EHOSTDOWN
	}
	h.fail(now, r, errno, fmt.Sprintf("where: the page's home cannot say whether uid %d may see it", r.hr.Cred.UID))
	return true
}

// unchecked reports whether this node's host layer vouches for its users
// without checking them (Config.Unchecked, or the planted bug's hook).
func (h *Hosts) unchecked() bool {
	return h.e.cfg.Unchecked || bugsCompiled && bugSkipHostChecks(h.e.self)
}

// attrOf returns the attributes the node knows of page key without
// asking its home (see the order above).
func (h *Hosts) attrOf(key gva.GVA) (Attr, bool) {
	if a, ok := h.attrs[key]; ok {
		return a, true
	}
	ent, _ := h.e.cache.Peek(key)
	if a, ok := h.e.attrOf(h.e.pages[key], ent); ok {
		return a, true
	}
	return h.known.Get(key)
}

// groupFirst returns c with group gid first among its supplementary
// groups when c has more than travel (MaxCredGroups) and gid is among
// the ones that would not: the nodes that check it must see the
// membership that lets it in.
func groupFirst(c Cred, gid uint32) Cred {
	if len(c.Groups) <= MaxCredGroups {
		return c
	}
	i := slices.Index(c.Groups, gid)
	if i < MaxCredGroups {
		return c // not a member, or among the groups that travel
	}
	gs := make([]uint32, 0, MaxCredGroups)
	gs = append(gs, gid)
	c.Groups = append(gs, c.Groups[:MaxCredGroups-1]...)
	return c
}
