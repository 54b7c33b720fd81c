package hostif

import (
	"context"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Backend is the node's core as the host interface sees it. Requests of
// the core (alloc, free, the data path, acquire, release, lock, unlock,
// where) go through its Pipeline as the core's own values, with no
// goroutine per request; the few calls that wait on a goroutine of their
// own (a session's open and close, a replica file's ref and unref) go
// through Do, which takes a Call and returns with its completion; and the
// core's event stream comes through Events. Every Call and every
// submitted request names the host session it is made in: the server
// opens one session per connection (VerbOpen once HELLO is answered,
// VerbClose when the connection ends) and one for its own calls. The
// node's Backend (package host) hands them to that session of the core
// (coherence.Hosts) as they are.
//
// Contract (what an implementation must guarantee):
//
//   - Do returns once ctx is done, with ctx.Err() (wrapped) or a result.
//     The server gives every call a deadline; a submitted request has its
//     own bound (Pipeline).
//   - Failures the host should see are syscall.Errno values (wrapped with %w
//     is fine): ENOENT no such page, EBUSY, ETIMEDOUT, ENOMEM / ENOSPC
//     capacity, EFAULT an address beyond its allocation, ... Any other
//     error reaches the host as EIO.
//   - Page arguments are page keys ([gva.GVA.Key]); address arguments keep
//     their byte offset. 64-bit values in pages are little-endian.
//   - Sessions: what a session holds is the backend's to count, per
//     session: refs (VerbRef any number of times, VerbUnref as many;
//     one session's unref never drops another's), acquisitions (a release
//     of a page the session has not acquired fails with EPERM), locks. The
//     server aggregates nothing: it hands each connection's calls to its
//     session as they come. VerbClose gives back everything the session
//     holds (locks, acquisitions, refs) and abandons its requests still in
//     flight (they complete no more), whatever its other sessions hold. A
//     call of a session that is not open fails with EBADF.
//   - Locks between the node's sessions are the backend's: one session
//     holds a page's lock at a time. A lock of a page another session
//     holds waits, in arrival order, until that session unlocks, closes
//     or has its pin revoked, or until the request's bound (ETIMEDOUT);
//     with Try it fails with EBUSY at once. A lock by the session that
//     holds it fails with EDEADLK, an unlock by any other with EPERM. A
//     release or an unlock of a page the node no longer owns or pins
//     fails without effect.
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
	Pipeline
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
	// VerbOpen opens Session (a fresh one: an open one is an error).
	VerbOpen Verb = iota + 1
	// VerbClose closes Session: everything it holds is given back and its
	// requests in flight are abandoned. It returns once the backend has
	// started the give-back (it completes within the backend's bounds).
	VerbClose
	// VerbRef makes this node a holder of a replica of page GVA (a branch
	// of its tree), copies the content into Data (one page) and sets
	// Version.
	VerbRef
	// VerbUnref drops this node's replica of page GVA.
	VerbUnref
)

var verbNames = [...]string{"", "open", "close", "ref", "unref"}

func (v Verb) String() string {
	if int(v) < len(verbNames) && v != 0 {
		return verbNames[v]
	}
	return "verb(?)"
}

// Call is one call of Do and, once Do has returned, its completion.
type Call struct {
	Verb Verb
	// Session is the host session the call is made in (every verb).
	Session Session
	GVA     gva.GVA // VerbRef, VerbUnref: the page key
	// Data is the buffer VerbRef fills (one page, or nil: the content is
	// not wanted).
	Data []byte
	// Cred is the user the call is made for (VerbRef, VerbUnref; zero: the
	// node's own call, as root).
	Cred    Cred
	Version gva.Version // VerbRef
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
