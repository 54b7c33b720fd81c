package hostif

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Dispatch: the one place a decoded request goes on from, whether it came
// on the connection's socket (conn.serve) or on its ring (serveRing).
//
//   - A request whose verb the backend's Pipeline accepts (the data path,
//     and alloc, free, acquire, release, lock, unlock on the agent's
//     backend) becomes one Op, with the connection's session and its
//     user's credentials, and joins the batch the caller submits once it
//     has read what there was. The task waits in the pending table, not
//     on a goroutine, until its Done comes back (Server.Complete). The
//     core admits it (the permission check, the page's attributes asked
//     of its home first where it must), bounds it (Op.Timeout) and undoes
//     it if the session closes first: the server checks nothing itself.
//   - Requests the server serves itself without waiting (TRANSLATE,
//     SUBSCRIBE, CLOCK) run on the caller's goroutine.
//   - The rest (MAP and UNMAP, which make and retire replica files in
//     several backend calls; RINGS and MAPS; the GPU ops; every request
//     of a backend without a Pipeline) run on a goroutine of their own
//     through the blocking Backend.Do.

// dispatch starts the accepted request t of c, from its socket or its
// ring (t.rg). A request that becomes an Op is appended to batch, which
// the caller submits (at the end of its read, or when it is full); it
// returns batch and whether t holds its request slot until it is
// answered (false: it was answered already).
func (s *Server) dispatch(c *conn, t *task, batch []Op) ([]Op, bool) {
	switch {
	case s.submits(&t.req):
		op, err := s.opOf(c, t)
		if err != nil {
			s.answerNow(c, t, err)
			return batch, false
		}
		op.Token = s.pending.add(c, t)
		return append(batch, op), true
	case s.quick(&t.req):
		t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
		s.answerNow(c, t, s.exec(c, &t.req, &t.rep, &t.ctx))
		return batch, false
	}
	c.inflight.Add(1)
	go c.run(t)
	return batch, true
}

// answerNow answers t on the caller's goroutine (its reply is flushed
// with the caller's batch) and recycles it.
func (s *Server) answerNow(c *conn, t *task, err error) {
	if t.rg != nil {
		t.rg.answer(t, err)
		t.rg.flush()
	} else {
		c.reply(t, err, false)
	}
	putTask(t)
}

// submitVerbs are the verbs of the requests that become Ops.
var submitVerbs = map[wire.Op]Verb{
	wire.OpAlloc: VerbAlloc, wire.OpFree: VerbFree,
	wire.OpLoad: VerbLoad, wire.OpStore: VerbStore, wire.OpCAS: VerbCAS, wire.OpFetchAdd: VerbFetchAdd,
	wire.OpWhere: VerbWhere, wire.OpAcquire: VerbAcquire, wire.OpRelease: VerbRelease,
	wire.OpLock: VerbLock, wire.OpUnlock: VerbUnlock,
}

// submits reports whether r goes through the Pipeline: the backend has
// one and accepts r's verb.
func (s *Server) submits(r *wire.Request) bool {
	if s.pipe == nil {
		return false
	}
	v, ok := submitVerbs[r.Op]
	return ok && s.pipe.Accepts(Op{Verb: v, GVA: r.GVA})
}

// opOf is the Op of request t of c (its Token is the caller's to set).
func (s *Server) opOf(c *conn, t *task) (Op, error) {
	r := &t.req
	t.rep = reply{gva: r.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
	op := Op{Session: c.call.session, Verb: submitVerbs[r.Op], GVA: r.GVA.Key(), Cred: c.credential()}
	switch r.Op {
	case wire.OpAlloc:
		if r.Flags&wire.AllocHuge != 0 {
			return Op{}, fmt.Errorf("alloc: huge pages: %w", syscall.EOPNOTSUPP)
		}
		op.Pages, op.Attr, op.GVA = r.Pages(), s.allocAttr(c, r), gva.GVA{}
	case wire.OpLock:
		op.Try = r.Flags&wire.LockTry != 0
	case wire.OpFree, wire.OpAcquire, wire.OpRelease, wire.OpUnlock:
	default:
		// the data path: the core's own request bound
		op = pipeOp(r, 0)
		op.Session, op.Cred = c.call.session, c.credential()
		return op, nil
	}
	op.Timeout = s.opTimeout(r)
	return op, nil
}

// allocAttr is the owner and mode of the pages ALLOC r of c makes.
func (s *Server) allocAttr(c *conn, r *wire.Request) Attr {
	mode := r.Mode
	if mode == 0 {
		mode = s.opts.DefaultMode
	}
	return Attr{UID: c.cred.UID, GID: c.cred.GID, Mode: mode}
}

// pipeOp is the Op of the data-path request r.
func pipeOp(r *wire.Request, token uint64) Op {
	op := Op{Token: token, GVA: r.GVA}
	switch r.Op {
	case wire.OpLoad:
		op.Verb, op.Len = VerbLoad, int(r.Len)
	case wire.OpStore:
		op.Verb, op.Data = VerbStore, r.Data
	case wire.OpCAS:
		op.Verb, op.Expected, op.Operand = VerbCAS, r.Expected, r.Desired
	case wire.OpFetchAdd:
		op.Verb, op.Operand = VerbFetchAdd, r.Delta
	case wire.OpWhere:
		op.Verb = VerbWhere
	}
	return op
}

// finish answers t of c with the completion d of its Op: it fills the
// reply, updates the replica files, queues the reply and gives the slot
// back.
func (s *Server) finish(c *conn, t *task, d *Done) {
	err := s.finishOp(c, t, d)
	switch {
	case t.rg != nil:
		t.rg.answer(t, err)
	case !c.aborted.Load():
		c.reply(t, err, false)
	}
	if t.rg == nil {
		<-c.sem
	}
	putTask(t)
}

// finishOp fills t's reply from d and returns the request's error.
func (s *Server) finishOp(c *conn, t *task, d *Done) error {
	r := &t.req
	switch r.Op {
	case wire.OpAlloc:
		pages := r.Pages()
		if d.Err != nil {
			return fmt.Errorf("alloc %d pages: %w", pages, d.Err)
		}
		t.rep.gva = d.GVA
		t.rep.body = binary.LittleEndian.AppendUint64(t.rep.body, uint64(pages))
		return nil
	case wire.OpFree:
		if d.Err != nil {
			return fmt.Errorf("free %v: %w", r.GVA.Key(), d.Err)
		}
		return nil
	case wire.OpAcquire, wire.OpRelease, wire.OpLock, wire.OpUnlock:
		return d.Err
	}
	return s.finishData(c, t, d)
}

// finishData fills t's reply from the completion of its data-path op
// (load, store, compare-and-swap, fetch-add, where) and updates the
// replica file; it returns the op's error.
func (s *Server) finishData(c *conn, t *task, d *Done) error {
	r := &t.req
	key := r.GVA.Key()
	le := binary.LittleEndian
	if d.Err != nil {
		return d.Err
	}
	switch r.Op {
	case wire.OpLoad:
		t.rep.body = t.rep.body[:8+int(r.Len)]
		copy(t.rep.body[8:], d.Data)
		le.PutUint64(t.rep.body, uint64(d.Version))
		if rp := s.replicas.get(key); rp != nil && rp.stale() {
			rp.kick(s.replicas)
		}
	case wire.OpStore:
		s.written(key, int(r.GVA.Offset()), r.Data, d.Version)
		t.rep.body = le.AppendUint64(t.rep.body, uint64(d.Version))
	case wire.OpCAS:
		if d.Value == r.Expected {
			s.written64(key, r.GVA.Offset(), r.Desired, d.Version)
		} else if rp := s.replicas.get(key); rp != nil {
			rp.invalidate(s.replicas, d.Version, false)
		}
		t.rep.body = le.AppendUint64(t.rep.body, d.Value)
		t.rep.body = le.AppendUint64(t.rep.body, uint64(d.Version))
	case wire.OpFetchAdd:
		s.written64(key, r.GVA.Offset(), d.Value+r.Delta, d.Version)
		t.rep.body = le.AppendUint64(t.rep.body, d.Value)
		t.rep.body = le.AppendUint64(t.rep.body, uint64(d.Version))
	case wire.OpWhere:
		loc := s.located(c, key, d.Where)
		t.rep.body = loc.Append(t.rep.body)
	}
	return nil
}

// Complete takes the completions of submitted Ops: it updates the replica
// files, queues each reply on its connection or ring and flushes every
// one it touched once. The backend's driver calls it after a step,
// holding none of its locks.
func (s *Server) Complete(ds []Done) {
	var connsAt [8]*conn
	var ringsAt [8]*connRing
	conns, rings := connsAt[:0], ringsAt[:0]
	var end time.Time // one clock reading for the batch (Options.Observe)
	if s.opts.Observe != nil && len(ds) > 0 {
		end = time.Now()
	}
	for i := range ds {
		pd, ok := s.pending.take(ds[i].Token)
		if !ok {
			continue
		}
		pd.t.end = end
		if rg := pd.t.rg; rg != nil { // read before finishing recycles the task
			rings = appendOnce(rings, rg)
		} else {
			conns = appendOnce(conns, pd.c)
		}
		s.finish(pd.c, pd.t, &ds[i])
	}
	for _, c := range conns {
		c.flush()
	}
	for _, rg := range rings {
		rg.flush()
	}
}
