package hostif

import (
	"context"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Backend is the coherence engine as the host interface sees it: the verbs
// of one node's host-facing API. The agent adapts the engine to it; package
// hostiftest has an in-memory twin.
//
// Contract (what an implementation must guarantee):
//
//   - Every method returns once ctx is done, with ctx.Err() (wrapped) or a
//     result. The server gives every call a deadline.
//   - Failures the host should see are syscall.Errno values (wrapped with %w
//     is fine): ENOENT no such page, EBUSY, ETIMEDOUT, ENOMEM / ENOSPC
//     capacity, EFAULT an address beyond its allocation, ... Any other
//     error reaches the host as EIO.
//   - Page arguments are page keys ([gva.GVA.Key]); address arguments keep
//     their byte offset. 64-bit values in pages are little-endian.
//   - The server aggregates the node's users: per page it calls Ref and
//     Unref strictly alternately (one node-level ref), Lock and Unlock
//     strictly alternately (one local holder at a time), Acquire any number
//     of times and Release when the last local acquirer releases. Release and
//     Unlock of a page the node no longer owns or pins fail without effect.
//   - Read-your-writes per node: Load and Ref never return a version older
//     than one that this node's Store/CompareAndSwap/FetchAdd already
//     returned (the host's consistency guarantee rests on it).
//   - Events: every new version of a page this node refs is reported, as
//     EventUpdate (with the written bytes) or EventInvalidate, in increasing
//     version order per page. Versions written through this node's own
//     Store/CompareAndSwap/FetchAdd may be reported or not (the server
//     already applied them). Events never block the engine: when the
//     channel is full the backend drops them and later sends EventOverflow.
type Backend interface {
	// Machine is this node's machine index.
	Machine() gva.MachineIndex
	// Alloc creates pages zero-filled pages owned by this node with the
	// given attributes and returns the first; the others follow it at
	// consecutive page numbers.
	Alloc(ctx context.Context, pages int, attr Attr) (gva.GVA, error)
	// Free deletes the allocation that starts at page first.
	Free(ctx context.Context, first gva.GVA) error
	// Stat returns the attributes given to page at Alloc.
	Stat(ctx context.Context, page gva.GVA) (Attr, error)
	// Ref makes this node a holder of a replica of page (a branch of its
	// tree), fills dst (one page) with the content and returns its version.
	Ref(ctx context.Context, page gva.GVA, dst []byte) (gva.Version, error)
	// Unref drops this node's replica of page.
	Unref(ctx context.Context, page gva.GVA) error
	// Load reads len(dst) bytes at addr (within one page) and returns the
	// version they were read at.
	Load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error)
	// Store writes src at addr (within one page) through the owner and
	// returns the page version that write created.
	Store(ctx context.Context, addr gva.GVA, src []byte) (gva.Version, error)
	// CompareAndSwap replaces the 64-bit word at addr (8-byte aligned) by
	// desired if it equals expected, at the owner, and returns the word it
	// found and the page version after the operation.
	CompareAndSwap(ctx context.Context, addr gva.GVA, expected, desired uint64) (old uint64, v gva.Version, err error)
	// FetchAdd adds delta to the 64-bit word at addr at the owner and
	// returns the word it found and the new page version.
	FetchAdd(ctx context.Context, addr gva.GVA, delta uint64) (old uint64, v gva.Version, err error)
	// Acquire makes this node the owner of page (ownership protocol).
	Acquire(ctx context.Context, page gva.GVA) error
	// Release tells the engine this node no longer needs to own page.
	Release(ctx context.Context, page gva.GVA) error
	// Lock makes this node the owner of page and raises its pin.
	Lock(ctx context.Context, page gva.GVA) error
	// Unlock lowers the pin raised by Lock.
	Unlock(ctx context.Context, page gva.GVA) error
	// Where says where the page of addr lives as seen from this node.
	Where(ctx context.Context, addr gva.GVA) (Location, error)
	// Events is the backend's event stream; it is closed when the backend
	// stops.
	Events() <-chan Event
}

// Cred is the user a Backend call is made for: the connection's peer
// credentials, with the page's group first among the supplementary groups
// when the user is in it (the nodes beyond see a bounded number of them).
// The server puts it in the context of every call that reads or writes a
// page (WithCred) and in every pipelined Op; the backend passes it on to
// the nodes that serve the request, which check it against the page's
// attributes as the server did.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

type credKey struct{}

// WithCred returns ctx carrying cred.
func WithCred(ctx context.Context, cred Cred) context.Context {
	return context.WithValue(ctx, credKey{}, cred)
}

// CredOf returns the Cred ctx carries; ok is false when it carries none.
func CredOf(ctx context.Context) (cred Cred, ok bool) {
	cred, ok = ctx.Value(credKey{}).(Cred)
	return cred, ok
}

// Attr is the owner and permission of a page, fixed at Alloc.
type Attr struct {
	UID, GID uint32
	Mode     uint32 // permission bits (0o777 mask): read 4, write 2
}

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
	Kind    EventKind
	Page    gva.GVA // page key
	Version gva.Version
	Offset  int    // EventUpdate: where Data was written in the page
	Data    []byte // EventUpdate: the written bytes; the receiver owns them
	Reason  syscall.Errno
}

// Quick is an optional extension of a Backend. Quick reports whether op on
// addr will complete without waiting on anything (another node, a lock
// holder, a disk). The server runs such requests on the connection's
// reading goroutine and sends their replies together with the others read
// by the same system call, which saves a goroutine and a system call per
// request. It is only a hint: a wrong true delays the connection's other
// requests, still within the op's deadline.
type Quick interface {
	Quick(op wire.Op, addr gva.GVA) bool
}
