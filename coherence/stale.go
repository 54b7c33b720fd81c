package coherence

import "github.com/aitherion/dpu/gva"

// A GVA of an earlier run of its home (its page number's allocation epoch
// is below the home's current one; see space.go) that the home has no
// record of once the restart's grace is over (two HomeRefresh periods, in
// which owners elsewhere re-register the pages they hold) names a page
// that was lost with that run: requests for it end with ESTALE, not
// EHOSTDOWN, so a client learns that its handle is dead, not that a node
// is down. A node whose AllocEpoch is zero (it never restarts) has no
// earlier runs.

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
