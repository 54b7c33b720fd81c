package coherence

import (
	"encoding/binary"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/pathcache"
)

// Credentials between nodes.
//
// A host request is made for a user of the requesting node: Request.Cred,
// the uid, gid and supplementary groups its node's host interface read
// from the kernel (SO_PEERCRED). Every up-going request a host request
// causes (ref, store, atomic, acquire) carries them, right after its
// prefix, inside the sealed link datagrams: the requesting node vouches
// for its own users, as an NFS client does with AUTH_SYS.
//
//	uid (4), gid (4), n (1), n supplementary groups (4 each; n ≤ MaxCredGroups)
//
// Every node that serves such a request for another node checks the
// credentials against the page's attributes (Attr.Allows, the file-mode
// rules the host interface applies at the socket): the owner before a
// write, an atomic or an acquire reaches its arbiter, and any node on the
// page's tree before it answers a ref from its replica, merges it into a
// fetch under way or adds the sender to its down ports. A refusal goes
// back to the requester as EACCES, like any routed error. So a node that
// skips its own users' check (a bug, or a node that lies about its check
// but not about its users) gets neither content nor updates nor writes of
// a page its users may not use.
//
// A node's own users are checked by its host layer before they get here
// (admit.go), and again at Submit and at every retry (localAllowed) where
// the node knows the page's attributes: it holds the page, or relays it on its tree, and
// would otherwise serve them from what it holds (a relay installs the
// content that passes by into a replica its host asked for). Requests
// from noc.LocalPort are not checked again on the way up.
//
// Attributes travel with content: the ref answer, the transfer of
// ownership (OpData) and the owner's re-registration at the home
// (OpOwnerMoved) carry them, so every node on a page's tree knows them. A
// node asked to check a request for a page whose attributes it does not
// know (an owner promoted from a backup copy, an entry built by a root
// request's answer that lacked them) answers EAGAIN, which the requester
// retries, and asks the home with OpAttrQuery (request id 0), at most once
// per RetryInterval per page; credentials of uid 0 need no attributes.

// MaxCredGroups is the most supplementary groups a request carries; the
// host interface puts the page's group first when the user is in it.
const MaxCredGroups = 16

// credHead is the fixed part of encoded credentials.
const credHead = 4 + 4 + 1

// Cred identifies the user a host request is made for (gva's, where the
// permission rule lives). The zero Cred is root (uid 0), which every check
// allows; the first MaxCredGroups supplementary groups travel.
type Cred = gva.Cred

// Access bits of a page mode, per class.
const (
	AccessRead  = gva.AccessRead
	AccessWrite = gva.AccessWrite
)

// Allows reports whether c may access a page with attributes a as need,
// by the product's one permission rule (gva.AllowsAs).
func Allows(a Attr, c Cred, need uint32) bool { return gva.Allows(a, c, need) }

// appendUpHead encodes the prefix and credentials that start every
// up-going request.
func appendUpHead(b []byte, target uint64, c Cred) []byte {
	b = binary.BigEndian.AppendUint64(b, target)
	b = binary.BigEndian.AppendUint32(b, c.UID)
	b = binary.BigEndian.AppendUint32(b, c.GID)
	gs := c.Groups[:min(len(c.Groups), MaxCredGroups)]
	b = append(b, byte(len(gs)))
	for _, g := range gs {
		b = binary.BigEndian.AppendUint32(b, g)
	}
	return b
}

// upBody returns where the body of an up-going request starts (after its
// prefix and credentials), or -1 when they do not fit.
func upBody(p []byte) int {
	if len(p) < prefixLen+credHead {
		return -1
	}
	n := int(p[prefixLen+credHead-1])
	if n > MaxCredGroups || len(p) < prefixLen+credHead+4*n {
		return -1
	}
	return prefixLen + credHead + 4*n
}

// decodeCred reads the credentials of an up-going request (allocating the
// groups: for tests and tools; checks use credAllows).
func decodeCred(p []byte) (Cred, error) {
	end := upBody(p)
	if end < 0 {
		return Cred{}, errMalformed
	}
	c := Cred{UID: binary.BigEndian.Uint32(p[prefixLen:]), GID: binary.BigEndian.Uint32(p[prefixLen+4:])}
	for i := prefixLen + credHead; i < end; i += 4 {
		c.Groups = append(c.Groups, binary.BigEndian.Uint32(p[i:]))
	}
	return c, nil
}

// credAllows is Allows on the encoded credentials of up-going request p
// (which validUp accepted).
func credAllows(a Attr, p []byte, need uint32) bool {
	end := upBody(p)
	if end < 0 {
		return false
	}
	uid := binary.BigEndian.Uint32(p[prefixLen:])
	member := binary.BigEndian.Uint32(p[prefixLen+4:]) == a.GID
	for i := prefixLen + credHead; i < end && !member; i += 4 {
		member = binary.BigEndian.Uint32(p[i:]) == a.GID
	}
	return gva.AllowsAs(a, uid, member, need)
}

// credRoot reports whether up-going request p is made for uid 0.
func credRoot(p []byte) bool {
	return len(p) >= prefixLen+4 && binary.BigEndian.Uint32(p[prefixLen:]) == 0
}

// accessOf is the access an up-going request needs: read for a ref, write
// for a store, both for an atomic and for an acquire (ownership hands the
// acquirer the content).
func accessOf(c noc.Class) uint32 {
	switch c {
	case noc.ClassLoad:
		return AccessRead
	case noc.ClassStore:
		return AccessWrite
	}
	return AccessRead | AccessWrite
}

// vouched checks up-going request f, which another node vouches for,
// against the page's attributes where this node serves it (the owner, or
// a node on the tree). It answers f itself and returns false when f may
// not go on: EACCES, or EAGAIN while the attributes are being asked for.
// Requests of this node's own host (in == noc.LocalPort) are checked the
// same way: the host layer admitted them (admit.go) from the attributes
// it knew or asked the home for, but one it let go out because the home
// could not answer (down, restarting), or that is served here after all
// (held at this node through a swap or a takeover that made it the
// owner), is served only once this node knows the page's attributes.
func (e *Engine) vouched(now time.Duration, in noc.PortID, f *noc.Frame, pg *page, ent *pathcache.Entry) bool {
	if credRoot(f.Payload) || in != noc.LocalPort && bugsCompiled && e.cfg.Bug == BugTrustVouched {
		return true
	}
	a, ok := e.attrOf(pg, ent)
	if !ok {
		e.stats.AttrUnknown++
		e.askAttr(now, f.GVA.Key())
		e.fail(now, f, syscall.EAGAIN)
		return false
	}
	if !credAllows(a, f.Payload, accessOf(f.Class)) {
		e.stats.Refused++
		if e.dbg != nil {
			e.debugf(f.GVA.Key(), "refused %v/%d from %v: mode %#o owner %d:%d", f.Class, f.Op, f.Src, a.Mode, a.UID, a.GID)
		}
		e.fail(now, f, syscall.EACCES)
		return false
	}
	return true
}

// localAllowed checks a request of this node's own host against the
// page's attributes, where this node knows them (it holds the page, or
// relays it on its tree): the host layer checked it already, but the
// node serves it from what it holds, so a broken or skipped host check
// must not hand its users what the page's mode keeps from them. Where
// the node does not know them, the request goes out and the node that
// serves it checks it (vouched).
func (e *Engine) localAllowed(r *request) bool {
	need := accessFor(r.hr.Op)
	if need == 0 || r.hr.Cred.UID == 0 {
		return true
	}
	ent, _ := e.cache.Peek(r.key)
	a, ok := e.attrOf(e.pages[r.key], ent)
	return !ok || Allows(a, r.hr.Cred, need)
}

// attrOf returns the attributes this node knows for a page: its page's,
// else its path cache entry's.
func (e *Engine) attrOf(pg *page, ent *pathcache.Entry) (Attr, bool) {
	switch {
	case pg != nil && pg.hasAttr:
		return pg.attr, true
	case ent != nil && ent.HasAttr:
		return ent.Attr, true
	case pg != nil:
		if ent, ok := e.cache.Peek(pg.key); ok && ent.HasAttr {
			return ent.Attr, true
		}
	}
	return Attr{}, false
}

// learnAttr keeps a page's attributes where this node holds the page or
// an entry of it.
func (e *Engine) learnAttr(key gva.GVA, a Attr) {
	if pg := e.pages[key]; pg != nil {
		pg.attr, pg.hasAttr = a, true
	}
	if ent, ok := e.cache.Peek(key); ok {
		ent.Attr, ent.HasAttr = a, true
	}
}

// maxAttrAsks bounds the pages whose attributes this node asks for at once.
const maxAttrAsks = 1024

// askAttr asks the page's home for its attributes, unless it was asked
// within RetryInterval; the answer (request id 0) is learned.
func (e *Engine) askAttr(now time.Duration, key gva.GVA) {
	if at, ok := e.attrAsks[key]; ok && now < at+e.cfg.RetryInterval {
		return
	}
	if len(e.attrAsks) >= maxAttrAsks {
		for k, at := range e.attrAsks {
			if now >= at+e.cfg.RetryInterval {
				delete(e.attrAsks, k)
			}
		}
		if len(e.attrAsks) >= maxAttrAsks {
			return
		}
	}
	e.attrAsks[key] = now
	home := homeOf(key)
	if home == e.self {
		if rec := e.home[key]; rec != nil && rec.hasAttr {
			delete(e.attrAsks, key)
			e.learnAttr(key, rec.attr)
		}
		return
	}
	f := newFrame(noc.ClassControl, OpAttrQuery, 0, e.self, home, 0, key, 0, nil)
	e.sendNode(&f)
}
