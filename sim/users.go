package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"syscall"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Users and guarded pages.
//
// Besides the shared pages, which everyone reaches as root, the workload
// has Config.Guarded pages of user 1000 (group 100, mode 0640) and three
// users: their owner (read and write), a member of group 100 (read) and
// an intruder (nothing). The clients of every node but one act as the
// owner or the member (alternately) and now and then load, store,
// fetch-add or acquire a guarded page. On the other node, intruderNode,
// the regular clients never touch the guarded pages (it holds them only
// as a relay on their trees or as a backup, never for a user allowed
// in), and one more client does nothing but try them as the intruder.
//
// Every answer is checked against the page's mode: a request the mode
// allows must never be refused (EACCES), and one it forbids must never
// succeed. The nodes check their users in their host layer, as the agent
// does (the core's admission: attributes known, or asked of the page's
// home first). intruderNode is a modified node (Config.Unchecked): it
// vouches for its users without checking them, so its intruder is
// refused only by the nodes that serve its requests, where they know
// the page's attributes (they hold or relay the page). Guarded pages are
// homed away from intruderNode, and it owns one only after taking it
// over as a backup (replicas > 1). Their writes are checked like every
// page's (the owner's versions, acknowledged writes, convergence); they
// have no linearizability history.

// intruderNode is the node that does not check its users.
const intruderNode noc.NodeID = 1

var (
	guardedAttr = coherence.Attr{UID: 1000, GID: 100, Mode: 0o640}
	userOwner   = coherence.Cred{UID: 1000, GID: 1000}
	userMember  = coherence.Cred{UID: 2000, GID: 2000, Groups: []uint32{7, 100}}
	userOther   = coherence.Cred{UID: 3000, GID: 3000}
)

// guardedOp is what the checker needs of a request on a guarded page.
type guardedOp struct {
	page int // index in World.guarded
	user coherence.Cred
	need uint32 // coherence.AccessRead and/or AccessWrite
	// onTree: the node had an entry of the page when the request started
	// (it relays the page's content; see guardedDone).
	onTree bool
}

// setupGuarded allocates the guarded pages (homed on random nodes other
// than intruderNode, with their own random source) and the intruder.
func (w *World) setupGuarded() error {
	if w.cfg.Guarded <= 0 || len(w.nodes) < 3 {
		return nil
	}
	r := derive(w.cfg.Seed, 5)
	for range w.cfg.Guarded {
		home := w.nodes[r.IntN(len(w.nodes))]
		for home.id == intruderNode {
			home = w.nodes[r.IntN(len(w.nodes))]
		}
		var got coherence.Completion
		w.submit(home, &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostAlloc, Attr: guardedAttr}, done: func(c coherence.Completion) { got = c }})
		if got.Err != nil || got.GVA.IsZero() {
			return fmt.Errorf("sim: alloc of a guarded page on node %v: %v", home.id, got.Err)
		}
		w.guarded = append(w.guarded, &simPage{g: got.GVA, home: home.id})
		w.check.addPage(got.GVA.Key())
	}
	c := &client{idx: len(w.clients), node: intruderNode, locked: -1, intruder: true}
	c.rng = derive(w.cfg.Seed, 1000+uint64(c.idx))
	c.last = map[[2]int]uint64{}
	w.clients = append(w.clients, c)
	w.connect(c)
	return nil
}

// userOf is the user a client acts as on the guarded pages.
func userOf(c *client) coherence.Cred {
	switch {
	case c.intruder:
		return userOther
	case c.idx%2 == 0:
		return userOwner
	}
	return userMember
}

// guardedStep makes po a request on a guarded page, if the client takes
// one this step: always for the intruder, now and then for the others
// (never on intruderNode). It draws from the client's own source for the
// guarded pages, so the rest of the workload is the same with or without
// them.
func (w *World) guardedStep(c *client, po *pendingOp) bool {
	if len(w.guarded) == 0 || c.node == intruderNode && !c.intruder {
		return false
	}
	r := w.urng(c)
	if !c.intruder && r.IntN(20) != 0 {
		return false
	}
	gi := r.IntN(len(w.guarded))
	p := w.guarded[gi]
	op := &guardedOp{page: gi, user: userOf(c)}
	_, op.onTree = w.nodes[c.node].eng.Entry(p.g.Key())
	switch x := r.IntN(100); {
	case x < 35:
		off := r.IntN(gva.PageSize - 8)
		po.req = coherence.Request{Op: coherence.HostLoad, GVA: p.g.WithOffset(uint16(off)), Len: 1 + r.IntN(8)}
		op.need = coherence.AccessRead
	case x < 60:
		off := storeBase + r.IntN(gva.PageSize-storeBase-8)
		data := make([]byte, 1+r.IntN(8))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		po.req = coherence.Request{Op: coherence.HostStore, GVA: p.g.WithOffset(uint16(off)), Data: data}
		op.need = coherence.AccessWrite
	case x < 90:
		po.req = coherence.Request{Op: coherence.HostFetchAdd, GVA: p.g.WithOffset(uint16(8 * r.IntN(atomicWords))), Operand: wide(uint64(1 + r.IntN(5)))}
		op.need = coherence.AccessRead | coherence.AccessWrite
	default:
		po.req = coherence.Request{Op: coherence.HostAcquire, GVA: p.g, Priority: uint8(r.IntN(2))}
		op.need = coherence.AccessRead | coherence.AccessWrite
	}
	po.req.Cred = op.user
	po.page, po.guard = -1, op
	return true
}

// urng is c's source for the guarded pages.
func (w *World) urng(c *client) *rand.Rand {
	if c.ur == nil {
		c.ur = derive(w.cfg.Seed, 6000+uint64(c.idx))
	}
	return c.ur
}

// guardedDone checks the answer to a request on a guarded page.
func (w *World) guardedDone(n *simNode, po *pendingOp, cp coherence.Completion, errno syscall.Errno) {
	op := po.guard
	p := w.guarded[op.page]
	key := p.g.Key()
	allowed := coherence.Allows(guardedAttr, op.user, op.need)
	switch {
	case errno == syscall.EACCES:
		w.res.Refused++
		if allowed {
			w.check.violate("node %v: %v of guarded page %v as uid %d refused, though its mode allows it", n.id, po.req.Op, key, op.user.UID)
		}
	case errno == 0 && !allowed:
		owner, _ := n.eng.Holding(key)
		_, onTree := n.eng.Entry(key)
		w.check.violate("node %v: %v of guarded page %v as uid %d succeeded, though its mode forbids it (owner %v, on its tree %v, at the start %v)",
			n.id, po.req.Op, key, op.user.UID, owner, onTree, op.onTree)
	}
	if errno != 0 {
		return
	}
	switch po.req.Op {
	case coherence.HostStore:
		w.check.acked(key, cp.Version, int(po.req.GVA.Offset()), po.req.Data)
	case coherence.HostFetchAdd:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], cp.Value+po.req.Operand)
		w.check.acked(key, cp.Version, int(po.req.GVA.Offset()), b[:])
	}
}
