package pathcache

import (
	"fmt"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// ReplicaState is the state of the replica of a page held by this node's own
// host (the local replica).
type ReplicaState uint8

// Replica states.
const (
	ReplicaNone     ReplicaState = iota // the local host holds no replica
	ReplicaValid                        // the local replica is current at Entry.Version
	ReplicaInvalid                      // a write-invalidate arrived; reads re-fetch first
	ReplicaSwapping                     // an ownership transfer is under way; the page is locked
)

var replicaNames = [...]string{"none", "valid", "invalid", "swapping"}

func (r ReplicaState) String() string {
	if int(r) < len(replicaNames) {
		return replicaNames[r]
	}
	return fmt.Sprintf("replica(%d)", uint8(r))
}

// Entry is the path cache entry of one page on this node.
//
// The coherence engine reads and writes the fields in place. The cache itself
// reads Owner, Pins and Replica (to decide what may age out) and maintains
// Key and LastUse.
type Entry struct {
	// Key is the page's path cache key (gva.GVA.Key()).
	Key gva.GVA
	// Version is the newest page version this node has seen.
	Version gva.Version
	// LastUse is when the entry was last returned by Get or Upsert.
	LastUse time.Duration
	// Down is the set of ports toward replicas (noc.LocalPort: this node's
	// host holds one).
	Down PortSet
	// Up is the port toward the owner; noc.NoPort at the owner.
	Up noc.PortID
	// Pins counts operations in flight that hold the entry (see Pin).
	Pins uint16
	// Owner is set on the node whose host owns the page (holds the primary).
	Owner bool
	// Replica is the state of the local host's replica.
	Replica ReplicaState
	// Fetching is set while a fetch of the page is outstanding upstream, so
	// that further fetches of the same page and version merge into it.
	Fetching bool
	// Huge is set for a 2 MiB page.
	Huge bool
	// Attr is the page's owner and mode as this node learned them with
	// its content (HasAttr unset: not learned): the coherence engine
	// checks the requests other nodes vouch for against them.
	Attr    PageAttr
	HasAttr bool

	// stamp is when the entry was last moved to the front of the LRU list
	// (a promoting hit, its creation, or being kept alive while exempt); the
	// list is sorted by it.
	stamp time.Duration
}

// idleSince is when the entry's idle clock started: its last use, or the
// last time aging kept it alive because it was exempt.
func (e *Entry) idleSince() time.Duration { return max(e.LastUse, e.stamp) }

// Pin marks one more in-flight operation on the entry: it is not aged out
// until a matching Unpin.
func (e *Entry) Pin() { e.Pins++ }

// Unpin ends one in-flight operation. It reports false (and does nothing)
// when the entry was not pinned.
func (e *Entry) Unpin() bool {
	if e.Pins == 0 {
		return false
	}
	e.Pins--
	return true
}

// Exempt reports whether aging must leave e alone: an owner entry, a pinned
// entry or one whose local replica is swapping.
func (e *Entry) Exempt() bool {
	return e.Owner || e.Pins > 0 || e.Replica == ReplicaSwapping
}

// Cause says why an entry was evicted.
type Cause uint8

// Eviction causes.
const (
	CauseLRU Cause = iota + 1 // the cache was full and the entry was least recently used
	CauseTTL                  // the entry was idle for longer than Config.IdleTTL
)

func (c Cause) String() string {
	switch c {
	case CauseLRU:
		return "lru"
	case CauseTTL:
		return "ttl"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Eviction is an entry that aged out of the cache, with everything the
// caller needs to tell its neighbours. Acting on it is mandatory (see the
// package documentation and AppendNotices).
type Eviction struct {
	Key     gva.GVA
	Version gva.Version
	Up      noc.PortID
	Down    PortSet
	Replica ReplicaState
	Cause   Cause
	At      time.Duration // the now of the call that evicted it
}

// NoticeOp is a message an eviction obliges the caller to send.
type NoticeOp uint8

// Notice operations.
const (
	// NoticeInvalidate: invalidate + unref toward a down port (the subtree
	// drops its entries; replicas below become invalid and must re-ref). On
	// noc.LocalPort: invalidate the local host's replica.
	NoticeInvalidate NoticeOp = iota + 1
	// NoticeUnref: unref toward the up port (the parent drops this branch).
	NoticeUnref
)

func (o NoticeOp) String() string {
	switch o {
	case NoticeInvalidate:
		return "invalidate"
	case NoticeUnref:
		return "unref"
	}
	return fmt.Sprintf("notice(%d)", uint8(o))
}

// Notice is one message to send for an eviction.
type Notice struct {
	Port noc.PortID
	Op   NoticeOp
}

// AppendNotices appends to dst the messages the eviction requires: an
// invalidate toward every down port (increasing port order, noc.LocalPort
// last), then an unref toward the up port if there is one.
func (ev *Eviction) AppendNotices(dst []Notice) []Notice {
	for p := range ev.Down.All() {
		dst = append(dst, Notice{Port: p, Op: NoticeInvalidate})
	}
	if ev.Up != noc.NoPort {
		dst = append(dst, Notice{Port: ev.Up, Op: NoticeUnref})
	}
	return dst
}

// PageAttr is a page's owner and permission bits (0o777), fixed when the
// page is allocated.
type PageAttr = gva.Attr
