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
// into the core's own page stores or loads (admit.Transfer: a piece
// admission refuses fails the request whole, nothing submitted; the core
// checks each page's permission as for any store or load), lets them into
// the core as the connection's budget allows (admit.Budget) and answers
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

// bulkOp is one STORE_BULK or LOAD_BULK in flight: its transfer (the
// pieces, one per page, their core requests, admitted, and their
// outcomes: admit.Transfer) and the tags of its pieces.
type bulkOp struct {
	admit.Transfer
	t      *task
	area   *bulkArea
	off    int // the request's offset in the area
	pieces []bulkPiece
}

// bulkPiece is the part of a bulk request in one page: the Tag of its
// core request.
type bulkPiece struct {
	op   *bulkOp
	i    int    // its index in the transfer
	data []byte // a store's bytes, copied out of the area as it enters the core
}

var bulkPool = sync.Pool{New: func() any { return &bulkOp{} }}

// bulkOf cuts request t of c into its pages' core requests, admitted,
// and appends those the connection's budget lets in (admit.Budget) to
// batch; nothing is appended when one is refused.
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
	n := int(r.Len)
	a.mu.Lock()
	if op.off+n > len(a.f.mem) { // a closed area has none
		size := len(a.f.mem)
		a.mu.Unlock()
		putBulk(op)
		return batch, fmt.Errorf("%s of %d bytes at %d: past the bulk area's %d: %w", r.Op, n, op.off, size, syscall.EINVAL)
	}
	a.mu.Unlock()
	if err := op.Cut(r, c.credential(), s.bounds); err != nil {
		putBulk(op)
		return batch, err
	}
	if n := len(op.Reqs); n > cap(op.pieces) {
		op.pieces = append(op.pieces[:cap(op.pieces)], make([]bulkPiece, n-cap(op.pieces))...)
	}
	op.pieces = op.pieces[:len(op.Reqs)]
	for i := range op.pieces {
		op.pieces[i] = bulkPiece{op: op, i: i, data: op.pieces[i].data[:0]} // keeps an earlier use's buffer
		op.Reqs[i].Tag = &op.pieces[i]
	}
	t.c = c
	c.bulkMu.Lock()
	c.bulkQ.Queue(&op.Transfer)
	batch = s.takeBulkLocked(c, batch)
	c.bulkMu.Unlock()
	return batch, nil
}

// takeBulkLocked appends to batch the queued pieces of c's bulk requests
// that its budget lets into the core, oldest request first.
func (s *Server) takeBulkLocked(c *conn, batch []coherence.Request) []coherence.Request {
	for {
		tr, i, ok := c.bulkQ.Next()
		if !ok {
			return batch
		}
		cr := tr.Reqs[i]
		p := cr.Tag.(*bulkPiece)
		if tr.Op == wire.OpStoreBulk {
			pc, a := &tr.Pieces[i], p.op.area
			a.mu.Lock()
			if a.f.mem == nil {
				a.mu.Unlock()
				return batch // the connection ends: nothing more goes in
			}
			p.data = append(p.data[:0], a.f.mem[p.op.off+pc.Start:p.op.off+pc.Start+pc.Len]...)
			a.mu.Unlock()
			cr.Data = p.data
		}
		cr.ID = s.nextReq.Add(1) & (1<<63 - 1)
		batch = append(batch, cr)
		c.bulkQ.Take()
	}
}

// bulkRefill submits what c's budget, freed by completions, lets in. Two
// drivers' steps may refill one connection at once: each submits a batch
// of its own.
func (s *Server) bulkRefill(c *conn) {
	c.bulkMu.Lock()
	var batch []coherence.Request
	if c.bulkQ.Waiting() > 0 && c.bulkQ.Live() < admit.Budget {
		batch = s.takeBulkLocked(c, make([]coherence.Request, 0, admit.Budget-c.bulkQ.Live()))
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
	op.Reset()
	op.t, op.area = nil, nil
	bulkPool.Put(op)
}

// bulkDone takes the completion of piece p. After the op's last piece it
// returns the op's task, its reply filled, to be answered.
func (s *Server) bulkDone(p *bulkPiece, d *coherence.Completion) (t *task, last bool) {
	op := p.op
	t = op.t
	c := t.c
	pc := &op.Pieces[p.i]
	if d.Err == nil && op.Op == wire.OpLoadBulk {
		a := op.area
		a.mu.Lock()
		if a.f.mem != nil {
			copy(a.f.mem[op.off+pc.Start:op.off+pc.Start+pc.Len], d.Data)
		}
		a.mu.Unlock()
	} else if d.Err == nil {
		s.written(pc.GVA.Key(), int(pc.GVA.Offset()), p.data, d.Version)
	}
	errno := syscall.Errno(0)
	if d.Err != nil {
		if errno = errnoOf(d.Err); errno == 0 {
			errno = syscall.EIO
		}
	}
	// Completions of one op may be handed over by two drivers' steps at
	// once (the loop's and a socket reader's): what they share is
	// counted under the connection's lock.
	c.bulkMu.Lock()
	last, err := c.bulkQ.Done(&op.Transfer, p.i, errno)
	c.bulkMu.Unlock()
	if err != nil || !last {
		return nil, false
	}
	done, errno := op.Answer()
	le := binary.LittleEndian
	t.rep.body = le.AppendUint64(t.rep.body, uint64(done))
	t.rep.body = le.AppendUint32(t.rep.body, uint32(errno))
	t.rep.body = le.AppendUint32(t.rep.body, 0)
	putBulk(op)
	return t, true
}
