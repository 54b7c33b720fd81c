package coherence

import (
	"encoding/binary"
	"syscall"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Page attributes beyond their home.
//
// A page's owner and mode (Attr) are fixed when its home allocates it and
// the home keeps them in its record for as long as the page lives, wherever
// ownership moves. A node asked for the attributes of a page homed
// elsewhere (HostStat, which the host interface uses to check its users
// against the page's mode) asks the home with OpAttrQuery, routed; the home
// answers with the attributes, ENOENT for a page it freed or never made,
// ESTALE for a page of an earlier run it has no record of (stale.go), or
// EHOSTDOWN when its record has none (it restarted and has not yet heard
// from the owner, whose refresh carries them again, or the owner too lost
// them). The owner and the nodes on the page's tree ask the same question
// with request id 0 when they must check another node's user (cred.go). So a mode that
// lets others in on the home lets them in on every node, and a mode that
// keeps them out keeps them out everywhere.
//
//	OpAttrQuery          payload empty; routed to the home
//	OpAttrQuery|Reply    uid(4) gid(4) mode(4)
//	OpAttrQuery|Error    errno(4)

// attrLen is the payload of an attribute answer.
const attrLen = 12

func appendAttr(b []byte, a Attr) []byte {
	b = binary.BigEndian.AppendUint32(b, a.UID)
	b = binary.BigEndian.AppendUint32(b, a.GID)
	return binary.BigEndian.AppendUint32(b, a.Mode)
}

// decodeAttr parses an attribute answer; a mode with bits beyond the
// permission bits (0o777) is malformed.
func decodeAttr(p []byte) (Attr, error) {
	if len(p) != attrLen {
		return Attr{}, errMalformed
	}
	a := Attr{UID: binary.BigEndian.Uint32(p), GID: binary.BigEndian.Uint32(p[4:]), Mode: binary.BigEndian.Uint32(p[8:])}
	if a.Mode&^0o777 != 0 {
		return Attr{}, errMalformed
	}
	return a, nil
}

// hostStat asks the home of a page homed elsewhere for its attributes
// (a page homed here is answered by Hosts from its own table). Re-sent at
// every retry until the request's bound.
func (e *Engine) hostStat(now time.Duration, r *request) {
	home := homeOf(r.key)
	if home == e.self {
		rec := e.home[r.key]
		if (rec == nil && e.staleAtHome(r.key) || rec != nil && !rec.hasAttr) && e.inGrace() {
			e.retryLater(now, r, syscall.EHOSTDOWN) // restarted lately: the owner's refresh brings them
			return
		}
		if rec == nil || rec.freed || !rec.hasAttr {
			e.completeErr(now, r, syscall.ENOENT, "stat: no such page")
			return
		}
		e.complete(now, r, Completion{Attr: rec.attr})
		return
	}
	f := newFrame(noc.ClassControl, OpAttrQuery, 0, e.self, home, r.id, r.key, 0, nil)
	e.sendNode(&f)
	e.retryLater(now, r, syscall.EHOSTDOWN)
}

// handleAttrQuery answers a query at the home, or completes the request
// the answer is for.
func (e *Engine) handleAttrQuery(now time.Duration, f *noc.Frame) {
	key := f.GVA.Key()
	if f.Flags&noc.FlagReply == 0 {
		if len(f.Payload) != 0 || f.GVA.Offset() != 0 {
			e.malformed()
			return
		}
		var errno syscall.Errno
		rec := e.home[key]
		switch {
		case homeOf(key) == e.self && rec == nil && e.staleAtHome(key) && e.inGrace():
			errno = syscall.EAGAIN // restarted lately: the owner's refresh brings the record and the attributes
		case homeOf(key) == e.self && rec == nil && e.staleAtHome(key):
			errno = syscall.ESTALE
		case homeOf(key) != e.self || rec == nil || rec.freed:
			errno = syscall.ENOENT
		case !rec.hasAttr && e.inGrace():
			errno = syscall.EAGAIN
		case !rec.hasAttr:
			errno = syscall.EHOSTDOWN
		}
		if errno != 0 {
			var b [errnoLen]byte
			binary.BigEndian.PutUint32(b[:], uint32(errno))
			a := newFrame(noc.ClassControl, OpAttrQuery, noc.FlagReply|noc.FlagError, e.self, f.Src, f.RequestID, key, 0, b[:])
			e.sendNode(&a)
			return
		}
		var b [attrLen]byte
		a := newFrame(noc.ClassControl, OpAttrQuery, noc.FlagReply, e.self, f.Src, f.RequestID, key, 0, appendAttr(b[:0], rec.attr))
		e.sendNode(&a)
		return
	}
	if f.RequestID == 0 && f.Src == homeOf(key) {
		// The answer to this node's own question (askAttr, cred.go).
		if f.Flags&noc.FlagError != 0 {
			if _, err := decodeErrno(f.Payload); err != nil {
				e.malformed()
			}
			return // asked again at the next request that needs them
		}
		a, err := decodeAttr(f.Payload)
		if err != nil {
			e.malformed()
			return
		}
		delete(e.attrAsks, key)
		e.learnAttr(key, a)
		return
	}
	r := e.reqs[f.RequestID]
	if r == nil || r.hr.Op != HostStat || r.key != key || f.Src != homeOf(key) {
		e.stats.Stale++
		return
	}
	if f.Flags&noc.FlagError != 0 {
		errno, err := decodeErrno(f.Payload)
		if err != nil {
			e.malformed()
			return
		}
		if errno == syscall.EAGAIN {
			e.retryLater(now, r, errno) // the home restarted lately
			return
		}
		e.completeErr(now, r, errno, "stat: the page's home answered")
		return
	}
	a, err := decodeAttr(f.Payload)
	if err != nil {
		e.malformed()
		return
	}
	e.complete(now, r, Completion{Attr: a})
}

// recordAttr keeps a new page's attributes in its home record.
func (rec *homeRecord) recordAttr(a Attr) { rec.attr, rec.hasAttr = a, true }

// inGrace: this node started less than two home refresh periods ago, so
// owners elsewhere may not yet have told it their records (and the
// pages' attributes) again.
func (e *Engine) inGrace() bool { return e.now < e.born+2*e.cfg.HomeRefresh }
