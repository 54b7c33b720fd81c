package hostif

import (
	"encoding/binary"
	"fmt"
	"sync"
	"syscall"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/host/admit"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/quota"
)

// Bulk transfers: a connection asks once for its bulk area (BULK), shared
// memory the server makes, seals at its size and maps; the client maps
// the descriptor it is passed. A STORE_BULK or LOAD_BULK then names a
// range of the area and of the fabric's addresses, up to wire.MaxBulk
// bytes over any number of pages. The server cuts it at page boundaries
// into the core's own page stores or loads (admit.Bulk: a piece
// admission refuses fails the request whole, nothing submitted; the core
// checks each page's permission as for any store or load), lets them into
// the core as the connection's budget allows (bulkBudget) and answers
// once the last completes: how many bytes from the start were done, in
// whole pieces before the first that failed, and that piece's errno. The
// pages' requests share datagrams on the way (the link packs them): one
// host message and one reply for many pages.
//
// The area is the client's to write while no request names the range: a
// store's bytes are copied out of it page by page as each page's request
// enters the core (what a connection holds in the agent is bounded by its
// budget, not by the requests it queues), a load's are copied in as each
// page completes. The area lives until the connection ends; a completion
// that comes after is dropped.

// bulkArea is a connection's bulk area: its file, whose mapping (f.mem)
// is nil once the connection closed it.
type bulkArea struct {
	mu sync.Mutex
	f  *sharedFile
}

// bulkFiles is what a bulk area costs its user in descriptors.
const bulkFiles = 1

// openBulk makes c's bulk area (BULK).
func (s *Server) openBulk(c *conn, r *wire.Request, rep *reply) error {
	size := int(min(r.Bytes, uint64(s.opts.MaxBulkArea))) &^ (wire.PageSize - 1)
	if size < wire.PageSize {
		return fmt.Errorf("bulk: areas of at most %d bytes here: %w", s.opts.MaxBulkArea, syscall.EINVAL)
	}
	c.bulkMu.Lock()
	defer c.bulkMu.Unlock()
	if c.bulk != nil {
		return fmt.Errorf("bulk: this connection has its area: %w", syscall.EEXIST)
	}
	if c.aborted.Load() {
		return fmt.Errorf("bulk: %w", syscall.ECONNRESET)
	}
	if err := s.opts.Quota.Take(c.cred.UID, quota.Files, bulkFiles); err != nil {
		return fmt.Errorf("bulk: the area counts against the user's descriptors: %w", err)
	}
	f, err := newSharedFile("dpu-bulk", size, fixedSeals)
	if err != nil {
		s.opts.Quota.Release(c.cred.UID, quota.Files, bulkFiles)
		return fmt.Errorf("bulk: %w", err)
	}
	c.bulk = &bulkArea{f: f}
	rep.fds = append(rep.fds, f.fd)
	rep.body = binary.LittleEndian.AppendUint64(rep.body, uint64(size))
	return nil
}

// closeBulk ends c's bulk area (the connection ends): completions that
// come later find it closed.
func (s *Server) closeBulk(c *conn) {
	c.bulkMu.Lock()
	a := c.bulk
	c.bulk = nil
	c.bulkMu.Unlock()
	if a == nil {
		return
	}
	a.mu.Lock()
	a.f.close()
	a.mu.Unlock()
	s.opts.Quota.Release(c.cred.UID, quota.Files, bulkFiles)
}

// bulkOp is one STORE_BULK or LOAD_BULK in flight: its pieces, one per
// page, their core requests, admitted, and what is left of them.
type bulkOp struct {
	t      *task
	area   *bulkArea
	off    int // the request's offset in the area
	pieces []bulkPiece
	cut    []admit.Piece
	reqs   []coherence.Request
	next   int // the first piece not yet submitted
	left   int // pieces not yet completed
}

// bulkBudget is the most pieces of a connection's bulk requests in the
// core at once; the others wait in the connection's queue, in order, and
// go in as earlier ones complete. It keeps one client's transfers from
// filling the links' queues (past a few milliseconds of them, answers
// come after the requests' re-sends) and bounds what one connection
// holds of the core.
const bulkBudget = 128

// bulkPiece is the part of a bulk request in one page: the Tag of its
// core request.
type bulkPiece struct {
	admit.Piece
	op   *bulkOp
	err  error
	data []byte // a store's bytes, copied out of the area as it enters the core
}

var bulkPool = sync.Pool{New: func() any { return &bulkOp{} }}

// bulkOf cuts request t of c into its pages' core requests, admitted,
// and appends them to batch; nothing is appended when one fails.
func (s *Server) bulkOf(c *conn, t *task, batch []coherence.Request) ([]coherence.Request, error) {
	r := &t.req
	c.bulkMu.Lock()
	a := c.bulk
	c.bulkMu.Unlock()
	if a == nil {
		return batch, fmt.Errorf("%s: no bulk area (ask for one with BULK): %w", r.Op, syscall.ENXIO)
	}
	op := bulkPool.Get().(*bulkOp)
	op.t, op.area, op.off = t, a, int(r.Off)
	op.pieces = op.pieces[:0]
	n := int(r.Len)
	a.mu.Lock()
	if op.off+n > len(a.f.mem) { // a closed area has none
		size := len(a.f.mem)
		a.mu.Unlock()
		putBulk(op)
		return batch, fmt.Errorf("%s of %d bytes at %d: past the bulk area's %d: %w", r.Op, n, op.off, size, syscall.EINVAL)
	}
	a.mu.Unlock()
	var err error
	op.cut, op.reqs, err = admit.Bulk(r, c.credential(), s.bounds, op.cut[:0], op.reqs[:0])
	if err != nil {
		putBulk(op)
		return batch, err
	}
	for i, pc := range op.cut {
		if i < cap(op.pieces) {
			op.pieces = op.pieces[:i+1] // keeps the piece's data buffer of an earlier use
		} else {
			op.pieces = append(op.pieces, bulkPiece{})
		}
		op.pieces[i] = bulkPiece{Piece: pc, op: op, data: op.pieces[i].data[:0]}
	}
	for i := range op.reqs {
		op.reqs[i].Tag = &op.pieces[i]
	}
	op.next, op.left = 0, len(op.pieces)
	t.c = c
	c.bulkMu.Lock()
	c.bulkQ = append(c.bulkQ, op)
	batch = s.takeBulkLocked(c, batch)
	c.bulkMu.Unlock()
	return batch, nil
}

// takeBulkLocked appends to batch the queued pieces of c's bulk requests
// that its budget lets into the core, oldest request first.
func (s *Server) takeBulkLocked(c *conn, batch []coherence.Request) []coherence.Request {
	for len(c.bulkQ) > 0 && c.bulkLive < bulkBudget {
		op := c.bulkQ[0]
		for op.next < len(op.reqs) && c.bulkLive < bulkBudget {
			cr := op.reqs[op.next]
			if op.t.req.Op == wire.OpStoreBulk {
				p := &op.pieces[op.next]
				a := op.area
				a.mu.Lock()
				if a.f.mem == nil {
					a.mu.Unlock()
					return batch // the connection ends: nothing more goes in
				}
				p.data = append(p.data[:0], a.f.mem[op.off+p.Start:op.off+p.Start+p.Len]...)
				a.mu.Unlock()
				cr.Data = p.data
			}
			cr.ID = s.nextReq.Add(1) & (1<<63 - 1)
			batch = append(batch, cr)
			op.next++
			c.bulkLive++
		}
		if op.next < len(op.reqs) {
			break
		}
		c.bulkQ[0] = nil
		c.bulkQ = c.bulkQ[1:]
	}
	return batch
}

// bulkRefill submits what c's budget, freed by completions, lets in. Two
// drivers' steps may refill one connection at once: each submits a batch
// of its own.
func (s *Server) bulkRefill(c *conn) {
	c.bulkMu.Lock()
	var batch []coherence.Request
	if len(c.bulkQ) > 0 && c.bulkLive < bulkBudget {
		batch = s.takeBulkLocked(c, make([]coherence.Request, 0, bulkBudget-c.bulkLive))
	}
	c.bulkMu.Unlock()
	if len(batch) > 0 {
		s.pipe.Submit(c.call.session, batch)
	}
}

func putBulk(op *bulkOp) {
	for i := range op.pieces {
		op.pieces[i] = bulkPiece{data: op.pieces[i].data[:0]}
	}
	clear(op.reqs)
	op.t, op.area = nil, nil
	bulkPool.Put(op)
}

// bulkDone takes the completion of piece p. After the op's last piece it
// returns the op's task, its reply filled, to be answered.
func (s *Server) bulkDone(p *bulkPiece, d *coherence.Completion) (t *task, last bool) {
	op := p.op
	t = op.t
	c := t.c
	if d.Err == nil && t.req.Op == wire.OpLoadBulk {
		a := op.area
		a.mu.Lock()
		if a.f.mem != nil {
			copy(a.f.mem[op.off+p.Start:op.off+p.Start+p.Len], d.Data)
		}
		a.mu.Unlock()
	} else if d.Err == nil {
		s.written(p.GVA.Key(), int(p.GVA.Offset()), p.data, d.Version)
	}
	// Completions of one op may be handed over by two drivers' steps at
	// once (the loop's and a socket reader's): what they share is
	// counted under the connection's lock.
	c.bulkMu.Lock()
	c.bulkLive--
	p.err = d.Err
	op.left--
	left := op.left
	c.bulkMu.Unlock()
	if left > 0 {
		return nil, false
	}
	done, errno := 0, syscall.Errno(0)
	for i := range op.pieces {
		if e := op.pieces[i].err; e != nil {
			errno = errnoOf(e)
			if errno == 0 {
				errno = syscall.EIO
			}
			break
		}
		done += op.pieces[i].Len
	}
	le := binary.LittleEndian
	t.rep.body = le.AppendUint64(t.rep.body, uint64(done))
	t.rep.body = le.AppendUint32(t.rep.body, uint32(errno))
	t.rep.body = le.AppendUint32(t.rep.body, 0)
	putBulk(op)
	return t, true
}
