package hostif

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/hostif/ring"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/quota"
)

// Shared-memory rings (PROTOCOL.md §12). A connection that asks (op RINGS)
// gets a ring pair; the driver's loop (the agent's single run loop) takes
// its submissions with ServeRings, and every reply to a request that came
// on the ring goes back on the ring. The server never trusts the ring: each
// message is copied out by package ring, then decoded and checked like a
// socket request; a corrupt ring ends its connection and nothing else.

// connRing is the ring pair of one connection.
type connRing struct {
	c *conn
	p *ring.Pair

	// mu guards every use of p: the loop pops, whoever completes a request
	// pushes its reply.
	mu       sync.Mutex
	inflight int      // taken off the ring and not yet answered (held replies included)
	held     [][]byte // replies the completion ring had no room for
	taken    uint64   // submissions the loop took, in all
	garbage  int
	closed   bool
	// stalledAt is when the loop last found the completion ring full with
	// replies held back (zero while the host reaps): the host has not
	// reaped since, and past Options.WriteTimeout the connection is cut.
	stalledAt time.Time

	buf   []byte // where the loop takes a submission too long for a task, to refuse it
	spare *task  // the loop's task for the next submission (under mu)
}

// ringSet is the server's rings, for the driver's loop.
type ringSet struct {
	mu    sync.Mutex               // serialises add and remove
	now   atomic.Pointer[ringsNow] // copied on write: the loop reads it every pass without a lock
	turns map[uint32]*userTurn     // each user's turn, while it has a ring (under mu)
	cut   atomic.Uint64            // connections cut for not reaping their completions
}

// ringsNow is the rings open at one time, in two orders: as they opened,
// and by user (the scheduler's share is a user's). Neither is modified
// once published.
type ringsNow struct {
	all   []*connRing // in the order they opened
	users []userRings // the users with rings, in the order their first ring opened
}

// userRings is one user's rings.
type userRings struct {
	rings []*connRing // in the order they opened
	turn  *userTurn
}

// userTurn is where the next pass starts among a user's rings. It outlives
// the ringsNow that name it; only the driver's loop reads or writes it.
type userTurn struct{ next int }

// RingStats are the counters of the server's ring pairs.
type RingStats struct {
	Rings   int    // ring pairs open
	Stalled int    // of them, with replies held back because the host does not reap
	Cut     uint64 // connections cut because their host did not reap within WriteTimeout
}

// RingStats returns the rings' counters.
func (s *Server) RingStats() RingStats {
	st := RingStats{Cut: s.rings.cut.Load()}
	for _, rg := range s.rings.snapshot() {
		st.Rings++
		rg.mu.Lock()
		if !rg.closed && len(rg.held) > 0 {
			st.Stalled++
		}
		rg.mu.Unlock()
	}
	return st
}

func (rs *ringSet) add(r *connRing) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var all []*connRing
	if cur := rs.now.Load(); cur != nil {
		all = append(all, cur.all...)
	}
	rs.publishLocked(append(all, r))
}

func (rs *ringSet) remove(r *connRing) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	cur := rs.now.Load()
	if cur == nil {
		return
	}
	all := make([]*connRing, 0, len(cur.all))
	for _, x := range cur.all {
		if x != r {
			all = append(all, x)
		}
	}
	rs.publishLocked(all)
}

// publishLocked publishes all as the rings open now, grouped by user for the
// scheduler; a user keeps its turn while it has a ring. It holds rs.mu.
func (rs *ringSet) publishLocked(all []*connRing) {
	now := &ringsNow{all: all}
	at := make(map[uint32]int) // uid → its index in now.users
	for _, r := range all {
		uid := r.c.cred.UID
		i, ok := at[uid]
		if !ok {
			i = len(now.users)
			at[uid] = i
			turn := rs.turns[uid]
			if turn == nil {
				turn = new(userTurn)
			}
			now.users = append(now.users, userRings{turn: turn})
		}
		now.users[i].rings = append(now.users[i].rings, r)
	}
	turns := make(map[uint32]*userTurn, len(at))
	for uid, i := range at {
		turns[uid] = now.users[i].turn
	}
	rs.turns = turns
	rs.now.Store(now)
}

// snapshot returns the rings as they are now, in the order they opened;
// the caller must not modify the slice.
func (rs *ringSet) snapshot() []*connRing {
	if cur := rs.now.Load(); cur != nil {
		return cur.all
	}
	return nil
}

// byUser returns the rings as they are now by user; the caller must not
// modify the slice.
func (rs *ringSet) byUser() []userRings {
	if cur := rs.now.Load(); cur != nil {
		return cur.users
	}
	return nil
}

// openRings answers RINGS: a ring pair for c, its descriptors in the reply.
// Rings exist only when a driver serves them (Options.RingBell set).
func (s *Server) openRings(c *conn, r *wire.Request, rep *reply) error {
	if s.opts.RingBell == nil {
		return fmt.Errorf("rings: %w", syscall.EOPNOTSUPP)
	}
	c.ringMu.Lock()
	defer c.ringMu.Unlock()
	if c.ring != nil {
		return fmt.Errorf("rings: this connection has its ring pair: %w", syscall.EEXIST)
	}
	if c.aborted.Load() {
		return fmt.Errorf("rings: %w", syscall.ECONNRESET)
	}
	// The pair's memfd and bell are two of the user's descriptors (their
	// host ends are passed and closed once the reply is queued).
	if err := s.opts.Quota.Take(c.cred.UID, quota.Files, ringFiles); err != nil {
		return fmt.Errorf("rings: the ring pair counts against the user's descriptors: %w", err)
	}
	p, err := ring.New(ring.Fit(r.RingEntries, r.RingSlotSize))
	if err != nil {
		s.opts.Quota.Release(c.cred.UID, quota.Files, ringFiles)
		return fmt.Errorf("rings: %w", syscall.ENOMEM)
	}
	cfg := p.Config()
	rg := &connRing{c: c, p: p, buf: make([]byte, cfg.MaxMessage())}
	memfd, bell := p.TakeHostFDs()
	// the reply passes copies; ours are closed once it is queued
	c.ringFDs = []int{memfd, bell}
	rep.fds = append(rep.fds, memfd, bell)
	rep.body = (&wire.Rings{Entries: cfg.Entries, SlotSize: cfg.SlotSize, MapSize: uint64(cfg.MapSize())}).Append(rep.body)
	c.ring = rg
	s.rings.add(rg)
	s.opts.RingBell(p.Bell(), true)
	return nil
}

// ringFiles is what a ring pair costs its user in descriptors.
const ringFiles = 2

// closeRing ends c's ring pair (the connection ends).
func (s *Server) closeRing(c *conn) {
	c.ringMu.Lock()
	rg := c.ring
	c.ring = nil
	fds := c.ringFDs
	c.ringFDs = nil
	c.ringMu.Unlock()
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	if rg == nil {
		return
	}
	s.opts.Quota.Release(c.cred.UID, quota.Files, ringFiles)
	s.rings.remove(rg)
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if rg.closed {
		return
	}
	rg.closed = true
	s.opts.RingBell(rg.p.Bell(), false) // out of the poll set before the descriptor closes
	_ = rg.p.Close()
}

// ServeRings takes the waiting submissions of every user's rings (up to
// max for each user, split among its rings, serveUser) and starts them:
// data-path requests through the Pipeline in one batch, the others as on
// the socket. now is the driver's pass time, taken as their arrival
// (Options.Observe): reading the clock per request cost more than the
// rest of a ring request's bookkeeping. It reports whether it found any.
// Only the driver's loop calls it.
func (s *Server) ServeRings(max int, now time.Time) bool {
	got := false
	for _, u := range s.rings.byUser() {
		if s.serveUser(u, max, now) {
			got = true
		}
	}
	return got
}

// serveUser serves one user's rings in one pass: together they take at
// most max submissions, however many rings the user opened. Each ring in
// turn, from the user's turn on, may take an even part of what is left of
// the share (a ring with fewer waiting leaves the rest to the rings after
// it), so while the user has no more rings than max every ring of it is
// served in every pass. When the share runs out before every ring was
// served, the next pass starts at the first ring left out; otherwise it
// starts one ring later than this one did. No ring of the user starves,
// and the user's other rings cost another user's rings nothing.
func (s *Server) serveUser(u userRings, max int, now time.Time) bool {
	k := len(u.rings)
	start := u.turn.next % k
	left, got := max, false
	i := 0
	for ; i < k && left > 0; i++ {
		part := (left + k - i - 1) / (k - i) // left split among the k-i rings to go, rounded up
		n := s.serveRing(u.rings[(start+i)%k], part, now)
		left -= n
		got = got || n > 0
	}
	if i < k {
		u.turn.next = (start + i) % k
	} else {
		u.turn.next = (start + 1) % k
	}
	return got
}

// serveRing takes and starts up to max submissions of one ring and returns
// how many it took. The ring's lock is taken once for the pass: the
// throttle's check, every submission's copy out of its slot and the
// slots' release happen under it; decoding, admission and the core's step
// happen after, without it (a request that completes in the step pushes
// its reply under the lock itself).
func (s *Server) serveRing(rg *connRing, max int, now time.Time) int {
	c := rg.c
	taken := s.ringTaken[:0]
	rg.mu.Lock()
	stalled, cut := s.stalledLocked(rg, now)
	if !stalled {
		taken = s.takeLocked(rg, max, taken)
	}
	rg.mu.Unlock()
	if cut {
		s.rings.cut.Add(1)
		s.log.Warn("closing a ring whose host does not reap its completions", "conn", c.id,
			"pid", c.cred.PID, "uid", c.cred.UID, "waited", s.opts.WriteTimeout)
		c.abort()
	}
	if stalled {
		return 0
	}
	if len(taken) > 0 && taken[len(taken)-1].t == nil { // the ring is corrupt
		taken = taken[:len(taken)-1]
		c.abort()
	}
	batch := s.ringOps[:0]
	answered := false // a reply queued in this pass, not flushed yet
	for _, tk := range taken {
		t := tk.t
		t.rg = rg
		t.at = time.Time{}
		if s.opts.Observe != nil {
			t.at = now
		}
		if tk.long {
			s.ringRefuse(rg, t, tk.id, "message longer than a request")
			answered = true
			continue
		}
		msg := t.in[:tk.n]
		if err := wire.DecodeRequest(msg, &t.req); err != nil {
			s.ringRefuse(rg, t, wire.PeekID(msg), err.Error())
			answered = true
			continue
		}
		switch {
		case t.req.Op.SocketOnly():
			s.ringRefuse(rg, t, t.req.ID, fmt.Sprintf("%s is a socket request", t.req.Op))
			answered = true
		default:
			var holds bool
			if batch, holds = s.dispatch(c, t, batch); !holds {
				answered = true
			}
			if len(batch) == cap(batch) {
				s.pipe.Submit(c.call.session, batch)
				clear(batch)
				batch = batch[:0]
			}
		}
	}
	clear(taken)
	s.ringTaken = taken[:0]
	if len(batch) > 0 {
		s.pipe.Submit(c.call.session, batch)
	}
	if answered {
		// the pass's own replies; a completion of the step flushed its
		// own, and the slots were released as they were taken
		rg.flush()
	}
	return len(taken)
}

// takenSub is a submission a pass copied out of its ring: into t.in (n
// bytes), or, too long for a task, only its id kept (long) to refuse it.
// t is nil for a ring found corrupt, always the last entry.
type takenSub struct {
	t    *task
	n    int
	long bool
	id   uint64
}

// takeLocked copies up to max submissions of rg out of their slots and
// releases the slots, holding rg.mu. A corrupt ring ends the list with an
// entry without a task; the caller ends the connection.
func (s *Server) takeLocked(rg *connRing, max int, taken []takenSub) []takenSub {
	if rg.closed {
		return taken
	}
	for range max {
		if rg.inflight >= s.opts.MaxOutstanding {
			break
		}
		// The submission is copied once, into the task's own buffer, and
		// decoded there: its payload (a STORE's bytes) is read until the
		// request completes. The task is kept for the next pass when the
		// ring is empty (the loop polls it often).
		t := rg.spare
		if t == nil {
			t = taskPool.Get().(*task)
		}
		rg.spare = nil
		n, ok, err := rg.p.Pop(t.in[:])
		long := errors.Is(err, ring.ErrShortBuffer)
		if long {
			n, ok, err = rg.p.Pop(rg.buf) // to refuse it
		}
		if err != nil || !ok {
			rg.spare = t
			if err != nil {
				s.log.Warn("closing a corrupt ring", "conn", rg.c.id, "pid", rg.c.cred.PID, "err", err)
				return append(taken, takenSub{})
			}
			break
		}
		rg.inflight++
		rg.taken++
		tk := takenSub{t: t, n: n, long: long}
		if long {
			tk.id = wire.PeekID(rg.buf[:n])
		}
		taken = append(taken, tk)
	}
	if len(taken) > 0 {
		if err := rg.p.Flush(); err != nil { // the slots go back to the host
			rg.c.abort()
		}
	}
	return taken
}

// stalledLocked reports whether rg's host has left replies unreaped (they
// wait in rg.held, and no submission is taken meanwhile: the throttle),
// and whether the connection is to be cut: once they have waited
// Options.WriteTimeout, the bound a socket client gets to read its
// replies. The clock starts when a pass first finds replies held; a
// reaped slot restarts it. now is the driver's pass time. It holds rg.mu.
func (s *Server) stalledLocked(rg *connRing, now time.Time) (stalled, cut bool) {
	if rg.closed || len(rg.held) == 0 {
		rg.stalledAt = time.Time{}
		return false, false
	}
	before := len(rg.held)
	rg.flushLocked()
	switch {
	case len(rg.held) == 0:
		rg.stalledAt = time.Time{}
		return false, false
	case len(rg.held) < before || rg.stalledAt.IsZero():
		rg.stalledAt = now // the host reaped some, or the stall begins
		return true, false
	}
	return true, now.Sub(rg.stalledAt) >= s.opts.WriteTimeout && !rg.c.aborted.Load()
}

// ringRefuse answers a malformed ring request with EINVAL; too many end
// the connection.
func (s *Server) ringRefuse(rg *connRing, t *task, id uint64, why string) {
	defer putTask(t)
	h := wire.Header{Op: t.req.Op, Kind: wire.KindReply, Status: uint32(syscall.EINVAL), ID: id}
	msg := wire.AppendErrorText(h.Append(t.out[:0]), why)
	rg.mu.Lock()
	defer rg.mu.Unlock()
	rg.garbage++
	if rg.garbage > s.opts.MaxGarbage {
		rg.c.abort()
	}
	rg.pushLocked(msg)
}

// answer queues t's reply (or err) on the ring; flush publishes.
func (rg *connRing) answer(t *task, err error, flush bool) {
	if err == nil && len(t.rep.fds) > 0 {
		err = fmt.Errorf("%s: its reply carries descriptors; ask on the socket: %w", t.req.Op, syscall.EINVAL)
	}
	msg := rg.c.s.encodeReply(t, err)
	rg.mu.Lock()
	defer rg.mu.Unlock()
	rg.pushLocked(msg)
	if flush {
		rg.flushLocked()
	}
}

// pushLocked queues one reply, holding it when the completion ring is
// full. It holds rg.mu.
func (rg *connRing) pushLocked(msg []byte) {
	if rg.closed {
		return
	}
	if len(rg.held) == 0 {
		err := rg.p.Push(msg)
		if err == nil {
			rg.inflight--
			return
		}
		if err != ring.ErrFull {
			rg.c.abort()
			return
		}
	}
	rg.held = append(rg.held, append([]byte(nil), msg...))
}

// flush publishes the queued replies, first the held ones that now fit.
func (rg *connRing) flush() {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	rg.flushLocked()
}

func (rg *connRing) flushLocked() {
	if rg.closed {
		return
	}
	for len(rg.held) > 0 {
		if err := rg.p.Push(rg.held[0]); err != nil {
			if err != ring.ErrFull {
				rg.c.abort()
			}
			break
		}
		rg.held = rg.held[1:]
		rg.inflight--
	}
	if err := rg.p.Flush(); err != nil {
		rg.c.abort()
	}
}

// ParkRings tells every ring's host that the driver is about to sleep (they
// ring the bell after a submission from now on). pending reports a
// submission waiting already on a ring the driver can serve now (it must
// not sleep); held, a ring it cannot serve yet, whose completion ring is
// full of replies its host has not reaped, or which has MaxOutstanding
// requests in flight (the driver should sleep briefly and look again:
// hosts do not ring when they reap, and a reply pushed by another
// goroutine does not wake the driver). A ring that cannot be served is
// never pending, whatever its host submitted: the driver would otherwise
// spin on it without taking anything (ServeRings stops at the bound), and
// its host does not get NEED_WAKEUP either (a bell would wake the driver
// for nothing).
func (s *Server) ParkRings() (pending, held bool) {
	for _, rg := range s.rings.snapshot() {
		rg.mu.Lock()
		switch {
		case rg.closed:
		case len(rg.held) > 0 || rg.inflight >= s.opts.MaxOutstanding:
			held = true
		case rg.p.SetNeedWakeup(true):
			pending = true
		}
		rg.mu.Unlock()
	}
	return pending, held
}

// WakeRings undoes ParkRings after the driver woke: hosts stop ringing,
// and the bells that rang are drained. rang reports whether a bell's
// descriptor was seen readable (nil: drain every bell). A bell rung but
// not reported stays readable and wakes the next park at once, which then
// drains it; draining only the bells that rang saves a system call per
// idle ring on every wake-up.
func (s *Server) WakeRings(rang func(bell int) bool) {
	for _, rg := range s.rings.snapshot() {
		rg.mu.Lock()
		if !rg.closed {
			if rang == nil || rang(rg.p.Bell()) {
				rg.p.DrainBell()
			}
			rg.p.SetNeedWakeup(false)
		}
		rg.mu.Unlock()
	}
}
