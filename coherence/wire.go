package coherence

import (
	"encoding/binary"
	"errors"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Ops of the Load class.
const (
	// OpRef asks for the page's content (ref, or re-fetch of an invalid
	// replica) and records the path. Up, hop by hop.
	OpRef noc.Op = 1
	// OpUnref removes the arrival port from the page's down set. Up.
	OpUnref noc.Op = 2
	// OpDetach tells the subtree below that its path to the owner is gone:
	// entries are dropped, replicas become invalid and re-ref. Down.
	OpDetach noc.Op = 3
	// OpAttach tells the up neighbour "I am your branch" after this node
	// re-joined the tree under it while an unref of its old entry was still
	// on its way (the unref must not cut the new branch). One hop, up;
	// version = the sender's entry version.
	OpAttach noc.Op = 4
)

// Ops of the Store class.
const (
	// OpStore is a write-through to the owner. Up.
	OpStore noc.Op = 1
	// OpUpdate carries a small write (data + version) down the tree.
	OpUpdate noc.Op = 2
	// OpInvalidate carries a large write's version down the tree.
	OpInvalidate noc.Op = 3
)

// Ops of the Atomic class.
const (
	// OpCAS is a 64-bit compare-and-swap executed at the owner. Up.
	OpCAS noc.Op = 1
	// OpFetchAdd is a 64-bit fetch-and-add executed at the owner. Up.
	OpFetchAdd noc.Op = 2
)

// Ops of the Control class (ownership protocol), inside
// noc.OpCoherenceFirst..noc.OpCoherenceLast.
const (
	// OpAcquire asks the owner for ownership. Up, hop by hop, collecting
	// its route.
	OpAcquire = noc.OpCoherenceFirst + iota
	// OpGrant answers an acquire: the owner is now swapping. Routed.
	OpGrant
	// OpDeny answers an acquire: retry later (errno in the payload). Routed.
	OpDeny
	// OpData is the single content transfer of a swap. Routed.
	OpData
	// OpDataAck confirms the content (or refuses it). Routed.
	OpDataAck
	// OpDone confirms the swap and flips the path cache entries on its way
	// down the acquire's route (or routed, when retransmitted).
	OpDone
	// OpAbort tells the acquirer that the swap was called off. Routed.
	OpAbort
	// OpOwnerMoved tells a page's home machine who owns the page now.
	// Routed.
	OpOwnerMoved
	// OpOwnerMovedAck acknowledges OpOwnerMoved. Routed.
	OpOwnerMovedAck
	// OpOwnerQuery asks a page's home who owns the page (an acquirer whose
	// old owner restarted before it confirmed the swap). Routed; the home
	// answers OpOwnerQuery|FlagReply with the record, or an error.
	OpOwnerQuery
	// OpAttrQuery asks a page's home for the page's attributes (see
	// attrs.go). Routed.
	OpAttrQuery
	// OpReplicate carries a staged write (or the full content) from a
	// page's owner to one of its backups (replicas = R > 1). Routed.
	OpReplicate
	// OpReplicateAck tells the owner which version a backup holds (or that
	// it needs the full content). Routed.
	OpReplicateAck
	// OpReplicaDrop tells a backup to forget its copy of a page (the owner
	// handed the page over, freed it, or chose another backup). Routed.
	OpReplicaDrop
	// OpFailover announces a backup that took a dead owner's page over:
	// flooded on every port once per node.
	OpFailover
	// OpPlace offers a page's ownership to the node that dominates its
	// writes (placement.go): it may ask for it with an acquire. Routed.
	OpPlace
	opControlEnd
)

// Payload sizes.
const (
	prefixLen    = 8 // target incarnation of an up-going request
	errnoLen     = 4
	refBody      = 1     // after prefix and credentials: flags
	refReplyHead = 1 + 4 // flags, owner node id before the attributes (if any) and the content
	casBody      = 16    // after prefix and credentials: expected, desired
	faddBody     = 8     // after prefix and credentials: delta
	atomicReply  = 9
	acquireBody  = 1 + 2 + 8 + 8 + 1 // after prefix and credentials: flags, losses, wait start, requester incarnation, route length
	grantLen     = 8 + 8 + 8         // owner incarnation, epoch, swap sequence
	dataHead     = 8 + 8 + 1         // epoch, swap sequence, flags
	dataAckLen   = 8 + 8 + 8         // requester incarnation, expected owner incarnation, swap sequence
	doneHead     = 1 + 8 + 1         // flags, swap sequence, route length
	abortLen     = 8 + 8             // swap sequence, sender's incarnation
	movedLen     = 4 + 8 + 8         // owner, owner incarnation, epoch
	maxRoute     = 64                // most ports an acquire's route may record
)

// Ref and ref reply flags.
const (
	// refGraft: a ref sent by a node without an entry (routed toward the
	// home or owner, recording nothing); its answer is routed back to the
	// requester and builds the path top-down.
	refGraft = 1 << 0
	// refNotAdded (replies only): the sender could not add the receiver to
	// its down set (the receiver is its up neighbour).
	refNotAdded = 1 << 1
	// refAttr (replies only): the page's attributes (12 bytes) come
	// before the content.
	refAttr = 1 << 2
)

// Acquire flags.
const (
	acquireLock  = 1 << 0 // the acquirer pins the page when it becomes owner
	acquirePlace = 1 << 1 // a placement acquire (placement.go): granted only if the policy names the acquirer
)

// Done flags.
const (
	doneBroken = 1 << 0 // the route was found broken on the way: do not graft the arrival port
	doneRouted = 1 << 1 // retransmitted by routing, not along the route
)

// Data flags.
const (
	dataHuge = 1 << 0
	dataAttr = 1 << 1 // the page's attributes (12 bytes) come before the content
	// dataReplies: the page's reply records (resend.go) follow the
	// content, before the stand-ins.
	dataReplies = 1 << 2
)

// errMalformed is wrapped by every payload decoder's error.
var errMalformed = errors.New("coherence: malformed payload")

// prefixRouted, in the prefix of an up-going request, says the last node
// sent it by routing, off the page's tree (the other 63 bits are the
// target incarnation).
const prefixRouted = 1 << 63

// upPrefix reads the prefix that starts every up-going request: the target
// incarnation and whether the last hop was routed off the tree.
func upPrefix(p []byte) (target uint64, routed bool) {
	if len(p) < prefixLen {
		return 0, false
	}
	v := binary.BigEndian.Uint64(p)
	return v &^ prefixRouted, v&prefixRouted != 0
}

// storeReq is a decoded OpStore payload.
type storeReq struct {
	target uint64
	data   []byte // aliases the frame
}

func decodeStore(g gva.GVA, p []byte) (storeReq, error) {
	body := upBody(p)
	if body < 0 {
		return storeReq{}, errMalformed
	}
	t, _ := upPrefix(p)
	d := p[body:]
	if len(d) == 0 || int(g.Offset())+len(d) > gva.PageSize {
		return storeReq{}, errMalformed
	}
	return storeReq{target: t, data: d}, nil
}

// updateData checks an OpUpdate payload against the frame's offset.
func decodeUpdate(g gva.GVA, p []byte) ([]byte, error) {
	if len(p) == 0 || int(g.Offset())+len(p) > gva.PageSize {
		return nil, errMalformed
	}
	return p, nil
}

// atomicReq is a decoded OpCAS or OpFetchAdd payload.
type atomicReq struct {
	target            uint64
	expected, operand uint64 // CAS: expected, desired; fetch-add: operand = delta
}

func decodeAtomic(op noc.Op, g gva.GVA, p []byte) (atomicReq, error) {
	body := upBody(p)
	if g.Offset()%8 != 0 || body < 0 {
		return atomicReq{}, errMalformed
	}
	switch op {
	case OpCAS:
		if len(p) != body+casBody {
			return atomicReq{}, errMalformed
		}
		return atomicReq{
			target:   binary.BigEndian.Uint64(p),
			expected: binary.BigEndian.Uint64(p[body:]),
			operand:  binary.BigEndian.Uint64(p[body+8:]),
		}, nil
	case OpFetchAdd:
		if len(p) != body+faddBody {
			return atomicReq{}, errMalformed
		}
		return atomicReq{target: binary.BigEndian.Uint64(p), operand: binary.BigEndian.Uint64(p[body:])}, nil
	}
	return atomicReq{}, errMalformed
}

func appendAtomic(b []byte, op noc.Op, target uint64, c Cred, expected, operand uint64) []byte {
	b = appendUpHead(b, target, c)
	if op == OpCAS {
		b = binary.BigEndian.AppendUint64(b, expected)
	}
	return binary.BigEndian.AppendUint64(b, operand)
}

// atomicResult is a decoded atomic reply.
type atomicResult struct {
	prev    uint64
	swapped bool
}

func decodeAtomicReply(p []byte) (atomicResult, error) {
	if len(p) != atomicReply || p[8] > 1 {
		return atomicResult{}, errMalformed
	}
	return atomicResult{prev: binary.BigEndian.Uint64(p), swapped: p[8] == 1}, nil
}

func appendAtomicReply(b []byte, r atomicResult) []byte {
	b = binary.BigEndian.AppendUint64(b, r.prev)
	if r.swapped {
		return append(b, 1)
	}
	return append(b, 0)
}

// decodeRef reads an OpRef request payload.
func decodeRef(p []byte) (target uint64, flags uint8, err error) {
	body := upBody(p)
	if body < 0 || len(p) != body+refBody || p[body]&^refGraft != 0 {
		return 0, 0, errMalformed
	}
	return binary.BigEndian.Uint64(p), p[body], nil
}

// appendRef encodes an OpRef request payload.
func appendRef(b []byte, target uint64, c Cred, flags uint8) []byte {
	return append(appendUpHead(b, target, c), flags)
}

// refReply is a decoded OpRef reply: the page's content at the frame's
// version, and its attributes when the sender knows them.
type refReply struct {
	flags   uint8
	owner   noc.NodeID
	attr    Attr   // with refAttr
	content []byte // aliases the frame
}

func decodeRefReply(p []byte) (refReply, error) {
	if len(p) < refReplyHead || p[0]&^(refGraft|refNotAdded|refAttr) != 0 {
		return refReply{}, errMalformed
	}
	r := refReply{flags: p[0], owner: noc.NodeID(binary.BigEndian.Uint32(p[1:]))}
	rest := p[refReplyHead:]
	if r.flags&refAttr != 0 {
		if len(rest) < attrLen {
			return refReply{}, errMalformed
		}
		a, err := decodeAttr(rest[:attrLen])
		if err != nil {
			return refReply{}, err
		}
		r.attr, rest = a, rest[attrLen:]
	}
	if len(rest) != gva.PageSize {
		return refReply{}, errMalformed
	}
	r.content = rest
	return r, nil
}

// appendRefReply encodes a ref answer; the attributes go with it when
// the sender knows them (ok).
func appendRefReply(b []byte, flags uint8, owner noc.NodeID, a Attr, ok bool, content []byte) []byte {
	if ok {
		flags |= refAttr
	} else {
		flags &^= refAttr
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(owner))
	if ok {
		b = appendAttr(b, a)
	}
	return append(b, content...)
}

// acquireReq is a decoded OpAcquire payload.
type acquireReq struct {
	target    uint64
	cred      Cred
	flags     uint8
	losses    uint16
	waitStart int64
	inc       uint64 // the requester's incarnation
	route     []byte // 2 bytes per recorded arrival port; aliases the frame
}

func decodeAcquire(p []byte) (acquireReq, error) {
	c, err := decodeCred(p)
	if err != nil {
		return acquireReq{}, err
	}
	body := upBody(p)
	head := body + acquireBody
	if len(p) < head {
		return acquireReq{}, errMalformed
	}
	n := int(p[head-1])
	if n > maxRoute || len(p) != head+2*n {
		return acquireReq{}, errMalformed
	}
	q := p[body:]
	return acquireReq{
		target:    binary.BigEndian.Uint64(p),
		cred:      c,
		flags:     q[0],
		losses:    binary.BigEndian.Uint16(q[1:]),
		waitStart: int64(binary.BigEndian.Uint64(q[3:])),
		inc:       binary.BigEndian.Uint64(q[11:]),
		route:     p[head:],
	}, nil
}

// acquireRouteLen is the offset of an acquire's route length (valid after
// validUp).
func acquireRouteLen(p []byte) int { return upBody(p) + acquireBody - 1 }

func appendAcquire(b []byte, a acquireReq) []byte {
	b = appendUpHead(b, a.target, a.cred)
	b = append(b, a.flags)
	b = binary.BigEndian.AppendUint16(b, a.losses)
	b = binary.BigEndian.AppendUint64(b, uint64(a.waitStart))
	b = binary.BigEndian.AppendUint64(b, a.inc)
	b = append(b, byte(len(a.route)/2))
	return append(b, a.route...)
}

// routePort returns the i-th port of an encoded route.
func routePort(route []byte, i int) noc.PortID {
	return noc.PortID(binary.BigEndian.Uint16(route[2*i:]))
}

// A swap is named by the acquirer's node and request id; seq, chosen by
// the owner for every grant, tells apart the attempts of one request.

// grantMsg is a decoded OpGrant payload.
type grantMsg struct {
	ownerInc uint64
	epoch    uint64
	seq      uint64
}

func decodeGrant(p []byte) (grantMsg, error) {
	if len(p) != grantLen {
		return grantMsg{}, errMalformed
	}
	return grantMsg{ownerInc: binary.BigEndian.Uint64(p), epoch: binary.BigEndian.Uint64(p[8:]), seq: binary.BigEndian.Uint64(p[16:])}, nil
}

func appendGrant(b []byte, g grantMsg) []byte {
	b = binary.BigEndian.AppendUint64(b, g.ownerInc)
	b = binary.BigEndian.AppendUint64(b, g.epoch)
	return binary.BigEndian.AppendUint64(b, g.seq)
}

// dataMsg is a decoded OpData payload.
type dataMsg struct {
	epoch   uint64
	seq     uint64
	flags   uint8
	attr    Attr // with dataAttr
	content []byte
	// replies: the page's reply records block (with dataReplies),
	// decoded by decodeReplies.
	replies []byte
	// backups: the old owner's backups (replicas > 1), which keep their
	// copies until the new owner's backups hold the page. Absent when
	// empty.
	backups []noc.NodeID
}

func decodeData(p []byte) (dataMsg, error) {
	if len(p) < dataHead || p[16]&^(dataHuge|dataAttr|dataReplies) != 0 {
		return dataMsg{}, errMalformed
	}
	d := dataMsg{epoch: binary.BigEndian.Uint64(p), seq: binary.BigEndian.Uint64(p[8:]), flags: p[16]}
	at := dataHead
	if d.flags&dataAttr != 0 {
		if len(p) < at+attrLen {
			return dataMsg{}, errMalformed
		}
		a, err := decodeAttr(p[at : at+attrLen])
		if err != nil {
			return dataMsg{}, err
		}
		d.attr, at = a, at+attrLen
	}
	if len(p) < at+gva.PageSize {
		return dataMsg{}, errMalformed
	}
	d.content = p[at : at+gva.PageSize]
	rest := p[at+gva.PageSize:]
	if d.flags&dataReplies != 0 {
		n, err := repliesSize(rest)
		if err != nil {
			return dataMsg{}, err
		}
		d.replies, rest = rest[:n], rest[n:]
	}
	if len(rest) > 0 {
		n := int(rest[0])
		if n == 0 || n > MaxReplicas || len(rest) != 1+4*n {
			return dataMsg{}, errMalformed
		}
		for i := range n {
			d.backups = append(d.backups, noc.NodeID(binary.BigEndian.Uint32(rest[1+4*i:])))
		}
	}
	return d, nil
}

func appendData(b []byte, d dataMsg) []byte {
	b = binary.BigEndian.AppendUint64(b, d.epoch)
	b = binary.BigEndian.AppendUint64(b, d.seq)
	b = append(b, d.flags)
	if d.flags&dataAttr != 0 {
		b = appendAttr(b, d.attr)
	}
	b = append(b, d.content...)
	if d.flags&dataReplies != 0 {
		b = append(b, d.replies...)
	}
	if len(d.backups) > 0 {
		b = append(b, uint8(len(d.backups)))
		for _, n := range d.backups {
			b = binary.BigEndian.AppendUint32(b, uint32(n))
		}
	}
	return b
}

// dataAckMsg is a decoded OpDataAck payload.
type dataAckMsg struct {
	inc      uint64 // the acquirer's incarnation
	ownerInc uint64 // the incarnation of the owner that granted
	seq      uint64
}

func decodeDataAck(p []byte) (dataAckMsg, error) {
	if len(p) != dataAckLen {
		return dataAckMsg{}, errMalformed
	}
	return dataAckMsg{inc: binary.BigEndian.Uint64(p), ownerInc: binary.BigEndian.Uint64(p[8:]), seq: binary.BigEndian.Uint64(p[16:])}, nil
}

func appendDataAck(b []byte, m dataAckMsg) []byte {
	b = binary.BigEndian.AppendUint64(b, m.inc)
	b = binary.BigEndian.AppendUint64(b, m.ownerInc)
	return binary.BigEndian.AppendUint64(b, m.seq)
}

// doneMsg is a decoded OpDone payload.
type doneMsg struct {
	flags uint8
	seq   uint64
	route []byte
}

func decodeDone(p []byte) (doneMsg, error) {
	if len(p) < doneHead || p[0]&^(doneBroken|doneRouted) != 0 {
		return doneMsg{}, errMalformed
	}
	n := int(p[doneHead-1])
	if n > maxRoute || len(p) != doneHead+2*n {
		return doneMsg{}, errMalformed
	}
	return doneMsg{flags: p[0], seq: binary.BigEndian.Uint64(p[1:]), route: p[doneHead:]}, nil
}

func appendDone(b []byte, d doneMsg) []byte {
	b = append(b, d.flags)
	b = binary.BigEndian.AppendUint64(b, d.seq)
	b = append(b, byte(len(d.route)/2))
	return append(b, d.route...)
}

// decodeAbort reads an OpAbort payload: the swap sequence and the
// incarnation of the node that sends it.
func decodeAbort(p []byte) (seq, inc uint64, err error) {
	if len(p) != abortLen {
		return 0, 0, errMalformed
	}
	return binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), nil
}

func appendMoved(b []byte, m movedMsg) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.owner))
	b = binary.BigEndian.AppendUint64(b, m.ownerInc)
	b = binary.BigEndian.AppendUint64(b, m.epoch)
	if m.hasAttr {
		b = appendAttr(b, m.attr)
	}
	return b
}

// movedMsg is a decoded OpOwnerMoved payload (also the answer of
// OpOwnerQuery).
type movedMsg struct {
	owner    noc.NodeID
	ownerInc uint64
	epoch    uint64
	// attr: the page's attributes, when the owner knows them: a home
	// that restarted learns them again with the record.
	attr    Attr
	hasAttr bool
}

func decodeMoved(p []byte) (movedMsg, error) {
	if len(p) != movedLen && len(p) != movedLen+attrLen {
		return movedMsg{}, errMalformed
	}
	m := movedMsg{
		owner:    noc.NodeID(binary.BigEndian.Uint32(p)),
		ownerInc: binary.BigEndian.Uint64(p[4:]),
		epoch:    binary.BigEndian.Uint64(p[12:]),
	}
	if len(p) > movedLen {
		a, err := decodeAttr(p[movedLen:])
		if err != nil {
			return movedMsg{}, err
		}
		m.attr, m.hasAttr = a, true
	}
	return m, nil
}

// decodeErrno reads an error reply's errno; unknown or zero values become
// EIO so that an error reply never reads as success.
func decodeErrno(p []byte) (syscall.Errno, error) {
	if len(p) != errnoLen {
		return 0, errMalformed
	}
	n := syscall.Errno(binary.BigEndian.Uint32(p))
	if n == 0 || n > 4095 {
		n = syscall.EIO
	}
	return n, nil
}
