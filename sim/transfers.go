package sim

import (
	"fmt"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/admit"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/noc"
)

// Transfer sessions: bulk transfers as the agent's server runs them.
//
// With Config.Transfers > 0 the workload has that many sessions, each on a
// node its own source draws, each with an extent of xferPages pages
// allocated at the start on another node it draws (often a remote one:
// the pieces then cross the links and their faults); the checker follows
// every page of it as it follows the workload's (owners, acknowledged
// writes, convergence).
// Now and then a session starts a STORE_BULK or LOAD_BULK of a random
// range of its extent, from inside one page to inside another: the
// range is cut and admitted by admit.Transfer, and its pieces go into the
// core under admit.Transfers' budget (xferLimit here, so that the budget
// holds pieces back), as the server lets them in; the session then waits
// for the answer. Sometimes it closes with pieces in flight, as a client
// that dies mid-transfer. The checks:
//
//   - the session never has more pieces in the core than its budget
//     (counted here, from submissions and completions);
//   - a transfer answers once, after its last piece, with the bytes of the
//     pieces before the first that failed and that piece's errno, as the
//     pieces' completions seen here say;
//   - a store piece's acknowledgement is an acknowledged write of the page
//     like any other (checker.acked), a load piece's answer is its length;
//   - a piece of a session that closed never completes, and the closed
//     session holds nothing at the end (checkSessions).

// xferPages is the size of a transfer session's extent, in pages.
const xferPages = 5

// xferLimit is the transfer sessions' budget of pieces in the core.
const xferLimit = 2

// transferer is a transfer session: a session opened, closed with
// requests in flight and checked as the hostile ones are (hostile: its
// reqs are the pieces in flight), with its extent and transfer.
type transferer struct {
	hostile
	extent gva.GVA
	ts     admit.Transfers
	cur    *simTransfer
	inCore int // pieces submitted and not completed, counted here
}

// simTransfer is a transfer session's transfer in flight.
type simTransfer struct {
	tr    admit.Transfer
	area  []byte          // a store's bytes; a load's, as they come
	seen  []syscall.Errno // each piece's outcome, as its completion said
	done  []bool
	left  int
	start time.Duration
}

// xferPiece is a pending request's part of a transfer.
type xferPiece struct {
	t *transferer
	x *simTransfer
	i int
}

// setupTransfers allocates the transfer sessions' extents and starts them.
func (w *World) setupTransfers() error {
	for i := range max(w.cfg.Transfers, 0) {
		t := &transferer{hostile: hostile{idx: i, rng: derive(w.cfg.Seed, 9500+uint64(i))}, ts: admit.Transfers{Limit: xferLimit}}
		home := noc.NodeID(t.rng.IntN(len(w.nodes)))
		t.node = noc.NodeID(t.rng.IntN(len(w.nodes)))
		var got coherence.Completion
		w.submit(w.nodes[home], &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostAlloc, Pages: xferPages}, done: func(c coherence.Completion) { got = c }})
		if got.Err != nil || got.GVA.IsZero() {
			return fmt.Errorf("sim: transfer extent on node %v: %v", home, got.Err)
		}
		t.extent = got.GVA.Key()
		for j := range xferPages {
			w.check.addPage(t.extent.PageAt(j).Key())
		}
		w.transferers = append(w.transferers, t)
		w.push(event{at: w.now + time.Duration(t.rng.Int64N(int64(4*w.cfg.Think))), kind: evTransfer, n: i})
	}
	return nil
}

// xferStep starts a transfer (a session with none in flight), or closes
// the session with its transfer in flight (now and then), and schedules
// the next step.
func (w *World) xferStep(t *transferer) {
	if w.stopped {
		return
	}
	next := func(d time.Duration) {
		w.push(event{at: w.now + time.Duration(t.rng.Int64N(int64(d))), kind: evTransfer, n: t.idx})
	}
	n := w.nodes[t.node]
	if !n.alive {
		next(20 * w.cfg.Think)
		return
	}
	if !t.open && !w.reopen(&t.hostile, 1<<42, "transfer session") {
		return
	}
	if t.cur != nil {
		if t.rng.IntN(8) == 0 {
			w.xferVanish(t)
		}
		next(4 * w.cfg.Think)
		return
	}
	r := t.rng
	op := wire.OpLoadBulk
	if r.IntN(2) == 0 {
		op = wire.OpStoreBulk
	}
	off := r.IntN(gva.PageSize)
	size := 1 + r.IntN(xferPages*gva.PageSize-off)
	req := wire.Request{Header: wire.Header{Op: op, GVA: t.extent.WithOffset(uint16(off))}, Len: uint32(size)}
	x := &simTransfer{area: make([]byte, size), start: w.now}
	if err := x.tr.Cut(&req, coherence.Cred{}, garbleBounds); err != nil {
		w.check.violate("transfer session %d: %s of %d bytes at %d of its extent refused: %v", t.idx, op, size, off, err)
		next(4 * w.cfg.Think)
		return
	}
	if op == wire.OpStoreBulk {
		for i := range x.area {
			x.area[i] = byte(r.Uint32())
		}
	}
	x.seen, x.done, x.left = make([]syscall.Errno, len(x.tr.Pieces)), make([]bool, len(x.tr.Pieces)), len(x.tr.Pieces)
	t.cur = x
	t.ts.Queue(&x.tr)
	w.xferTake(t)
	next(4 * w.cfg.Think)
}

// xferTake submits the pieces t's budget lets into the core. A piece's
// completion that comes in its own submission (a page owned here) only
// records: the next pieces go in from an event (evTransferRefill).
func (w *World) xferTake(t *transferer) {
	n := w.nodes[t.node]
	x := t.cur
	for x != nil && t.open && n.alive {
		tr, i, ok := t.ts.Next()
		if !ok {
			return
		}
		t.ts.Take()
		req := tr.Reqs[i]
		pc := tr.Pieces[i]
		if tr.Op == wire.OpStoreBulk {
			req.Data = x.area[pc.Start : pc.Start+pc.Len]
		}
		if t.inCore++; t.inCore > xferLimit {
			w.check.violate("transfer session %d has %d pieces in the core, its budget is %d", t.idx, t.inCore, xferLimit)
		}
		po := &pendingOp{page: -1, req: req, xfer: &xferPiece{t: t, x: x, i: i}}
		t.reqs = append(t.reqs, po)
		w.submit(n, po)
	}
}

// xferVanish closes t's session with its transfer in flight: its pieces
// must never complete, and the session is checked at the end.
func (w *World) xferVanish(t *transferer) {
	w.xferReset(t)
	w.vanish(&t.hostile)
}

// xferReset forgets t's transfer (its session closes, or went with its
// node).
func (w *World) xferReset(t *transferer) {
	t.cur, t.inCore = nil, 0
	t.ts = admit.Transfers{Limit: xferLimit}
}

// crashTransfers forgets the transfers of a failed node's sessions: their
// outcome is unknown.
func (w *World) crashTransfers(n *simNode) {
	for _, t := range w.transferers {
		if t.node == n.id {
			w.xferReset(t)
			t.open, t.reqs = false, t.reqs[:0]
		}
	}
}

// xferDone checks the completion of a piece of a transfer.
func (w *World) xferDone(n *simNode, po *pendingOp, cp coherence.Completion, errno syscall.Errno) {
	p := po.xfer
	t, x := p.t, p.x
	if !t.done(po) {
		w.check.violate("node %v: piece %d of transfer session %d completed after its session closed", n.id, p.i, t.idx)
		return
	}
	if t.cur != x {
		return // the session's node failed since (crashTransfers)
	}
	t.inCore--
	if x.done[p.i] {
		w.check.violate("transfer session %d: piece %d completed twice", t.idx, p.i)
		return
	}
	x.done[p.i], x.seen[p.i] = true, errno
	x.left--
	pc := x.tr.Pieces[p.i]
	if errno == 0 {
		if x.tr.Op == wire.OpStoreBulk {
			w.check.acked(pc.GVA.Key(), cp.Version, int(pc.GVA.Offset()), po.req.Data)
		} else if len(cp.Data) != pc.Len {
			w.check.violate("transfer session %d: a load piece of %d bytes at %v answered %d", t.idx, pc.Len, pc.GVA, len(cp.Data))
		} else {
			copy(x.area[pc.Start:], cp.Data)
		}
	}
	last, err := t.ts.Done(&x.tr, p.i, errno)
	if err != nil {
		w.check.violate("transfer session %d: %v", t.idx, err)
		return
	}
	if last != (x.left == 0) {
		w.check.violate("transfer session %d: the transfer says last=%v with %d pieces still in flight", t.idx, last, x.left)
	}
	if !last {
		if t.ts.Waiting() > 0 {
			w.push(event{at: w.now, kind: evTransferRefill, n: t.idx})
		}
		return
	}
	want, wantErr := 0, syscall.Errno(0)
	for i, e := range x.seen {
		if e != 0 {
			wantErr = e
			break
		}
		want += x.tr.Pieces[i].Len
	}
	if got, gotErr := x.tr.Answer(); got != want || gotErr != wantErr {
		w.check.violate("transfer session %d: %s answered %d bytes, %v; its pieces say %d bytes, %v", t.idx, x.tr.Op, got, gotErr, want, wantErr)
	}
	w.res.Transfers++
	if wantErr != 0 {
		w.res.TransferErrors++
	}
	w.res.TransferBytes += int64(want)
	t.cur = nil
}
