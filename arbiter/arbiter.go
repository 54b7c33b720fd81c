package arbiter

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Config sets the arbiter's clock and bounds.
type Config struct {
	// TickLen is the arbitration tick: requests whose arrival falls in the
	// same tick (Arrival / TickLen) are ordered by priority and fairness;
	// requests of different ticks by arrival. Default 1µs.
	TickLen time.Duration
	// TimerGranularity is the resolution of the arbiter's timer wheel.
	// Default TickLen.
	TimerGranularity time.Duration
	// MaxPin bounds how long a pin may stay raised. Default 100ms.
	MaxPin time.Duration
	// MaxWait bounds how long a queued request waits for a final answer.
	// Default 10ms.
	MaxWait time.Duration
	// QueueLen bounds the wait queue of one page; 0 means the default (16),
	// a negative value means no queue (busy pages deny at once).
	QueueLen int
	// MaxPending bounds the requests waiting for their tick to close;
	// beyond it Submit denies at once (ReasonBusy). Default 4096.
	MaxPending int
}

// Defaults for unset Config fields.
const (
	DefaultTickLen    = time.Microsecond
	DefaultMaxPin     = 100 * time.Millisecond
	DefaultMaxWait    = 10 * time.Millisecond
	DefaultQueueLen   = 16
	DefaultMaxPending = 4096
)

func (c Config) withDefaults() (Config, error) {
	if c.TickLen < 0 || c.TimerGranularity < 0 || c.MaxPin < 0 || c.MaxWait < 0 || c.MaxPending < 0 {
		return c, fmt.Errorf("%w: negative field in %+v", ErrConfig, c)
	}
	if c.TickLen == 0 {
		c.TickLen = DefaultTickLen
	}
	if c.TimerGranularity == 0 {
		c.TimerGranularity = c.TickLen
	}
	if c.MaxPin == 0 {
		c.MaxPin = DefaultMaxPin
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	switch {
	case c.QueueLen == 0:
		c.QueueLen = DefaultQueueLen
	case c.QueueLen < 0:
		c.QueueLen = 0
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	return c, nil
}

// Sentinel errors of the owner-side calls (Pin, Unpin, ...).
var (
	ErrConfig    = errors.New("arbiter: bad config")
	ErrNotOwner  = errors.New("arbiter: page not owned here")
	ErrSwapping  = errors.New("arbiter: page is swapping")
	ErrPinned    = errors.New("arbiter: page already pinned")
	ErrNotPinned = errors.New("arbiter: page not pinned")
	ErrNotHolder = errors.New("arbiter: pin held by another holder")
	ErrPinBound  = errors.New("arbiter: pin bound above MaxPin")
	ErrNoSwap    = errors.New("arbiter: no swap in progress")
)

// HolderID names who raised a pin on the owner's host (for example a host
// connection or thread); it is reported in fault reports.
type HolderID uint64

// Action is what the arbiter did about a fault.
type Action uint8

// Fault actions.
const (
	// ActionPinRevoked: the pin was dropped and every queued request
	// failed with an exception (ReasonHostFault).
	ActionPinRevoked Action = iota + 1
)

func (a Action) String() string {
	if a == ActionPinRevoked {
		return "pin-revoked"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// FaultReport is a host fault: a pin outlived its bound.
type FaultReport struct {
	Page     gva.GVA
	Holder   HolderID
	PinnedAt time.Duration
	Bound    time.Duration
	Held     time.Duration // how long the pin stayed raised
	At       time.Duration // when the timer fired
	Action   Action
	Failed   int // queued requests answered with an exception
}

func (f FaultReport) String() string {
	return fmt.Sprintf("host fault: page %v pinned by holder %d at %v held %v (bound %v): %v, %d waiters failed",
		f.Page, f.Holder, f.PinnedAt, f.Held, f.Bound, f.Action, f.Failed)
}

// Arbiter orders the requests for the pages this node owns. It is a
// deterministic single-threaded state machine; see the package
// documentation for the rules.
type Arbiter struct {
	cfg     Config
	now     time.Duration
	wheel   *Wheel[timerRef]
	pages   map[gva.GVA]*page
	pending []pendingRequest
	head    int // pending[head:] are undecided
	seq     uint64

	answers []Answer
	faults  []FaultReport
	fired   []Fired[timerRef]
	keep    []waiter
}

type page struct {
	key      gva.GVA
	swapping bool
	grantee  Request // the acquire being served while swapping
	pin      pinState
	queue    []waiter
}

type pinState struct {
	held   bool
	holder HolderID
	since  time.Duration
	bound  time.Duration
	timer  TimerID
}

type waiter struct {
	req      Request
	seq      uint64
	deadline time.Duration
	timer    TimerID
}

type timerKind uint8

const (
	timerPin timerKind = iota + 1
	timerWait
)

type timerRef struct {
	kind timerKind
	page gva.GVA
	seq  uint64 // waiter seq for timerWait
}

// New returns an arbiter that owns no page, whose clock starts at 0.
func New(cfg Config) (*Arbiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Arbiter{
		cfg:   cfg,
		wheel: NewWheel[timerRef](cfg.TimerGranularity, 0),
		pages: make(map[gva.GVA]*page),
	}, nil
}

// Config returns the effective configuration (defaults filled in).
func (a *Arbiter) Config() Config { return a.cfg }

// AnswerBound is the longest a request waits for its first answer (the
// close of its arrival tick), and FinalBound the longest it waits for its
// final answer (first answer plus a queue wait, rounded up to the timer
// granularity).
func (a *Arbiter) AnswerBound() time.Duration { return a.cfg.TickLen }

// FinalBound: see AnswerBound.
func (a *Arbiter) FinalBound() time.Duration {
	return a.cfg.TickLen + a.cfg.MaxWait + a.cfg.TimerGranularity
}

func (a *Arbiter) clock(now time.Duration) time.Duration {
	if now > a.now {
		a.now = now
	}
	return a.now
}

func (a *Arbiter) tickOf(t time.Duration) int64 { return int64(t / a.cfg.TickLen) }

// Own registers key as a page this node owns (after allocating it or after
// taking ownership). Owning an owned page is a no-op.
func (a *Arbiter) Own(key gva.GVA) {
	if _, ok := a.pages[key]; !ok {
		a.pages[key] = &page{key: key}
	}
}

// Owns reports whether key is owned here.
func (a *Arbiter) Owns(key gva.GVA) bool {
	_, ok := a.pages[key]
	return ok
}

// Disown drops a page that leaves this node other than by a granted
// acquire (it was freed). Its pin is dropped and its queued requests are
// denied (ReasonNotOwner). The slice is valid until the next call.
func (a *Arbiter) Disown(now time.Duration, key gva.GVA) []Answer {
	now = a.clock(now)
	a.answers = a.answers[:0]
	p, ok := a.pages[key]
	if !ok {
		return a.answers
	}
	a.dropPage(now, p, OutcomeDeny, ReasonNotOwner)
	return a.answers
}

func (a *Arbiter) dropPage(now time.Duration, p *page, o Outcome, r Reason) {
	if p.pin.held {
		a.wheel.Cancel(p.pin.timer)
	}
	for _, w := range p.queue {
		a.wheel.Cancel(w.timer)
		a.answer(w.req, o, r, now, 0)
	}
	delete(a.pages, p.key)
}

// Submit hands a request to the arbiter at now, which becomes its Arrival
// (a now earlier than the arbiter's clock counts as the clock). It is
// decided when its arrival tick closes, by the first Advance at or after
// that time (NextDeadline says when), with two exceptions that Submit
// answers at once (immediate true): too many requests pending (deny,
// ReasonBusy), and an uncontended write or atomic (grant: its page is owned
// here, not swapping, and no request of the page waits for a tick).
func (a *Arbiter) Submit(now time.Duration, req Request) (ans Answer, immediate bool) {
	now = a.clock(now)
	req.Arrival = now
	if len(a.pending)-a.head >= a.cfg.MaxPending {
		return Answer{Request: req, Outcome: OutcomeDeny, Reason: ReasonBusy, At: now}, true
	}
	if req.Kind == KindWrite || req.Kind == KindAtomic {
		// Uncontended: nothing of its page waits for a tick and the page
		// does not block it. No request can be ordered before it (none
		// has arrived), and a write or an atomic denies nobody, so it is
		// decided now rather than at its tick's close.
		if p, ok := a.pages[req.Page]; ok && !p.blocks(req.Kind) && !a.pendingFor(req.Page) {
			return Answer{Request: req, Outcome: OutcomeGrant, Reason: ReasonNone, At: now}, true
		}
	}
	if a.head > 0 && a.head == len(a.pending) {
		a.pending, a.head = a.pending[:0], 0
	}
	a.pending = append(a.pending, pendingRequest{req: req, tick: a.tickOf(now), seq: a.seq})
	a.seq++
	return Answer{}, false
}

// pendingFor reports whether a request for key waits for its tick.
func (a *Arbiter) pendingFor(key gva.GVA) bool {
	for i := a.head; i < len(a.pending); i++ {
		if a.pending[i].req.Page == key {
			return true
		}
	}
	return false
}

// NextDeadline is when Advance next has work: the close of the oldest
// pending tick or the next timer. ok is false when there is none.
func (a *Arbiter) NextDeadline() (at time.Duration, ok bool) {
	at, ok = a.wheel.NextDeadline()
	if a.head < len(a.pending) {
		c := a.tickClose(a.pending[a.head].tick)
		if !ok || c < at {
			at, ok = c, true
		}
	}
	return at, ok
}

func (a *Arbiter) tickClose(tick int64) time.Duration {
	return time.Duration(tick+1) * a.cfg.TickLen
}

// Advance runs the arbiter up to now: it decides every request whose
// arrival tick has closed and fires every timer that is due, in time order
// (a timer and a tick close at the same instant: the timer first). It
// returns the answers and fault reports; both slices are valid until the
// next call.
func (a *Arbiter) Advance(now time.Duration) ([]Answer, []FaultReport) {
	now = a.clock(now)
	a.answers, a.faults = a.answers[:0], a.faults[:0]
	for {
		td, tok := a.wheel.NextDeadline()
		tok = tok && td <= now
		var tc time.Duration
		cok := a.head < len(a.pending)
		if cok {
			tc = a.tickClose(a.pending[a.head].tick)
			cok = tc <= now
		}
		switch {
		case tok && (!cok || td <= tc):
			a.fired = a.wheel.Advance(td, a.fired[:0])
			for _, f := range a.fired {
				a.fire(td, f)
			}
		case cok:
			a.decideTick(tc)
		default:
			return a.answers, a.faults
		}
	}
}

// decideTick decides, in order, the pending requests of the oldest pending
// tick, at its close time t.
func (a *Arbiter) decideTick(t time.Duration) {
	tick := a.pending[a.head].tick
	end := a.head
	for end < len(a.pending) && a.pending[end].tick == tick {
		end++
	}
	batch := a.pending[a.head:end]
	slices.SortFunc(batch, func(x, y pendingRequest) int { return compareSameTick(&x, &y) })
	a.head = end
	for i := range batch {
		a.decide(t, batch[i].req, batch[i].seq)
	}
	if a.head == len(a.pending) {
		a.pending, a.head = a.pending[:0], 0
	}
}

func (a *Arbiter) answer(req Request, o Outcome, r Reason, at, deadline time.Duration) {
	a.answers = append(a.answers, Answer{Request: req, Outcome: o, Reason: r, At: at, Deadline: deadline})
}

// decide answers one fresh request at time t.
func (a *Arbiter) decide(t time.Duration, req Request, seq uint64) {
	if req.Kind < KindAcquire || req.Kind > KindAtomic {
		a.answer(req, OutcomeException, ReasonBadRequest, t, 0)
		return
	}
	p, ok := a.pages[req.Page]
	if !ok {
		a.answer(req, OutcomeDeny, ReasonNotOwner, t, 0)
		return
	}
	// An acquire also waits behind older queued acquires; a write or atomic
	// the page does not block passes them (only acquires wait on a pin).
	if !p.blocks(req.Kind) && (req.Kind != KindAcquire || len(p.queue) == 0) {
		a.grant(t, p, req)
		return
	}
	if len(p.queue) >= a.cfg.QueueLen {
		r := ReasonPinned
		if p.swapping {
			r = ReasonSwapping
		}
		a.answer(req, OutcomeDeny, r, t, 0)
		return
	}
	deadline := t + a.cfg.MaxWait
	id := a.wheel.Schedule(deadline, timerRef{kind: timerWait, page: p.key, seq: seq})
	deadline = a.wheel.FireTime(deadline)
	p.queue = append(p.queue, waiter{req: req, seq: seq, deadline: deadline, timer: id})
	a.answer(req, OutcomeQueued, ReasonNone, t, deadline)
}

// blocks reports whether the page's state makes a request of kind k wait:
// a swap blocks everything; a pin blocks acquires only (writes and atomics
// are executed by the owner while it holds the lock).
func (p *page) blocks(k Kind) bool {
	return p.swapping || (p.pin.held && k == KindAcquire)
}

func (a *Arbiter) grant(t time.Duration, p *page, req Request) {
	if req.Kind == KindAcquire && req.Port != noc.LocalPort {
		p.swapping = true
		p.grantee = req
	}
	a.answer(req, OutcomeGrant, ReasonNone, t, 0)
}

// serveQueue re-decides the queue of p in order after the page became less
// busy (unpin, aborted swap): requests the page no longer blocks are
// granted, the others keep their place and deadline.
func (a *Arbiter) serveQueue(t time.Duration, p *page) {
	a.keep = a.keep[:0]
	for _, w := range p.queue {
		if p.blocks(w.req.Kind) {
			a.keep = append(a.keep, w)
			continue
		}
		a.wheel.Cancel(w.timer)
		a.grant(t, p, w.req)
	}
	p.queue = append(p.queue[:0], a.keep...)
}

func (a *Arbiter) fire(t time.Duration, f Fired[timerRef]) {
	p, ok := a.pages[f.Value.page]
	if !ok {
		return // page dropped; its timers were cancelled, so this is unreachable
	}
	switch f.Value.kind {
	case timerPin:
		if !p.pin.held || p.pin.timer != f.ID {
			return
		}
		fr := FaultReport{
			Page: p.key, Holder: p.pin.holder, PinnedAt: p.pin.since, Bound: p.pin.bound,
			Held: t - p.pin.since, At: t, Action: ActionPinRevoked, Failed: len(p.queue),
		}
		p.pin = pinState{}
		for _, w := range p.queue {
			a.wheel.Cancel(w.timer)
			a.answer(w.req, OutcomeException, ReasonHostFault, t, 0)
		}
		p.queue = p.queue[:0]
		a.faults = append(a.faults, fr)
	case timerWait:
		for i, w := range p.queue {
			if w.seq == f.Value.seq {
				p.queue = slices.Delete(p.queue, i, i+1)
				a.answer(w.req, OutcomeDeny, ReasonTimeout, t, 0)
				return
			}
		}
	}
}

// Pin raises the page's pin (lock register) for holder: while it is raised
// the page is not swappable and acquires queue. bound (0: MaxPin) must not
// exceed MaxPin; if the pin is still raised bound after now, Advance
// revokes it and reports a host fault.
func (a *Arbiter) Pin(now time.Duration, key gva.GVA, holder HolderID, bound time.Duration) error {
	now = a.clock(now)
	p, ok := a.pages[key]
	switch {
	case !ok:
		return fmt.Errorf("pin %v: %w", key, ErrNotOwner)
	case bound < 0 || bound > a.cfg.MaxPin:
		return fmt.Errorf("pin %v for %v: %w (%v)", key, bound, ErrPinBound, a.cfg.MaxPin)
	case p.swapping:
		return fmt.Errorf("pin %v: %w", key, ErrSwapping)
	case p.pin.held:
		return fmt.Errorf("pin %v: %w by holder %d", key, ErrPinned, p.pin.holder)
	}
	if bound == 0 {
		bound = a.cfg.MaxPin
	}
	p.pin = pinState{held: true, holder: holder, since: now, bound: bound,
		timer: a.wheel.Schedule(now+bound, timerRef{kind: timerPin, page: key})}
	return nil
}

// Unpin lowers the pin raised by holder and serves the queued requests in
// order (see Advance for the slice's validity).
func (a *Arbiter) Unpin(now time.Duration, key gva.GVA, holder HolderID) ([]Answer, error) {
	now = a.clock(now)
	a.answers = a.answers[:0]
	p, ok := a.pages[key]
	switch {
	case !ok:
		return nil, fmt.Errorf("unpin %v: %w", key, ErrNotOwner)
	case !p.pin.held:
		return nil, fmt.Errorf("unpin %v: %w", key, ErrNotPinned)
	case p.pin.holder != holder:
		return nil, fmt.Errorf("unpin %v by %d: %w (%d)", key, holder, ErrNotHolder, p.pin.holder)
	}
	a.wheel.Cancel(p.pin.timer)
	p.pin = pinState{}
	a.serveQueue(now, p)
	return a.answers, nil
}

// SwapDone ends the ownership transfer of a granted acquire: the page now
// belongs to the grantee, the arbiter forgets it, and its queued requests
// are denied with ReasonMoved (they retry toward the new owner).
func (a *Arbiter) SwapDone(now time.Duration, key gva.GVA) ([]Answer, error) {
	now = a.clock(now)
	a.answers = a.answers[:0]
	p, ok := a.pages[key]
	if !ok || !p.swapping {
		return nil, fmt.Errorf("swap done %v: %w", key, ErrNoSwap)
	}
	a.dropPage(now, p, OutcomeDeny, ReasonMoved)
	return a.answers, nil
}

// SwapAbort cancels the ownership transfer of a granted acquire (the
// engine gave up on it): the page stays owned here and its queued requests
// are served in order.
func (a *Arbiter) SwapAbort(now time.Duration, key gva.GVA) ([]Answer, error) {
	now = a.clock(now)
	a.answers = a.answers[:0]
	p, ok := a.pages[key]
	if !ok || !p.swapping {
		return nil, fmt.Errorf("swap abort %v: %w", key, ErrNoSwap)
	}
	p.swapping, p.grantee = false, Request{}
	a.serveQueue(now, p)
	return a.answers, nil
}

// PageState describes one owned page, for display (dpuctl owner show).
type PageState struct {
	Page     gva.GVA
	Swapping bool
	Grantee  noc.NodeID // while swapping
	Pinned   bool
	Holder   HolderID
	PinnedAt time.Duration
	PinBound time.Duration
	Queued   int
}

// Waiter is a request queued for a page, as Waiters reports it.
type Waiter struct {
	Request  Request
	Deadline time.Duration // when it is answered at the latest
}

// Waiters lists the requests queued for an owned page, in the order they
// will be served. It allocates; it is for snapshots, not the hot path.
func (a *Arbiter) Waiters(key gva.GVA) []Waiter {
	p, ok := a.pages[key]
	if !ok {
		return nil
	}
	out := make([]Waiter, len(p.queue))
	for i, w := range p.queue {
		out[i] = Waiter{Request: w.req, Deadline: w.deadline}
	}
	return out
}

// Page returns the state of an owned page.
func (a *Arbiter) Page(key gva.GVA) (PageState, bool) {
	p, ok := a.pages[key]
	if !ok {
		return PageState{}, false
	}
	return p.state(), true
}

func (p *page) state() PageState {
	s := PageState{Page: p.key, Swapping: p.swapping, Pinned: p.pin.held, Queued: len(p.queue)}
	if p.swapping {
		s.Grantee = p.grantee.Node
	}
	if p.pin.held {
		s.Holder, s.PinnedAt, s.PinBound = p.pin.holder, p.pin.since, p.pin.bound
	}
	return s
}

// Snapshot returns the state of every owned page ordered by page. It
// allocates; it is not for the hot path.
func (a *Arbiter) Snapshot() []PageState {
	out := make([]PageState, 0, len(a.pages))
	for _, p := range a.pages {
		out = append(out, p.state())
	}
	slices.SortFunc(out, func(x, y PageState) int { return gva.Compare(x.Page, y.Page) })
	return out
}

// Pending returns the number of requests waiting for their tick to close.
func (a *Arbiter) Pending() int { return len(a.pending) - a.head }
