package hostif

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// The value path: requests other than the data path's (alloc, free,
// acquire, release, lock, unlock, and a load, store, compare-and-swap,
// fetch-add or where whose page attributes are not cached yet) go through
// the backend's Pipeline as values when it accepts them, like the data
// path: a task waits in the pending table, not on a goroutine, and moves
// one stage on at each completion (Server.Complete calls advance):
//
//	start ─▶ [stageStat: VerbStat of the page, when a check needs its attributes]
//	      ─▶ stageCall: the request's own verb ─▶ reply
//
// Each stage is bounded by what is left of the request's deadline (Op.Timeout);
// a connection that closes abandons its calls with its session (VerbClose)
// and takes its tasks back (pendingTable.dropConn, abandoned).

// Stages of a task.
const (
	stageNone uint8 = iota // not on the value path (a data-path op: finishPipelined)
	stageStat              // waiting for the page's attributes (VerbStat, the server's session)
	stageCall              // waiting for the request's own verb
)

// valueVerbs are the verbs of the requests that may take the value path.
var valueVerbs = map[wire.Op]Verb{
	wire.OpAlloc: VerbAlloc, wire.OpFree: VerbFree,
	wire.OpLoad: VerbLoad, wire.OpStore: VerbStore, wire.OpCAS: VerbCAS, wire.OpFetchAdd: VerbFetchAdd,
	wire.OpWhere: VerbWhere, wire.OpAcquire: VerbAcquire, wire.OpRelease: VerbRelease,
	wire.OpLock: VerbLock, wire.OpUnlock: VerbUnlock,
}

// valued reports whether r goes through the Pipeline as a value: the
// backend accepts its verb and the VerbStat its check may need.
func (s *Server) valued(r *wire.Request) bool {
	if s.pipe == nil {
		return false
	}
	v, ok := valueVerbs[r.Op]
	return ok && s.pipe.Accepts(Op{Verb: v, GVA: r.GVA}) && s.pipe.Accepts(Op{Verb: VerbStat, GVA: r.GVA.Key()})
}

// startValued starts t (a request of c that valued accepted). Until it is
// answered it holds its request slot (socket) or its place on the ring.
func (s *Server) startValued(c *conn, t *task) {
	t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
	t.deadline = time.Now().Add(s.opTimeout(&t.req))
	t.stage = stageNone
	s.advance(c, t, nil)
}

// advance moves t on: at its start (d nil), and at the completion d of what
// it waited for. It submits t's next Op, or answers t.
func (s *Server) advance(c *conn, t *task, d *Done) {
	if d != nil {
		switch t.stage {
		case stageStat:
			if d.Err != nil {
				s.answerValued(c, t, fmt.Errorf("stat %v: %w", t.req.GVA.Key(), d.Err))
				return
			}
			s.attrs.Add(t.req.GVA.Key(), d.Attr)
		case stageCall:
			s.answerValued(c, t, s.finishValued(c, t, d))
			return
		}
	}
	if c.aborted.Load() {
		s.answerValued(c, t, fmt.Errorf("%s: %w", t.req.Op, syscall.ECONNRESET))
		return
	}
	left := time.Until(t.deadline)
	if left <= 0 {
		s.answerValued(c, t, fmt.Errorf("%s: %w", t.req.Op, syscall.ETIMEDOUT))
		return
	}
	op, err := s.nextOp(c, t)
	if err != nil {
		s.answerValued(c, t, err)
		return
	}
	op.Timeout = left
	op.Token = s.pending.add(c, t)
	t.end = time.Time{}
	ops := [1]Op{op}
	s.pipe.Submit(ops[:])
}

// nextOp is t's next Op and sets its stage: VerbStat when a check needs the
// page's attributes, else the request's own verb once the server's checks
// (permission, quota, mapped pages) have passed.
func (s *Server) nextOp(c *conn, t *task) (Op, error) {
	r := &t.req
	key := r.GVA.Key()
	stat := Op{Session: ServerSession, Verb: VerbStat, GVA: key}
	op := Op{Session: c.call.session, GVA: key}
	t.stage = stageCall
	switch r.Op {
	case wire.OpAlloc:
		if err := s.allocQuota(c, r, &op); err != nil {
			return Op{}, err
		}
		return op, nil
	case wire.OpFree:
		a, ok := s.attrs.Get(key)
		if !ok {
			t.stage = stageStat
			return stat, nil
		}
		if err := s.freeable(c, key, a); err != nil {
			return Op{}, err
		}
		t.attr = a
		op.Verb, op.Cred = VerbFree, s.credFor(c, key)
		return op, nil
	case wire.OpRelease, wire.OpUnlock:
		op.Verb = valueVerbs[r.Op]
		return op, nil
	}
	// The others act on a page as c's user: its attributes decide.
	if c.cred.UID != 0 && !(bugsCompiled && bugSkipChecks(s.be.Machine())) {
		if !s.attrs.Contains(key) {
			t.stage = stageStat
			return stat, nil
		}
		if err := s.checkCached(c, key, accessFor(r.Op)); err != nil {
			return Op{}, err
		}
	}
	switch r.Op {
	case wire.OpAcquire:
		op.Verb = VerbAcquire
	case wire.OpLock:
		op.Verb, op.Try = VerbLock, r.Flags&wire.LockTry != 0
	default:
		op = pipeOp(r, 0)
		op.Session = c.call.session
	}
	op.Cred = s.credFor(c, key)
	return op, nil
}

// allocQuota fills op's VerbAlloc for r of c: the pages are charged to
// c's user in the core, as it makes them.
func (s *Server) allocQuota(c *conn, r *wire.Request, op *Op) error {
	if r.Flags&wire.AllocHuge != 0 {
		return fmt.Errorf("alloc: huge pages: %w", syscall.EOPNOTSUPP)
	}
	mode := r.Mode
	if mode == 0 {
		mode = s.opts.DefaultMode
	}
	attr := Attr{UID: c.cred.UID, GID: c.cred.GID, Mode: mode}
	op.Verb, op.Pages, op.Attr, op.GVA = VerbAlloc, r.Pages(), attr, gva.GVA{}
	return nil
}

// freeable checks that c may free the allocation at key (attributes a):
// its owner (or root) may, while no process of this host maps its pages.
func (s *Server) freeable(c *conn, key gva.GVA, a Attr) error {
	if c.cred.UID != 0 && c.cred.UID != a.UID {
		return fmt.Errorf("free %v: owned by uid %d: %w", key, a.UID, syscall.EPERM)
	}
	pages := s.allocPages(key)
	for _, rp := range s.replicas.all() {
		if inRange(rp.key, key, pages) {
			return fmt.Errorf("free %v: page %v is mapped on this host: %w", key, rp.key, syscall.EBUSY)
		}
	}
	return nil
}

// allocPages is the size of the allocation at key as made here (1 when it
// was made elsewhere).
func (s *Server) allocPages(key gva.GVA) int {
	s.allocMu.Lock()
	pages, ok := s.allocs[key]
	s.allocMu.Unlock()
	if !ok {
		pages = 1
	}
	return pages
}

// finishValued does what the server does after the backend completed t's
// verb (d) and fills t's reply; it returns the request's error.
func (s *Server) finishValued(c *conn, t *task, d *Done) error {
	r := &t.req
	key := r.GVA.Key()
	switch r.Op {
	case wire.OpAlloc:
		pages := r.Pages()
		if d.Err != nil {
			return fmt.Errorf("alloc %d pages: %w", pages, d.Err)
		}
		s.allocated(d.GVA, pages, Attr{UID: c.cred.UID, GID: c.cred.GID, Mode: orDefault(r.Mode, s.opts.DefaultMode)})
		t.rep.gva = d.GVA
		t.rep.body = binary.LittleEndian.AppendUint64(t.rep.body, uint64(pages))
		return nil
	case wire.OpFree:
		if d.Err != nil {
			return fmt.Errorf("free %v: %w", key, d.Err)
		}
		s.freed(key, t.attr)
		return nil
	case wire.OpAcquire, wire.OpRelease, wire.OpLock, wire.OpUnlock:
		return d.Err
	}
	return s.finishData(c, t, d)
}

// orDefault is v, or def when v is zero.
func orDefault(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// answerValued answers t (its reply, or err) and recycles it; the socket
// request gives its slot back.
func (s *Server) answerValued(c *conn, t *task, err error) {
	t.stage = stageNone
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

// abandoned takes back a task of a closed connection that waited on the
// value path (its session's close abandoned the call: the core undoes an
// ALLOC that succeeds after it, quota included).
func (s *Server) abandoned(c *conn, t *task) {
	putTask(t)
}
