package host

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/internal/quota"
	"github.com/aitherion/dpu/node"
)

// Stepper runs steps of a node's core for its Backend: the agent's run
// loop, or a test fabric's driver.
type Stepper interface {
	// Step runs fn as one step of the core at the stepper's now, then
	// sends the step's output and hands the completions the step produced
	// (Backend.TakeDone, under the stepper's locks) to Backend.Deliver
	// (outside them). fn must not block.
	Step(fn func(c *node.Core, now time.Duration))
}

// Config shapes a Backend.
type Config struct {
	// Machine is this node's machine index.
	Machine gva.MachineIndex
	// Ledger, if set, is the node's page ledger: the replicas a host
	// session maps of pages homed elsewhere are charged to the mapping
	// user there (see charge.go).
	Ledger func() *quota.Ledger
	// Await, if set, is the Stepper's way of stepping the core for a
	// socket reader's answers while pending reports true, within its own
	// bound (hostif.Awaiter).
	Await func(pending func() bool)
	// Fault, if set, is told of every pin the core revoked. It runs inside
	// a core step: it must neither block nor step the core.
	Fault func(coherence.Event)
}

// Backend is the host socket's view of the node's core: every host
// connection is a session of the core (coherence.Hosts: opened at HELLO,
// closed when the connection ends, the server's own calls in one more),
// every host request becomes one request of its connection's session and
// its completion comes back as a value. Everything a session holds (refs,
// acquisitions, locks), the node's lock of a page between its sessions
// (who holds it, who waits, in order, within their bounds), retries and
// the undo of requests whose caller gave up live in the core, on the
// core's clock; what is left here is "request id → completion" and the
// replicas' charge to their users' page quota.
//
// Host requests go through hostif.Pipeline as values: submitted in
// batches, completed after whichever step finishes them, bounded by their
// Timeout in the core; a connection that closes abandons its requests
// with its session. The Pipeline accepts every verb; what the host socket
// still sends through Do (the refs and unrefs of MAP and UNMAP, a replica
// file's refetch, see hostif's doc) waits on a channel of its own for its
// completion or its caller's context; a caller that gives up abandons its
// request in the core, which undoes it if it succeeds later.
type Backend struct {
	cfg     Config
	step    Stepper
	hosts   *coherence.Hosts
	charges *replicaCharges // the sessions' replicas against their users' page quotas (nil: none)

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan coherence.Completion // blocking verbs

	// done collects pipelined completions during a step; it is taken at
	// the step's end (under the Stepper's locks, which every step holds).
	done     []coherence.Completion
	doneFree [][]coherence.Completion // delivered slices, for the next steps (under mu)
	complete func([]coherence.Completion)

	events   chan hostif.Event
	overflow bool // an event was dropped; EventOverflow is owed (under mu)

	batches sync.Pool // *submitBatch
}

// pipelined marks the ids of pipelined requests: the rest of the id is the
// server's token (the server counts its tokens from 1, far below the
// mark), so a completion finds its token without a table. The blocking
// verbs number their requests from 1 too, without the mark.
const pipelined = 1 << 63

// New returns a Backend; Bind gives it its core.
func New(cfg Config) *Backend {
	b := &Backend{cfg: cfg, waiting: map[uint64]chan coherence.Completion{},
		events: make(chan hostif.Event, 1024)}
	if cfg.Ledger != nil {
		b.charges = newReplicaCharges(cfg.Machine, cfg.Ledger)
	}
	return b
}

// Bind gives the Backend the node's host sessions (made with the Backend
// as their coherence.Sink) and the Stepper that runs them; it must be
// called once, before the Backend serves.
func (b *Backend) Bind(h *coherence.Hosts, s Stepper) { b.hosts, b.step = h, s }

// Hosts is the node's host session layer.
func (b *Backend) Hosts() *coherence.Hosts { return b.hosts }

// Complete implements coherence.Sink (inside a core step).
func (b *Backend) Complete(c coherence.Completion) {
	if c.ID&pipelined != 0 {
		c.ID &^= pipelined
		if c.Data != nil {
			c.Data = append([]byte(nil), c.Data...) // it outlives the step
		}
		b.done = append(b.done, c)
		return
	}
	b.mu.Lock()
	ch := b.waiting[c.ID]
	delete(b.waiting, c.ID)
	b.mu.Unlock()
	if ch == nil {
		return // the caller gave up (and the core was told)
	}
	if c.Data != nil {
		c.Data = append([]byte(nil), c.Data...)
	}
	ch <- c // buffered, one completion per request
}

// Event implements coherence.Sink (inside a core step): core events become
// host events, dropped with a later EventOverflow when the host interface
// falls behind.
func (b *Backend) Event(ev coherence.Event) {
	he := hostif.Event{Page: ev.GVA.Key(), Version: ev.Version, Session: hostif.Session(ev.Session)}
	switch ev.Kind {
	case coherence.EventInvalidated:
		he.Kind, he.Lost = hostif.EventInvalidate, ev.Lost
	case coherence.EventUpdated:
		he.Kind, he.Offset, he.Data = hostif.EventUpdate, ev.Offset, append([]byte(nil), ev.Data...)
	case coherence.EventHostFault:
		he.Kind, he.Reason = hostif.EventHostFault, syscall.ETIMEDOUT
		if b.cfg.Fault != nil {
			b.cfg.Fault(ev)
		}
	case coherence.EventOwnershipLost:
		he.Kind = hostif.EventOwnershipLost // the core reports only acquired pages, once per acquiring session
	default:
		return
	}
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
func (b *Backend) Events() <-chan hostif.Event { return b.events }

// Machine implements hostif.Backend.
func (b *Backend) Machine() gva.MachineIndex { return b.cfg.Machine }

// Call runs one host request of session sess in the core and waits for
// its completion or ctx; a request whose caller gives up is abandoned in
// the core. It is the blocking way in, for the calls that wait on a
// goroutine of their own (Do) and for programs that drive a node without
// a host server; the server's requests of the core go through Submit.
func (b *Backend) Call(ctx context.Context, sess coherence.SessionID, r coherence.Request) (coherence.Completion, error) {
	if dl, ok := ctx.Deadline(); ok && r.Timeout == 0 {
		r.Timeout = max(time.Until(dl), time.Millisecond)
	}
	ch := make(chan coherence.Completion, 1)
	b.mu.Lock()
	b.nextID++
	r.ID = b.nextID
	b.waiting[r.ID] = ch
	b.mu.Unlock()
	b.step.Step(func(c *node.Core, now time.Duration) { b.hosts.Submit(now, sess, r, c) })
	select {
	case cp := <-ch:
		return cp, cp.Err
	case <-ctx.Done():
		b.mu.Lock()
		_, pending := b.waiting[r.ID]
		delete(b.waiting, r.ID)
		b.mu.Unlock()
		if pending {
			b.step.Step(func(c *node.Core, now time.Duration) { b.hosts.Abandon(now, sess, r.ID, c) })
		} else if cp := <-ch; cp.Err == nil {
			return cp, nil // it completed as the caller gave up: take it
		}
		return coherence.Completion{}, ctx.Err()
	}
}

// Do implements hostif.Backend: VerbOpen and VerbClose open and close the
// call's session in the core; VerbRef and VerbUnref become one request of
// its session (HostRef, HostUnref), and the ref's completion fills the
// call in. The replica a session maps of a page homed elsewhere counts
// against its user's page quota from its first ref to its last unref.
func (b *Backend) Do(ctx context.Context, call *hostif.Call) error {
	sess := coherence.SessionID(call.Session)
	var op coherence.HostOp
	switch call.Verb {
	case hostif.VerbOpen:
		var err error
		b.step.Step(func(*node.Core, time.Duration) { err = b.hosts.Open(sess) })
		if err != nil {
			return fmt.Errorf("%w: %w", err, syscall.EEXIST)
		}
		return nil
	case hostif.VerbClose:
		b.step.Step(func(c *node.Core, now time.Duration) { b.hosts.Close(now, sess, c) })
		if b.charges != nil {
			b.charges.dropSession(sess)
		}
		return nil
	case hostif.VerbRef:
		op = coherence.HostRef
	case hostif.VerbUnref:
		op = coherence.HostUnref
	default:
		return syscall.EINVAL
	}
	charged := b.charges != nil && call.Session != hostif.ServerSession
	if charged && op == coherence.HostRef {
		// a replica counts against its mapping user's page quota
		if err := b.charges.take(sess, call.Cred.UID, call.GVA.Key()); err != nil {
			return err
		}
	}
	c, err := b.Call(ctx, sess, coherence.Request{Op: op, GVA: call.GVA, Cred: call.Cred})
	switch {
	case charged && op == coherence.HostRef && err != nil, charged && op == coherence.HostUnref && err == nil:
		b.charges.drop(sess, call.GVA.Key())
	}
	if op == coherence.HostRef {
		copy(call.Data, c.Data)
	}
	call.Version = c.Version
	return err
}

var (
	_ hostif.Backend  = (*Backend)(nil)
	_ hostif.Pipeline = (*Backend)(nil)
	_ hostif.Awaiter  = (*Backend)(nil)
)

// Await implements hostif.Awaiter with Config.Await (nothing without it).
func (b *Backend) Await(pending func() bool) {
	if b.cfg.Await != nil {
		b.cfg.Await(pending)
	}
}

// Attach implements hostif.Pipeline.
func (b *Backend) Attach(complete func([]coherence.Completion)) { b.complete = complete }

// Submit implements hostif.Pipeline: the requests of session s, in one
// core step, as they are (their IDs marked pipelined); their completions
// are taken at the end of whichever step produces them (TakeDone) and
// delivered after it. The batch and the step's function come from a
// pool: a Stepper is an interface, so what is handed to it escapes, and a
// batch made per call would cost the data path an allocation per request.
func (b *Backend) Submit(s hostif.Session, rs []coherence.Request) {
	sb, _ := b.batches.Get().(*submitBatch)
	if sb == nil {
		sb = &submitBatch{b: b}
		sb.run = sb.submit
	}
	sb.s, sb.rs = coherence.SessionID(s), rs
	b.step.Step(sb.run)
	sb.rs = nil
	b.batches.Put(sb)
}

// submitBatch is one Submit's requests and the step that submits them.
type submitBatch struct {
	b   *Backend
	s   coherence.SessionID
	rs  []coherence.Request
	run func(c *node.Core, now time.Duration) // sb.submit, made once
}

func (sb *submitBatch) submit(c *node.Core, now time.Duration) {
	for i := range sb.rs {
		r := sb.rs[i]
		r.ID |= pipelined
		sb.b.hosts.Submit(now, sb.s, r, c)
	}
}

// TakeDone returns the pipelined completions of the step that ends (the
// Stepper calls it under its locks, at the end of every step).
func (b *Backend) TakeDone() []coherence.Completion {
	if len(b.done) == 0 {
		return nil
	}
	d := b.done
	b.mu.Lock()
	if n := len(b.doneFree); n > 0 {
		b.done, b.doneFree = b.doneFree[n-1], b.doneFree[:n-1]
	} else {
		b.done = nil
	}
	b.mu.Unlock()
	return d
}

// Deliver hands completions to the host socket (the Stepper calls it
// outside its locks), then keeps their slice for a later step.
func (b *Backend) Deliver(ds []coherence.Completion) {
	if len(ds) == 0 {
		return
	}
	if b.complete != nil {
		b.complete(ds)
	}
	clear(ds)
	b.mu.Lock()
	if len(b.doneFree) < 8 {
		b.doneFree = append(b.doneFree, ds[:0])
	}
	b.mu.Unlock()
}
