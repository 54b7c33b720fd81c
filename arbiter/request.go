package arbiter

import (
	"cmp"
	"fmt"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Kind is what a request asks the owner to order.
type Kind uint8

// Request kinds.
const (
	// KindAcquire asks for ownership of the page (ownership protocol).
	KindAcquire Kind = iota + 1
	// KindWrite is a write-through from a replica (path-cache protocol).
	KindWrite
	// KindAtomic is an atomic (CAS, fetch-add, ...) executed at the owner.
	KindAtomic
)

var kindNames = [...]string{"", "acquire", "write", "atomic"}

func (k Kind) String() string {
	if k >= KindAcquire && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request is one request to the owner's arbiter.
type Request struct {
	// ID is the requester's request id, echoed in the answer.
	ID uint64
	// Page is the page's path cache key (gva.GVA.Key()).
	Page gva.GVA
	Kind Kind
	// Priority: higher wins among requests of the same arrival tick.
	Priority uint8
	// Port is the arrival port (noc.LocalPort: this node's own host).
	Port noc.PortID
	// Node is the requesting node.
	Node noc.NodeID
	// Losses is how many times the requester has already lost arbitration
	// for this page (it counts its own denials and timeouts).
	Losses uint16
	// WaitStart is when the requester first asked for this page, on the
	// cluster clock; earlier means it has waited longer.
	WaitStart time.Duration
	// Arrival is set by Submit: when the request reached the arbiter.
	Arrival time.Duration
}

// Outcome is the arbiter's answer to a request.
type Outcome uint8

// Outcomes. Grant, Deny and Exception are final; Queued is the immediate
// answer to a request that waits, and is always followed by exactly one
// final answer no later than Answer.Deadline.
const (
	OutcomeGrant Outcome = iota + 1
	OutcomeQueued
	OutcomeDeny
	OutcomeException
)

var outcomeNames = [...]string{"", "grant", "queued", "deny", "exception"}

func (o Outcome) String() string {
	if o >= OutcomeGrant && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Reason explains a Deny or an Exception (ReasonNone for Grant and Queued).
type Reason uint8

// Reasons. Deny reasons mean "retry" (possibly elsewhere); exception reasons
// mean something went wrong that the requester must handle.
const (
	ReasonNone Reason = iota
	// ReasonPinned: the page is pinned (locked) and the wait queue is full.
	ReasonPinned
	// ReasonSwapping: an ownership transfer is under way and the queue is full.
	ReasonSwapping
	// ReasonBusy: the arbiter cannot take more requests this tick.
	ReasonBusy
	// ReasonNoSuchPage: the page does not exist (used by the engine; the
	// arbiter itself only knows pages it owns).
	ReasonNoSuchPage
	// ReasonNotOwner: this node does not own the page.
	ReasonNotOwner
	// ReasonMoved: ownership moved to another node while the request
	// waited; retry toward the new owner (the path now leads there).
	ReasonMoved
	// ReasonTimeout: the request waited its full bound; retry.
	ReasonTimeout
	// ReasonHostFault (exception): the pin holder's host did not release in
	// time; the pin was revoked and the page's contents may be mid-update.
	ReasonHostFault
	// ReasonBadRequest (exception): the request is malformed.
	ReasonBadRequest
)

var reasonNames = [...]string{"none", "pinned", "swapping", "busy", "no-such-page", "not-owner", "moved", "timeout", "host-fault", "bad-request"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Answer is the arbiter's answer to one request.
type Answer struct {
	Request Request
	Outcome Outcome
	Reason  Reason
	// At is when the decision was taken (the close of the arrival tick, a
	// timer's fire time, or the now of the call that decided it).
	At time.Duration
	// Deadline, for OutcomeQueued: the final answer comes no later.
	Deadline time.Duration
}

// Final reports whether the answer ends the request.
func (a Answer) Final() bool { return a.Outcome != OutcomeQueued }

func (a Answer) String() string {
	s := fmt.Sprintf("%v %v id=%d node=%v port=%d at=%v: %v", a.Request.Kind, a.Request.Page, a.Request.ID, a.Request.Node, a.Request.Port, a.At, a.Outcome)
	if a.Reason != ReasonNone {
		s += " (" + a.Reason.String() + ")"
	}
	return s
}

// compareSameTick is the total order among requests that arrived in the same
// tick: higher priority first; then more losses; then earlier WaitStart
// (longer wait); then lower port id; then lower node id; then lower request
// id; then submission order.
func compareSameTick(a, b *pendingRequest) int {
	if c := cmp.Compare(b.req.Priority, a.req.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.req.Losses, a.req.Losses); c != 0 {
		return c
	}
	if c := cmp.Compare(a.req.WaitStart, b.req.WaitStart); c != 0 {
		return c
	}
	if c := cmp.Compare(a.req.Port, b.req.Port); c != 0 {
		return c
	}
	if c := cmp.Compare(a.req.Node, b.req.Node); c != 0 {
		return c
	}
	if c := cmp.Compare(a.req.ID, b.req.ID); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

type pendingRequest struct {
	req  Request
	tick int64
	seq  uint64
}
