package coherence

import "github.com/aitherion/dpu/gva"

// A node's allocation space. Page numbers of pages allocated here carry
// the allocation epoch of the run that made them in their top epochBits
// bits and a counter in the rest:
//
//	page number (52 bits) = epoch (20 bits) | counter (32 bits)
//
// The driver gives every run of a node an epoch larger than any an
// earlier run of that node used (Config.AllocEpoch; the agent persists it,
// the simulator keeps it per node), so a restarted node can never hand out
// a GVA an earlier incarnation handed out: a client still holding an old
// GVA reaches no page (ESTALE once the restart's grace is over, see
// stale.go: the page was lost with the restart),
// never another user's new page. Within a run the counter only grows, so
// a freed page's GVA is not reused either. A run that exhausts its counter
// (2^32 allocations) fails further allocations with ENOSPC until the node
// restarts with a new epoch.
const (
	epochBits   = 20
	counterBits = 52 - epochBits

	// MaxAllocEpoch is the largest Config.AllocEpoch.
	MaxAllocEpoch = 1<<epochBits - 1
	counterMask   = 1<<counterBits - 1
)

// firstPage is the page number before the first one a run with the given
// epoch allocates.
func firstPage(epoch uint32) gva.PageNumber {
	return gva.PageNumber(uint64(epoch&MaxAllocEpoch) << counterBits)
}

// takePage returns the next page number of this run's allocation space;
// ok is false once the run's counter is exhausted.
func (e *Engine) takePage() (gva.PageNumber, bool) {
	if uint64(e.nextPage)&counterMask == counterMask {
		return 0, false
	}
	e.nextPage++
	return e.nextPage, true
}

// AllocEpoch returns the epoch of page number pn (see MaxAllocEpoch).
func AllocEpoch(pn gva.PageNumber) uint32 { return uint32(uint64(pn) >> counterBits & MaxAllocEpoch) }
