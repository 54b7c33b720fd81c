package sim

import (
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// The allocation lifecycle: besides the workload's pages, which live for
// the whole run, clients allocate extents of one or two pages on their
// node, move them away (another node acquires a page of the extent) and
// free them at their allocator, through the core's host sessions as the
// agent's host socket does. The checks:
//
//   - an extent is freeable by its allocator, wherever its pages went: a
//     free there that ends with "no such allocation" (ENOENT) or "not
//     owned here" (EINVAL) while the allocator runs the incarnation that
//     allocated it is a violation (a timeout or an unreachable page is
//     not: the extent's outcome is then unknown and it is checked no more);
//   - exactly once: a second free of a freed extent, or a free by a node
//     that did not allocate it, that succeeds is a violation;
//   - a freed page is never readable: after the quiet period, a load of a
//     page of a freed extent on every live node must fail, and no node may
//     own it.

// lifeExtent is an extent of the lifecycle workload.
type lifeExtent struct {
	g      gva.GVA
	pages  int
	node   noc.NodeID // its allocator
	inc    uint64     // the allocator's incarnation that allocated it
	state  lifeState
	freeAt time.Duration // lifeFreed: when its free succeeded
}

type lifeState uint8

const (
	lifeLive    lifeState = iota
	lifeFreed             // its allocator's free succeeded
	lifeUnknown           // a free ended without saying (timeout), or its allocator restarted: unchecked
)

// lifeKind is what a lifecycle request does.
type lifeKind uint8

const (
	lifeAlloc     lifeKind = iota + 1
	lifeMove               // acquire one of its pages on another node
	lifeFree               // the allocator's free of a live extent
	lifeRefree             // the allocator's free of a freed extent
	lifeForeign            // a free by a node that did not allocate it
	lifeLoad               // a load of a freed extent's page (must fail after the quiet period; not checked earlier)
	lifeFinalLoad          // lifeFinal's load of a freed page on a quiet fabric
)

// lifeOp is a request of the lifecycle workload.
type lifeOp struct {
	kind   lifeKind
	extent int // index in World.life (-1: an alloc)
	pages  int // lifeAlloc
}

// lrng is c's source for the lifecycle workload (its own, so that the
// other draws of a client do not depend on it).
func (w *World) lrng(c *client) *rand.Rand {
	if c.lr == nil {
		c.lr = derive(w.cfg.Seed, 7000+uint64(c.idx))
	}
	return c.lr
}

// lifeStep draws c's next request from the lifecycle workload, now and
// then; it reports whether it did (po is then filled).
func (w *World) lifeStep(c *client, po *pendingOp) bool {
	if w.cfg.Lifecycle <= 0 || c.intruder {
		return false
	}
	r := w.lrng(c)
	if r.IntN(40) != 0 {
		return false
	}
	live := 0
	for _, x := range w.life {
		if x.state == lifeLive {
			live++
		}
	}
	op := &lifeOp{extent: -1}
	if live < w.cfg.Lifecycle && r.IntN(3) == 0 || len(w.life) == 0 {
		op.kind, op.pages = lifeAlloc, 1+r.IntN(2)
		po.req = coherence.Request{Op: coherence.HostAlloc, Pages: op.pages}
	} else {
		op.extent = r.IntN(len(w.life))
		x := w.life[op.extent]
		mine := x.node == c.node
		switch {
		case x.state == lifeLive && mine:
			op.kind = lifeFree
		case x.state == lifeLive && r.IntN(4) == 0:
			op.kind = lifeForeign
		case x.state == lifeLive:
			op.kind = lifeMove
		case x.state == lifeFreed && mine:
			op.kind = lifeRefree
		default:
			op.kind = lifeLoad
		}
		switch op.kind {
		case lifeFree, lifeRefree, lifeForeign:
			po.req = coherence.Request{Op: coherence.HostFree, GVA: x.g}
		case lifeMove:
			po.req = coherence.Request{Op: coherence.HostAcquire, GVA: x.g.PageAt(r.IntN(x.pages))}
		case lifeLoad:
			po.req = coherence.Request{Op: coherence.HostLoad, GVA: x.g.PageAt(r.IntN(x.pages)), Len: 8}
		}
	}
	po.page, po.life = -1, op
	return true
}

// lifeDone checks the answer to a lifecycle request.
func (w *World) lifeDone(n *simNode, po *pendingOp, cp coherence.Completion, errno syscall.Errno) {
	op := po.life
	if op.kind == lifeFinalLoad {
		return // lifeFinal checks it
	}
	if op.kind == lifeAlloc {
		if errno == 0 {
			w.life = append(w.life, &lifeExtent{g: cp.GVA.Key(), pages: op.pages, node: n.id, inc: n.inc})
		}
		return
	}
	x := w.life[op.extent]
	if x.state == lifeLive && w.nodes[x.node].inc != x.inc {
		x.state = lifeUnknown // its allocator restarted: its extents went with it
	}
	switch op.kind {
	case lifeFree:
		switch {
		case x.state != lifeLive:
			// another client of the node freed it meanwhile, or its allocator restarted
		case errno == 0:
			x.state, x.freeAt = lifeFreed, w.now
			w.res.Freed++
		case errno == syscall.ENOENT || errno == syscall.EINVAL:
			w.check.violate("node %v: free of the extent %v it allocated: %v", n.id, x.g, cp.Err)
		default:
			x.state = lifeUnknown // it may still succeed, abandoned
		}
	case lifeRefree:
		if errno == 0 && x.state == lifeFreed {
			w.check.violate("node %v: extent %v freed a second time (first at %v)", n.id, x.g, x.freeAt)
		}
	case lifeForeign:
		if errno == 0 {
			w.check.violate("node %v: extent %v of node %v freed by a node that did not allocate it", n.id, x.g, x.node)
			x.state = lifeUnknown
		}
	}
}

// lifeFinal checks, on the quiet fabric, that no page of a freed extent
// is owned or readable anywhere.
func (w *World) lifeFinal() {
	c := w.check
	for _, x := range w.life {
		if x.state != lifeFreed {
			continue
		}
		for i := range x.pages {
			key := x.g.PageAt(i)
			for _, n := range w.nodes {
				if !n.alive {
					continue
				}
				if owner, _ := n.eng.Holding(key); owner {
					c.violate("page %v of an extent freed at %v is owned by node %v", key, x.freeAt, n.id)
				}
				got := w.checkRequest(n, &pendingOp{life: &lifeOp{kind: lifeFinalLoad}, req: coherence.Request{Op: coherence.HostLoad, GVA: key, Len: 8}})
				if got.At != 0 && got.Err == nil {
					c.violate("page %v of an extent freed at %v is readable on node %v (version %d)", key, x.freeAt, n.id, got.Version)
				}
			}
		}
	}
}
