package hostif

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/admit"
	"github.com/aitherion/dpu/hostif/wire"
)

// Dispatch: the one place a decoded request goes on from, whether it came
// on the connection's socket (conn.serve) or on its ring (serveRing).
//
//   - A request of the core (the data path, and alloc, free, acquire,
//     release, lock, unlock), when the backend has a Pipeline, becomes
//     the core's own request (coherence.Request, through admission:
//     admit.Request) with its user's credentials, and joins the batch the
//     caller submits in the connection's session once it has read what
//     there was. The request carries its task (Request.Tag) through the
//     core, not a goroutine or a table, and its completion
//     (coherence.Completion) brings it back (Server.Complete). The core admits it (the permission check, the
//     page's attributes asked of its home first where it must), bounds it
//     (Request.Timeout) and undoes it if the session closes first: the
//     server checks nothing itself.
//   - Requests the server serves itself without waiting (TRANSLATE,
//     SUBSCRIBE, CLOCK) run on the caller's goroutine.
//   - The rest (MAP and UNMAP, which make and retire replica files in
//     several backend calls; RINGS and MAPS; the GPU ops; every request
//     of a backend without a Pipeline) run on a goroutine of their own
//     through the blocking Backend.Do.

// dispatch starts the accepted request t of c, from its socket or its
// ring (t.rg). A request that goes to the core through the Pipeline is
// appended to batch (as the core's request), which the caller submits in
// c's session (at the end of its read, or when it is full); it returns
// batch and whether t holds its request slot until it is answered (false:
// it was answered already).
func (s *Server) dispatch(c *conn, t *task, batch []coherence.Request) ([]coherence.Request, bool) {
	switch {
	case t.req.Op == wire.OpStoreBulk || t.req.Op == wire.OpLoadBulk:
		t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
		b, err := s.bulkOf(c, t, batch)
		if err != nil {
			c.answer(t, err, false, false)
			return batch, false
		}
		return b, true
	case s.submits(&t.req):
		r, err := s.opOf(c, t)
		if err != nil {
			c.answer(t, err, false, false) // flushed with the caller's batch
			return batch, false
		}
		// The request carries its task (Tag) to its completion: no table
		// between them. Its id is unique among the server's requests (the
		// session's requests are keyed by it).
		t.c = c
		r.ID, r.Tag = s.nextReq.Add(1)&(1<<63-1), t
		return append(batch, r), true
	case s.quick(&t.req):
		t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
		c.answer(t, s.exec(c, &t.req, &t.rep, &t.ctx), false, false)
		return batch, false
	}
	c.inflight.Add(1)
	go c.run(t)
	return batch, true
}

// answer is the one way a request is answered: its reply is queued on
// the ring or the socket it came on (and flushed when flush is set; else
// the caller flushes: the socket reader and the ring pass flush what
// their batch queued, Complete what its completions did), the request slot it held (holds: a socket
// request's) is given back, and the task is recycled. A connection being
// closed takes no reply on its socket.
func (c *conn) answer(t *task, err error, flush, holds bool) {
	if rg := t.rg; rg != nil {
		rg.answer(t, err, flush)
	} else {
		if !c.aborted.Load() {
			c.reply(t, err, flush)
		}
		if holds {
			<-c.sem
		}
	}
	putTask(t)
}

// submits reports whether r goes through the Pipeline: a request of the
// core.
func (s *Server) submits(r *wire.Request) bool {
	return admit.Core(r.Op) != 0
}

// opOf is the core's request of request t of c (its ID is the caller's
// to set), admitted as the user the connection's peer credentials name
// (admit.Request).
func (s *Server) opOf(c *conn, t *task) (coherence.Request, error) {
	t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
	return admit.Request(&t.req, c.credential(), s.bounds)
}

// finishOp fills t's reply from d and returns the request's error.
func (s *Server) finishOp(c *conn, t *task, d *coherence.Completion) error {
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
func (s *Server) finishData(c *conn, t *task, d *coherence.Completion) error {
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
		loc := s.located(c, key, Location{Tier: d.Where.Tier, Speed: d.Where.Speed, Hops: uint16(d.Where.Hops),
			Owner: gva.MachineIndex(d.Where.Owner), Version: d.Version})
		t.rep.body = loc.Append(t.rep.body)
	}
	return nil
}

// Complete takes the completions of submitted requests: it updates the replica
// files, queues each reply on its connection or ring and flushes every
// one it touched once. The backend's driver calls it after a step,
// holding none of its locks.
func (s *Server) Complete(ds []coherence.Completion) {
	var connsAt, bulkAt [8]*conn
	conns, bulkConns := connsAt[:0], bulkAt[:0]
	var end time.Time // one clock reading for the batch (Options.Observe)
	if s.opts.Observe != nil && len(ds) > 0 {
		end = time.Now()
	}
	for i := range ds {
		t, ok := ds[i].Tag.(*task)
		bulk := false
		if !ok {
			switch tag := ds[i].Tag.(type) {
			case *replica:
				s.replicas.reloaded(tag, &ds[i])
			case *bulkPiece:
				bulkConns = appendOnce(bulkConns, tag.op.t.c)
				t, bulk = s.bulkDone(tag, &ds[i])
			}
			if !bulk {
				continue // not a task's, or a bulk request's pieces are not all done
			}
		}
		c := t.c
		t.end = end
		flush := false
		if rg := t.rg; rg != nil { // read before finishing recycles the task
			// the ring's last reply of the batch is queued and published
			// under one hold of its lock
			flush = lastOfRing(ds[i+1:], rg)
		} else {
			conns = appendOnce(conns, c)
		}
		var err error
		if !bulk { // bulkDone filled the reply of its pieces
			err = s.finishOp(c, t, &ds[i])
		}
		c.answer(t, err, flush, true)
	}
	for _, c := range conns {
		c.flush()
	}
	for _, c := range bulkConns {
		s.bulkRefill(c) // what the pieces that completed left room for
	}
}

// lastOfRing reports whether none of ds came from a task of rg.
func lastOfRing(ds []coherence.Completion, rg *connRing) bool {
	for i := range ds {
		if t, ok := ds[i].Tag.(*task); ok && t.rg == rg {
			return false
		}
	}
	return true
}
