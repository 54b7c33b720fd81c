package hostif

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Pipeline is an optional extension of a Backend that takes requests as
// values and completes them later, with no goroutine and no channel per
// request: the data-path requests (load, store, compare-and-swap,
// fetch-add, where) and, where Accepts says so, every other verb a host
// request needs (alloc, free, stat, acquire, release, lock, unlock).
//
// The server hands Submit the requests of one read batch; the backend runs
// them as one step of its core and returns at once. Their completions come
// back as values: the backend's driver collects them during its steps and,
// after each step and outside its own locks, hands them to the function
// given to Attach (the server's Complete). A request on a page owned here
// so completes on the goroutine that read it; one that crosses the fabric
// completes on whichever goroutine steps the core when the answer arrives.
//
// Every request submitted is completed exactly once, within its Timeout
// (zero: the backend's request bound), unless its session closes first
// (VerbClose abandons it: the server takes its task back itself).
type Pipeline interface {
	// Attach gives the backend the server's completion entry point; the
	// server calls it once, before its first Submit.
	Attach(complete func([]Done))
	// Accepts reports whether op can go through Submit (the backend can
	// run it without a blocking verb). The server asks with the op's Verb
	// (and GVA where it has one); it sends what Accepts refuses through
	// Backend.Do instead.
	Accepts(op Op) bool
	// Submit starts ops. It keeps nothing of them after it returns (Data
	// is copied).
	Submit(ops []Op)
}

// Awaiter is an optional extension of a Pipeline. A connection's reader,
// once it has submitted a batch and flushed the replies that came at once,
// calls Await with a report of whether its requests are still in flight,
// before it reads again. A backend whose driver would otherwise wake up
// for their answers (a request on a page owned on another node) may use
// the reader's goroutine, already on a CPU, to step its core until the
// answers arrive: run to completion, with the wake-up of the driver and
// the hand-off to it taken out of the request's path. Await keeps to its
// own bound and returns at once when it has nothing to do; the completions
// it produces come through Complete as usual.
type Awaiter interface {
	Await(pending func() bool)
}

// Op is one request handed to a Pipeline: a Call as a value. Which fields
// a verb reads is said at the verb (and at Call).
type Op struct {
	Token    uint64  // the server's, below 1<<63; echoed in the Done
	Session  Session // the session it is made in (its connection's, or ServerSession)
	Verb     Verb    // any verb but VerbOpen and VerbClose
	GVA      gva.GVA // the page key or the address, with its byte offset
	Len      int     // VerbLoad: bytes to read
	Data     []byte  // VerbStore: bytes to write (valid during Submit)
	Expected uint64  // VerbCAS
	Operand  uint64  // VerbCAS: desired; VerbFetchAdd: delta
	Pages    int     // VerbAlloc
	Attr     Attr    // VerbAlloc
	Try      bool    // VerbLock
	Cred     Cred    // the user it is made for (see Cred)
	// Timeout bounds the request in the backend (zero: its own bound); it
	// completes with ETIMEDOUT when it runs out.
	Timeout time.Duration
}

// Done is the completion of an Op.
type Done struct {
	Token   uint64
	Err     error   // nil, or an error wrapping a syscall.Errno
	GVA     gva.GVA // VerbAlloc: the first page
	Attr    Attr    // VerbStat
	Version gva.Version
	Value   uint64   // VerbCAS, VerbFetchAdd: the word found
	Data    []byte   // VerbLoad: the bytes read (valid during Complete)
	Where   Location // VerbWhere
}

// pending is a request in the pipeline: the connection and task that wait
// for its Done.
type pending struct {
	c *conn
	t *task
}

// pendingTable maps pipeline tokens to their requests: a slot array with
// a free list, the token being the slot's index and its generation (a
// token whose slot was taken and reused is no longer found). Tokens stay
// below 1<<63.
type pendingTable struct {
	mu    sync.Mutex
	slots []pendingSlot
	free  []uint32
}

type pendingSlot struct {
	pending
	gen  uint32 // bumped when the slot is taken
	used bool
}

func (p *pendingTable) add(c *conn, t *task) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var i uint32
	if n := len(p.free); n > 0 {
		i, p.free = p.free[n-1], p.free[:n-1]
	} else {
		i = uint32(len(p.slots))
		p.slots = append(p.slots, pendingSlot{})
	}
	sl := &p.slots[i]
	sl.pending, sl.used = pending{c: c, t: t}, true
	return uint64(sl.gen&(1<<31-1))<<32 | uint64(i)
}

// dropConn takes back the requests of c still in the table (its session
// closed: they complete no more) and returns their tasks.
func (p *pendingTable) dropConn(c *conn) []*task {
	p.mu.Lock()
	var tasks []*task
	for i := range p.slots {
		sl := &p.slots[i]
		if !sl.used || sl.c != c {
			continue
		}
		tasks = append(tasks, sl.t)
		sl.pending, sl.used = pending{}, false
		sl.gen++
		p.free = append(p.free, uint32(i))
	}
	p.mu.Unlock()
	return tasks
}

func (p *pendingTable) take(token uint64) (pending, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, gen := uint32(token), uint32(token>>32)
	if int(i) >= len(p.slots) || !p.slots[i].used || p.slots[i].gen&(1<<31-1) != gen {
		return pending{}, false
	}
	sl := &p.slots[i]
	pd := sl.pending
	sl.pending, sl.used = pending{}, false
	sl.gen++
	p.free = append(p.free, i)
	return pd, true
}

// pipelined reports whether r of c goes through the backend's Pipeline:
// a data-path op whose permission is known without asking the backend.
func (s *Server) pipelined(c *conn, r *wire.Request) bool {
	if s.pipe == nil {
		return false
	}
	switch r.Op {
	case wire.OpLoad, wire.OpStore, wire.OpCAS, wire.OpFetchAdd, wire.OpWhere:
	default:
		return false
	}
	if c.cred.UID != 0 && !s.attrs.Contains(r.GVA.Key()) {
		return false // the first access asks the backend for the attributes
	}
	return s.pipe.Accepts(pipeOp(r, 0))
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

// admitPipelined checks c's permission for t and registers it in the
// pending table; it returns the Op to submit, or false after answering t
// itself (a refused permission).
func (s *Server) admitPipelined(c *conn, t *task) (Op, bool) {
	r := &t.req
	if err := s.checkCached(c, r.GVA.Key(), accessFor(r.Op)); err != nil {
		t.rep = reply{gva: r.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen]}
		if t.rg != nil {
			t.rg.answer(t, err)
		} else {
			c.reply(t, err, false)
		}
		return Op{}, false
	}
	op := pipeOp(r, s.pending.add(c, t))
	op.Session = c.call.session
	op.Cred = s.credFor(c, r.GVA.Key())
	return op, true
}

func accessFor(op wire.Op) uint32 {
	switch op {
	case wire.OpStore:
		return accessWrite
	case wire.OpCAS, wire.OpFetchAdd, wire.OpAcquire, wire.OpLock:
		return accessRead | accessWrite
	}
	return accessRead
}

// checkCached is check for a page whose attributes are cached (pipelined
// ensured it, and attributes leave the cache only at Free).
func (s *Server) checkCached(c *conn, key gva.GVA, need uint32) error {
	if c.cred.UID == 0 || bugsCompiled && bugSkipChecks(s.be.Machine()) {
		return nil
	}
	a, ok := s.attrs.Get(key)
	if !ok {
		return fmt.Errorf("page %v: freed: %w", key, syscall.ENOENT)
	}
	if !c.cred.allowed(a, need) {
		return fmt.Errorf("page %v mode %#o owner %d:%d: %w", key, a.Mode, a.UID, a.GID, syscall.EACCES)
	}
	return nil
}

// Complete takes the completions of pipelined requests: it updates the
// replica files, queues each reply on its connection and flushes every
// connection it touched once. The backend's driver calls it after a step,
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
		if pd.t.stage != stageNone {
			s.advance(pd.c, pd.t, &ds[i]) // a request on the value path (calls.go)
			continue
		}
		s.finishPipelined(pd.c, pd.t, &ds[i])
	}
	for _, c := range conns {
		c.flush()
	}
	for _, rg := range rings {
		rg.flush()
	}
}

// appendOnce appends x to xs unless it is there already (the connections
// of one batch of completions are few).
func appendOnce[T comparable](xs []T, x T) []T {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

// finishPipelined does what exec does after the backend call of a data-path
// op, and queues the reply.
func (s *Server) finishPipelined(c *conn, t *task, d *Done) {
	defer func() {
		if t.rg == nil {
			<-c.sem
		}
		putTask(t)
	}()
	t.rep = reply{gva: t.req.GVA, body: t.out[wire.HeaderLen:wire.HeaderLen], fds: t.rep.fds[:0]}
	err := s.finishData(c, t, d)
	if t.rg != nil {
		t.rg.answer(t, err)
		return
	}
	if c.aborted.Load() {
		return
	}
	c.reply(t, err, false)
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
