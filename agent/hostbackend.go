package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/node"
)

// hostBackend adapts the coherence engine, a single-threaded state machine
// inside the node core, to the host interface's Backend, whose methods are
// called from connection goroutines. A request is submitted as one step of
// the core (Agent.onCore); its completion comes back through the engine's
// Sink, called inside some step and never blocking, to a per-request
// channel, so a request on a page owned here completes within its own step.
type hostBackend struct {
	a      *Agent
	engine *coherence.Engine

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan coherence.Completion
	// abandoned are requests whose caller gave up while they were in
	// flight and whose success must be undone (a lock nobody will unlock).
	abandoned map[uint64]coherence.Request
	attrs     map[gva.GVA]hostif.Attr // pages allocated here (page key -> attributes)
	extents   map[gva.GVA]int         // first page of an allocation -> pages
	// mapped counts the engine refs this backend holds per page (the
	// server's Ref, and the refs Lock and Acquire take so that a path to
	// the owner exists); the engine counts them too.
	mapped map[gva.GVA]int
	// acquired marks the pages this node took with Acquire (not Lock): the
	// ones whose loss of ownership the host hears about.
	acquired map[gva.GVA]bool

	events   chan hostif.Event
	overflow bool // an event was dropped; EventOverflow is owed

	// The pipeline (hostif.Pipeline): async maps engine request ids of
	// pipelined requests to the server's tokens (under mu); done collects
	// their completions during a step and is taken at its end (under the
	// agent's mu, which every step holds); complete is the server's.
	async    map[uint64]uint64
	done     []hostif.Done
	complete func([]hostif.Done)
}

// holderID names this node as pin holder: the host interface serialises
// the node's local lockers, so one holder per node suffices.
const holderID = 1

// retryPause paces retries of lock and acquire while their page is busy.
const retryPause = 2 * time.Millisecond

func newHostBackend(a *Agent) *hostBackend {
	return &hostBackend{a: a, waiting: map[uint64]chan coherence.Completion{}, abandoned: map[uint64]coherence.Request{}, attrs: map[gva.GVA]hostif.Attr{},
		extents: map[gva.GVA]int{}, mapped: map[gva.GVA]int{}, acquired: map[gva.GVA]bool{},
		events: make(chan hostif.Event, 1024), async: map[uint64]uint64{}}
}

// Complete implements coherence.Sink (inside a core step).
func (b *hostBackend) Complete(c coherence.Completion) {
	b.mu.Lock()
	if token, ok := b.async[c.ID]; ok {
		delete(b.async, c.ID)
		b.mu.Unlock()
		b.done = append(b.done, doneOf(token, &c))
		return
	}
	ch := b.waiting[c.ID]
	delete(b.waiting, c.ID)
	r, late := b.abandoned[c.ID]
	delete(b.abandoned, c.ID)
	b.mu.Unlock()
	if late && c.Err == nil {
		go b.undo(r) // a step may not start another: undo on its own goroutine
	}
	if ch == nil {
		return // the caller gave up
	}
	if c.Data != nil {
		c.Data = append([]byte(nil), c.Data...)
	}
	ch <- c // buffered, one completion per request
}

// Event implements coherence.Sink (inside a core step): engine events
// become host events, dropped with a later EventOverflow when the host
// interface falls behind.
func (b *hostBackend) Event(ev coherence.Event) {
	he := hostif.Event{Page: ev.GVA.Key(), Version: ev.Version}
	switch ev.Kind {
	case coherence.EventInvalidated:
		he.Kind = hostif.EventInvalidate
	case coherence.EventHostFault:
		he.Kind, he.Reason = hostif.EventHostFault, syscall.ETIMEDOUT
		b.a.publishFault(ev)
	case coherence.EventOwnershipLost:
		// Only an acquisition hears of the loss. A lock cannot lose its
		// page while pinned (a revoked pin comes as EventHostFault), and
		// the loss that follows an unlock, delivered after the next Lock of
		// the page completed, would revoke that new lock in the server.
		b.mu.Lock()
		acq := b.acquired[he.Page]
		delete(b.acquired, he.Page)
		b.mu.Unlock()
		if !acq {
			return
		}
		he.Kind = hostif.EventOwnershipLost
	default:
		return
	}
	b.send(he)
}

func (b *hostBackend) send(he hostif.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overflow {
		select {
		case b.events <- hostif.Event{Kind: hostif.EventOverflow}:
			b.overflow = false
		default:
			return
		}
	}
	select {
	case b.events <- he:
	default:
		b.overflow = true
	}
}

// Events implements hostif.Backend.
func (b *hostBackend) Events() <-chan hostif.Event { return b.events }

// Machine implements hostif.Backend.
func (b *hostBackend) Machine() gva.MachineIndex { return gva.MachineIndex(b.a.cfg.Node) }

// submit runs one engine request and waits for its completion or ctx.
func (b *hostBackend) submit(ctx context.Context, r coherence.Request) (coherence.Completion, error) {
	res, err := b.submitAll(ctx, []coherence.Request{r})
	if err != nil {
		return coherence.Completion{}, err
	}
	return res[0], res[0].Err
}

// submitAll hands the engine a batch of requests in one core step (so
// allocations in a batch get consecutive pages) and waits for them all.
func (b *hostBackend) submitAll(ctx context.Context, rs []coherence.Request) ([]coherence.Completion, error) {
	chs := make([]chan coherence.Completion, len(rs))
	b.mu.Lock()
	for i := range rs {
		b.nextID++
		rs[i].ID = b.nextID
		chs[i] = make(chan coherence.Completion, 1)
		b.waiting[rs[i].ID] = chs[i]
	}
	b.mu.Unlock()
	forget := func() {
		b.mu.Lock()
		for _, r := range rs {
			if _, pending := b.waiting[r.ID]; pending && undoable(r.Op) {
				b.abandoned[r.ID] = r
			}
			delete(b.waiting, r.ID)
		}
		b.mu.Unlock()
	}
	b.a.onCore(func(c *node.Core) {
		now := b.a.now()
		for _, r := range rs {
			b.engine.Submit(now, r, c)
		}
	})
	out := make([]coherence.Completion, len(rs))
	for i, ch := range chs {
		select {
		case out[i] = <-ch:
		case <-ctx.Done():
			forget()
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// undoable reports whether a request that succeeds after its caller gave
// up leaves something held that must be given back.
func undoable(op coherence.HostOp) bool {
	return op == coherence.HostRef || op == coherence.HostLock || op == coherence.HostAcquire
}

// undo gives back what an abandoned request took when it succeeded late.
func (b *hostBackend) undo(r coherence.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), b.a.cfg.RequestTimeout)
	defer cancel()
	var op coherence.HostOp
	switch r.Op {
	case coherence.HostRef:
		op = coherence.HostUnref
	case coherence.HostLock:
		op = coherence.HostUnlock
	case coherence.HostAcquire:
		op = coherence.HostRelease
	}
	if _, err := b.submit(ctx, coherence.Request{Op: op, GVA: r.GVA, Holder: r.Holder}); err != nil {
		b.a.log.Warn("undoing an abandoned host request", "op", r.Op, "page", r.GVA, "err", err)
	}
}

// Alloc implements hostif.Backend.
func (b *hostBackend) Alloc(ctx context.Context, pages int, attr hostif.Attr) (gva.GVA, error) {
	if pages <= 0 {
		return gva.GVA{}, syscall.EINVAL
	}
	// Refuse what can never fit before building one request per page: the
	// work and memory of a request stay bounded by the node's capacity.
	if pages > b.a.cfg.Pages {
		return gva.GVA{}, fmt.Errorf("alloc: %d pages exceed this node's capacity of %d: %w", pages, b.a.cfg.Pages, syscall.ENOMEM)
	}
	rs := make([]coherence.Request, pages)
	for i := range rs {
		rs[i].Op = coherence.HostAlloc
	}
	res, err := b.submitAll(ctx, rs)
	if err != nil {
		return gva.GVA{}, err
	}
	var failed error
	for i, c := range res {
		if c.Err != nil {
			failed = c.Err
		} else if i > 0 && c.GVA.Page() != res[0].GVA.Page()+gva.PageNumber(i) {
			failed = fmt.Errorf("alloc: pages not consecutive: %w", syscall.EAGAIN)
		}
	}
	if failed != nil {
		var frees []coherence.Request
		for _, c := range res {
			if c.Err == nil {
				frees = append(frees, coherence.Request{Op: coherence.HostFree, GVA: c.GVA.Key()})
			}
		}
		if len(frees) > 0 {
			_, _ = b.submitAll(context.WithoutCancel(ctx), frees)
		}
		return gva.GVA{}, failed
	}
	first := res[0].GVA.Key()
	b.mu.Lock()
	for _, c := range res {
		b.attrs[c.GVA.Key()] = attr
	}
	b.extents[first] = pages
	b.mu.Unlock()
	return first, nil
}

// Free implements hostif.Backend.
func (b *hostBackend) Free(ctx context.Context, first gva.GVA) error {
	b.mu.Lock()
	n, ok := b.extents[first.Key()]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("free %v: not an allocation of this node: %w", first, syscall.ENOENT)
	}
	rs := make([]coherence.Request, n)
	for i := range rs {
		rs[i] = coherence.Request{Op: coherence.HostFree, GVA: pageAt(first, i)}
	}
	res, err := b.submitAll(ctx, rs)
	if err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.extents, first.Key())
	for i := range rs {
		delete(b.attrs, pageAt(first, i))
	}
	b.mu.Unlock()
	for _, c := range res {
		if c.Err != nil {
			return c.Err
		}
	}
	return nil
}

func pageAt(first gva.GVA, i int) gva.GVA {
	return gva.New(first.Machine(), first.Page()+gva.PageNumber(i), 0, first.Flags()).Key()
}

// Stat implements hostif.Backend. Attributes are known for pages allocated
// on this node; a page allocated elsewhere is reported as owned by root
// with mode 0600, so only root reaches it until attributes travel with
// pages (deny by default).
func (b *hostBackend) Stat(ctx context.Context, page gva.GVA) (hostif.Attr, error) {
	b.mu.Lock()
	a, ok := b.attrs[page.Key()]
	b.mu.Unlock()
	if ok {
		return a, nil
	}
	if page.Machine() == b.Machine() {
		return hostif.Attr{}, fmt.Errorf("stat %v: %w", page, syscall.ENOENT)
	}
	return hostif.Attr{UID: 0, GID: 0, Mode: 0o600}, nil
}

// hold takes one engine ref of page (it builds the path to the owner).
func (b *hostBackend) hold(ctx context.Context, page gva.GVA) error {
	if _, err := b.submit(ctx, coherence.Request{Op: coherence.HostRef, GVA: page.Key()}); err != nil {
		return err
	}
	b.mu.Lock()
	b.mapped[page.Key()]++
	b.mu.Unlock()
	return nil
}

// drop gives one engine ref of page back. The engine refuses an unref
// while the page swaps (EBUSY, nothing done): another node taking the page
// right after this node's unlock is the common case, so drop retries until
// the swap ends, bounded by ctx and dropBound.
func (b *hostBackend) drop(ctx context.Context, page gva.GVA) error {
	b.mu.Lock()
	if b.mapped[page.Key()]--; b.mapped[page.Key()] <= 0 {
		delete(b.mapped, page.Key())
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, dropBound)
	defer cancel()
	for {
		_, err := b.submit(ctx, coherence.Request{Op: coherence.HostUnref, GVA: page.Key()})
		if err == nil || !errors.Is(err, syscall.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(retryPause):
		}
	}
}

// dropBound bounds drop's retries of an unref refused during a swap (a
// swap ends within the engine's swap timeout, 10ms by default).
const dropBound = time.Second

func (b *hostBackend) isMapped(page gva.GVA) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mapped[page.Key()] > 0
}

// Ref implements hostif.Backend: ref, then read the whole page.
func (b *hostBackend) Ref(ctx context.Context, page gva.GVA, dst []byte) (gva.Version, error) {
	if err := b.hold(ctx, page); err != nil {
		return 0, err
	}
	v, err := b.load(ctx, page.Key(), dst[:min(len(dst), gva.PageSize)])
	if err != nil {
		_ = b.drop(context.WithoutCancel(ctx), page)
	}
	return v, err
}

// Unref implements hostif.Backend.
func (b *hostBackend) Unref(ctx context.Context, page gva.GVA) error { return b.drop(ctx, page) }

// Load implements hostif.Backend. A page this node does not map is
// referenced for the read and released after it (a read needs a replica).
func (b *hostBackend) Load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error) {
	if b.isMapped(addr) {
		return b.load(ctx, addr, dst)
	}
	if err := b.hold(ctx, addr); err != nil {
		return 0, err
	}
	v, err := b.load(ctx, addr, dst)
	if derr := b.drop(context.WithoutCancel(ctx), addr); err == nil {
		err = derr
	}
	return v, err
}

func (b *hostBackend) load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error) {
	c, err := b.submit(ctx, coherence.Request{Op: coherence.HostLoad, GVA: addr, Len: len(dst)})
	if err != nil {
		return 0, err
	}
	copy(dst, c.Data)
	return c.Version, nil
}

// Store implements hostif.Backend.
func (b *hostBackend) Store(ctx context.Context, addr gva.GVA, src []byte) (gva.Version, error) {
	c, err := b.submit(ctx, coherence.Request{Op: coherence.HostStore, GVA: addr, Data: src})
	return c.Version, err
}

// CompareAndSwap implements hostif.Backend.
func (b *hostBackend) CompareAndSwap(ctx context.Context, addr gva.GVA, expected, desired uint64) (uint64, gva.Version, error) {
	c, err := b.submit(ctx, coherence.Request{Op: coherence.HostCAS, GVA: addr, Expected: expected, Operand: desired})
	return c.Value, c.Version, err
}

// FetchAdd implements hostif.Backend.
func (b *hostBackend) FetchAdd(ctx context.Context, addr gva.GVA, delta uint64) (uint64, gva.Version, error) {
	c, err := b.submit(ctx, coherence.Request{Op: coherence.HostFetchAdd, GVA: addr, Operand: delta})
	return c.Value, c.Version, err
}

// Acquire implements hostif.Backend: ref (the ownership protocol follows
// the cached path), then acquire, retrying a busy page until ctx ends.
func (b *hostBackend) Acquire(ctx context.Context, page gva.GVA) error {
	b.mu.Lock()
	had := b.acquired[page.Key()]
	b.acquired[page.Key()] = true // before the grant: a loss right after it is heard
	b.mu.Unlock()
	err := b.claim(ctx, coherence.HostAcquire, page)
	if err != nil && !had {
		b.mu.Lock()
		delete(b.acquired, page.Key())
		b.mu.Unlock()
	}
	return err
}

// Release implements hostif.Backend.
func (b *hostBackend) Release(ctx context.Context, page gva.GVA) error {
	b.mu.Lock()
	delete(b.acquired, page.Key())
	b.mu.Unlock()
	return b.unclaim(ctx, coherence.HostRelease, page)
}

// Lock implements hostif.Backend: acquire + pin.
func (b *hostBackend) Lock(ctx context.Context, page gva.GVA) error {
	return b.claim(ctx, coherence.HostLock, page)
}

// Unlock implements hostif.Backend.
func (b *hostBackend) Unlock(ctx context.Context, page gva.GVA) error {
	return b.unclaim(ctx, coherence.HostUnlock, page)
}

func (b *hostBackend) claim(ctx context.Context, op coherence.HostOp, page gva.GVA) error {
	// The ref that builds the path is retried like the claim itself: while
	// the page moves between other nodes it may miss the engine's request
	// bound, well within the caller's.
	if err := b.retry(ctx, func() error { return b.hold(ctx, page) }); err != nil {
		return err
	}
	err := b.retryBusy(ctx, coherence.Request{Op: op, GVA: page.Key(), Holder: holderID})
	if err != nil {
		_ = b.drop(context.WithoutCancel(ctx), page)
	}
	return err
}

func (b *hostBackend) unclaim(ctx context.Context, op coherence.HostOp, page gva.GVA) error {
	_, err := b.submit(ctx, coherence.Request{Op: op, GVA: page.Key(), Holder: holderID})
	if err != nil {
		return err
	}
	return b.drop(ctx, page)
}

// retryBusy submits r until it succeeds, fails for a reason other than a
// busy page, or ctx ends (the caller's bound).
func (b *hostBackend) retryBusy(ctx context.Context, r coherence.Request) error {
	return b.retry(ctx, func() error { _, err := b.submit(ctx, r); return err })
}

// retry runs try until it succeeds, fails for a reason other than a busy
// page or a missed engine bound, or ctx ends.
func (b *hostBackend) retry(ctx context.Context, try func() error) error {
	for {
		err := try()
		if err == nil || !(errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ETIMEDOUT)) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(retryPause):
		}
	}
}

// Where implements hostif.Backend.
func (b *hostBackend) Where(ctx context.Context, addr gva.GVA) (hostif.Location, error) {
	c, err := b.submit(ctx, coherence.Request{Op: coherence.HostWhere, GVA: addr})
	if err != nil {
		return hostif.Location{}, err
	}
	return hostif.Location{Tier: c.Where.Tier, Speed: c.Where.Speed, Hops: uint16(c.Where.Hops),
		Owner: gva.MachineIndex(c.Where.Owner), Version: c.Version}, nil
}

var (
	_ hostif.Backend  = (*hostBackend)(nil)
	_ hostif.Pipeline = (*hostBackend)(nil)
)

// Attach implements hostif.Pipeline.
func (b *hostBackend) Attach(complete func([]hostif.Done)) { b.complete = complete }

// Accepts implements hostif.Pipeline: stores, atomics and where always; a
// load when this node holds the page (otherwise Load refs it first).
func (b *hostBackend) Accepts(op *hostif.Op) bool {
	switch op.Kind {
	case wire.OpStore, wire.OpCAS, wire.OpFetchAdd, wire.OpWhere:
		return true
	case wire.OpLoad:
		return b.isMapped(op.GVA)
	}
	return false
}

// Submit implements hostif.Pipeline: ops become engine requests of one
// core step; their completions are taken at the end of whichever step
// produces them (takeDone) and delivered after it.
func (b *hostBackend) Submit(ops []hostif.Op) {
	var reqs [16]coherence.Request
	rs := reqs[:0]
	b.mu.Lock()
	for i := range ops {
		op := &ops[i]
		b.nextID++
		b.async[b.nextID] = op.Token
		r := coherence.Request{ID: b.nextID, GVA: op.GVA}
		switch op.Kind {
		case wire.OpLoad:
			r.Op, r.Len = coherence.HostLoad, op.Len
		case wire.OpStore:
			r.Op, r.Data = coherence.HostStore, op.Data
		case wire.OpCAS:
			r.Op, r.Expected, r.Operand = coherence.HostCAS, op.Expected, op.Operand
		case wire.OpFetchAdd:
			r.Op, r.Operand = coherence.HostFetchAdd, op.Operand
		case wire.OpWhere:
			r.Op = coherence.HostWhere
		}
		rs = append(rs, r)
	}
	b.mu.Unlock()
	b.a.onCore(func(c *node.Core) {
		now := b.a.now()
		for i := range rs {
			b.engine.Submit(now, rs[i], c)
		}
	})
}

// takeDone returns the pipelined completions of the step that ends (called
// under the agent's mu).
func (b *hostBackend) takeDone() []hostif.Done {
	if len(b.done) == 0 {
		return nil
	}
	d := b.done
	b.done = nil
	return d
}

// deliver hands completions to the host socket (outside the agent's locks).
func (b *hostBackend) deliver(ds []hostif.Done) {
	if b.complete != nil {
		b.complete(ds)
	}
}

func doneOf(token uint64, c *coherence.Completion) hostif.Done {
	d := hostif.Done{Token: token, Err: c.Err, Version: c.Version, Value: c.Value}
	if c.Data != nil {
		d.Data = append([]byte(nil), c.Data...)
	}
	if c.Op == coherence.HostWhere {
		d.Where = hostif.Location{Tier: c.Where.Tier, Speed: c.Where.Speed, Hops: uint16(c.Where.Hops),
			Owner: gva.MachineIndex(c.Where.Owner), Version: c.Version}
	}
	return d
}
