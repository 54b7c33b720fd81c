package coherence

import (
	"syscall"

	"github.com/aitherion/dpu/gva"
)

// A GVA of an earlier run of its home (its page number's allocation epoch
// is below the home's current one; see space.go) that the home has no
// record of once the restart's grace is over (two HomeRefresh periods, in
// which owners elsewhere re-register the pages they hold) names a page
// that was lost with that run: requests for it end with ESTALE, not
// EHOSTDOWN, so a client learns that its handle is dead, not that a node
// is down. A node whose AllocEpoch is zero (it never restarts) has no
// earlier runs.

// learning reports whether this node, as a home, restarted lately: owners
// elsewhere are still telling it their pages (two HomeRefresh periods).
// With replicas, a page this node owned before it restarted is taken
// over by a backup once that grace is over (the backup asks first: see
// tryPromote), and the new owner tells the home a round trip later:
// requests wait (EAGAIN) for that too rather than end with ESTALE or
// EHOSTDOWN for a page about to come back.
func (e *Engine) learning() bool {
	grace := 2 * e.cfg.HomeRefresh
	if e.replicated() {
		grace += e.cfg.HomeRefresh/2 + 2*e.cfg.FailoverGrace
	}
	if e.cfg.Durable != nil {
		// Pages come back from disks too, of nodes that may restart later
		// than this one and wait restoreGrace before they take them over
		// (durable.go).
		grace += e.restoreGrace()
	}
	return e.now < e.born+grace
}

// homeAnswer is a home's reply to a question about a page it has no
// record of: EAGAIN while it is still learning its records after a
// restart (ask again), EHOSTDOWN once every live owner must have told it
// (no node owns the page: a backup may take it over).
func (e *Engine) homeAnswer() syscall.Errno {
	if e.now < e.born+2*e.cfg.HomeRefresh {
		return syscall.EAGAIN
	}
	return syscall.EHOSTDOWN
}

// staleAtHome reports whether key, homed here, was allocated by an
// earlier run of this node.
func (e *Engine) staleAtHome(key gva.GVA) bool {
	return e.cfg.AllocEpoch != 0 && AllocEpochOf(key) < e.cfg.AllocEpoch
}

// AllocEpochOf is the allocation epoch of the run of its home that
// allocated key.
func AllocEpochOf(key gva.GVA) uint32 { return uint32(uint64(key.Page()) >> counterBits) }

// HasHomeRecord reports whether this node, key's home, has a record of
// it (checkers).
func (e *Engine) HasHomeRecord(key gva.GVA) bool { return e.home[key] != nil }
