package hostif

import (
	"context"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Backend is the node's core as the host interface sees it: one verb, Do,
// that takes a request and returns with its completion (Call), plus the
// core's event stream. Every Call names the host session it is made in
// (Call.Session): the server opens one session per connection (VerbOpen
// once HELLO is answered, VerbClose when the connection ends) and one for
// its own calls. The node's Backend (package host) hands every Call to
// that session of the core (coherence.Hosts) as it is.
// Requests of the core may also go through the optional Pipeline
// extension, as the core's own values without a goroutine per request.
//
// Contract (what an implementation must guarantee):
//
//   - Do returns once ctx is done, with ctx.Err() (wrapped) or a result.
//     The server gives every call a deadline.
//   - Failures the host should see are syscall.Errno values (wrapped with %w
//     is fine): ENOENT no such page, EBUSY, ETIMEDOUT, ENOMEM / ENOSPC
//     capacity, EFAULT an address beyond its allocation, ... Any other
//     error reaches the host as EIO.
//   - Page arguments are page keys ([gva.GVA.Key]); address arguments keep
//     their byte offset. 64-bit values in pages are little-endian.
//   - Sessions: what a session holds is the backend's to count, per
//     session: refs (VerbRef any number of times, VerbUnref as many;
//     one session's unref never drops another's), acquisitions (VerbRelease
//     of a page the session has not acquired fails with EPERM), locks. The
//     server aggregates nothing: it hands each connection's calls to its
//     session as they come. VerbClose gives back everything the session
//     holds (locks, acquisitions, refs) and abandons its calls still in
//     flight (they complete no more: pipelined ones included), whatever
//     its other sessions hold. A call of a session that is not open fails
//     with EBADF.
//   - Locks between the node's sessions are the backend's: one session
//     holds a page's lock at a time. VerbLock of a page another session
//     holds waits, in arrival order, until that session unlocks, closes
//     or has its pin revoked, or until the call's deadline (ETIMEDOUT);
//     with Try it fails with EBUSY at once. VerbLock by the session that
//     holds the lock fails with EDEADLK, VerbUnlock by any other with
//     EPERM. A release or an unlock of a page the node no longer owns or
//     pins fails without effect.
//   - Read-your-writes per node: a load or a ref never returns a version
//     older than one that this node's store, compare-and-swap or fetch-add
//     already returned (the host's consistency guarantee rests on it).
//   - Events: EventHostFault and EventOwnershipLost name the session they
//     concern (Event.Session: the one whose pin was revoked; one event per
//     session that acquired the page); the others concern the node.
//     Every new version of a page this node refs is reported, as
//     EventUpdate (with the written bytes) or EventInvalidate, in increasing
//     version order per page. Versions written through this node's own
//     writes may be reported or not (the server already applied them).
//     Events never block the engine: when the channel is full the backend
//     drops them and later sends EventOverflow.
type Backend interface {
	// Machine is this node's machine index.
	Machine() gva.MachineIndex
	// Do runs c (its Verb and arguments) and fills in its results.
	Do(ctx context.Context, c *Call) error
	// Events is the backend's event stream; it is closed when the backend
	// stops.
	Events() <-chan Event
}

// Verb is what a Call asks of the core.
type Verb uint8

// Verbs, with what each reads from the Call and what it fills in.
const (
	// VerbAlloc creates Pages zero-filled pages owned by this node with
	// Attr; GVA is set to the first, the others follow it at consecutive
	// page numbers.
	VerbAlloc Verb = iota + 1
	// VerbFree deletes the allocation that starts at page GVA.
	VerbFree
	// VerbStat sets Attr to the attributes page GVA was given at its
	// allocation.
	VerbStat
	// VerbRef makes this node a holder of a replica of page GVA (a branch
	// of its tree), copies the content into Data (one page) and sets
	// Version.
	VerbRef
	// VerbUnref drops this node's replica of page GVA.
	VerbUnref
	// VerbLoad reads len(Data) bytes at GVA (within one page) into Data
	// and sets the Version they were read at.
	VerbLoad
	// VerbStore writes Data at GVA (within one page) through the owner and
	// sets the Version that write created.
	VerbStore
	// VerbCAS replaces the 64-bit word at GVA (8-byte aligned) by Operand
	// if it equals Expected, at the owner; Value is the word it found,
	// Version the page version after the operation.
	VerbCAS
	// VerbFetchAdd adds Operand to the 64-bit word at GVA at the owner;
	// Value is the word it found, Version the new page version.
	VerbFetchAdd
	// VerbAcquire makes this node the owner of page GVA (ownership
	// protocol).
	VerbAcquire
	// VerbRelease tells the core this node no longer needs to own page GVA.
	VerbRelease
	// VerbLock makes this node the owner of page GVA and raises its pin.
	VerbLock
	// VerbUnlock lowers the pin raised by VerbLock.
	VerbUnlock
	// VerbWhere sets Where to where the page of GVA lives as seen from
	// this node.
	VerbWhere
	// VerbOpen opens Session (a fresh one: an open one is an error).
	VerbOpen
	// VerbClose closes Session: everything it holds is given back and its
	// calls in flight are abandoned. It returns once the backend has
	// started the give-back (it completes within the backend's bounds).
	VerbClose
)

var verbNames = [...]string{"", "alloc", "free", "stat", "ref", "unref", "load", "store", "cas", "fetch-add",
	"acquire", "release", "lock", "unlock", "where", "open", "close"}

func (v Verb) String() string {
	if int(v) < len(verbNames) && v != 0 {
		return verbNames[v]
	}
	return "verb(?)"
}

// Call is one request to the Backend and, once Do has returned, its
// completion. Which fields a verb reads and fills is said at the verb.
type Call struct {
	Verb Verb
	// Session is the host session the call is made in (every verb).
	Session Session
	// Try makes VerbLock of a page another session of this node holds fail
	// with EBUSY at once instead of waiting.
	Try bool

	GVA   gva.GVA // the page key or the address; VerbAlloc: set to the first page
	Pages int     // VerbAlloc
	Attr  Attr    // VerbAlloc: given; VerbStat: filled
	// Data is VerbStore's bytes, and the buffer VerbLoad and VerbRef fill
	// (their length is what they read).
	Data              []byte
	Expected, Operand uint64 // VerbCAS: expected, desired; VerbFetchAdd: Operand is the delta

	// Cred is the user the call is made for (every verb that reads or
	// writes a page; zero: the node's own call, as root).
	Cred Cred

	Version gva.Version // VerbRef, VerbLoad, VerbStore, VerbCAS, VerbFetchAdd
	Value   uint64      // VerbCAS, VerbFetchAdd: the word found
	Where   Location    // VerbWhere
}

// Session names a host session of the node: the server opens one per
// connection (its connection id) and ServerSession for its own calls.
type Session uint64

// ServerSession is the session of the server's own calls (attributes of
// pages, refetches of stale replica files).
const ServerSession Session = 0

// Cred is the user a call is made for: the connection's peer
// credentials, with the page's group first among the supplementary groups
// when the user is in it (the nodes beyond see a bounded number of them).
// The server sets it in every Call and pipelined request that reads or writes
// a page; the backend passes it on to the nodes that serve the request,
// which check it against the page's attributes as the server did.
type Cred = gva.Cred

// Attr is the owner and permission of a page, fixed at Alloc.
type Attr = gva.Attr

// Location is where a page lives: tier, speed tier, hops to its owner, the
// owner's machine index and the owner's current version.
type Location = wire.Location

// EventKind says what happened to a page.
type EventKind uint8

// Backend event kinds.
const (
	// EventUpdate: a new version, with the bytes written (write-update).
	EventUpdate EventKind = iota + 1
	// EventInvalidate: a new version without its bytes (write-invalidate).
	EventInvalidate
	// EventHostFault: the pin raised by Lock was revoked (the hardware
	// timer expired); Reason says why.
	EventHostFault
	// EventOwnershipLost: this node is no longer the owner of the page.
	EventOwnershipLost
	// EventFreed: the page was freed.
	EventFreed
	// EventOverflow: events were dropped; every replica may be stale.
	EventOverflow
)

// Event is something the engine reports about a page.
type Event struct {
	Kind EventKind
	// Session is the session the event concerns (EventHostFault,
	// EventOwnershipLost); the other kinds concern the node.
	Session Session
	Page    gva.GVA // page key
	Version gva.Version
	Offset  int    // EventUpdate: where Data was written in the page
	Data    []byte // EventUpdate: the written bytes; the receiver owns them
	Reason  syscall.Errno
	// Lost (EventInvalidate): the node's replica left the page's tree (its
	// path to the owner was cut, it was evicted or fenced): later versions
	// will not reach it, so a copy is stale even at the version it holds.
	Lost bool
}

// ClusterClock is a Backend that reads the fabric's cluster clock (CLOCK,
// answered on the connection's reading goroutine: it must not wait beyond
// a step of the core). A Backend without it answers CLOCK with ENOSYS.
type ClusterClock interface {
	ClusterTime() wire.ClusterTime
}
