package coherence

import (
	"syscall"
	"time"

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
	return e.now < e.born+e.learnGrace()
}

// copiesMayReturn reports whether a page of this home's earlier run that
// no live node owns may still be taken over by a backup's copy: routing
// reached more nodes than before (a node came back) within the learning
// grace. A copy's takeover can wait on such a node (a handover's heir
// that died, a majority to form), long after this home restarted; till
// then the home's answer is "retry", not "page lost" (dpu-sim seed 9,
// 16 nodes, every fault, R = 2: a stand-in took a page over 73 ms after
// its home restarted, 40 ms after the home called it lost).
func (e *Engine) copiesMayReturn() bool {
	return e.replicated() && e.split.joinedAt != 0 && e.now < e.split.joinedAt+e.learnGrace()
}

// copyAskedMax bounds the pages a home remembers a copy asked about.
const copyAskedMax = 4096

// noteCopyAsked records that a backup's copy of key, a page of this
// home's earlier run it has no record of, asked whether it may take the
// page over: the page is not lost while that copy decides.
func (e *Engine) noteCopyAsked(now time.Duration, key gva.GVA) {
	if _, ok := e.copyAsked[key]; !ok && len(e.copyAsked) >= copyAskedMax {
		for k, at := range e.copyAsked {
			if now-at >= e.copyDecides() {
				delete(e.copyAsked, k)
			}
		}
		if len(e.copyAsked) >= copyAskedMax {
			return
		}
	}
	e.copyAsked[key] = now
}

// copyAskedLately reports whether a copy of key asked this home about it
// within the time a copy takes to decide after the home's last answer.
// Until then a request for the page is answered "retry", not "page
// lost" (dpu-sim seed 9, 16 nodes, every fault, R = 2: a stand-in asked
// the restarted home, got no record and took the page over 20 ms after
// the home had begun to call it lost).
func (e *Engine) copyAskedLately(key gva.GVA) bool {
	at, ok := e.copyAsked[key]
	if !ok {
		return false
	}
	if e.now-at >= e.copyDecides() {
		delete(e.copyAsked, key)
		return false
	}
	return true
}

// copyDecides bounds how long a copy that asked the home takes to decide:
// it asks again after a HomeRefresh, and a stand-in waits HomeRefresh and
// two FailoverGraces more (standInMayPromote), the split rule's grace on
// top.
func (e *Engine) copyDecides() time.Duration {
	return 2*e.cfg.HomeRefresh + 2*e.cfg.FailoverGrace + e.cfg.SplitGrace
}

// learnGrace is how long a restarted home waits for the owners of its
// pages to tell it of them.
func (e *Engine) learnGrace() time.Duration {
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
	return grace
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
