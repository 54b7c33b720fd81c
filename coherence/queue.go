package coherence

import (
	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/gva"
)

// QueueOf lists the requests queued at the arbiter for a page owned here,
// in service order (dpuctl owner show). It allocates.
func (e *Engine) QueueOf(key gva.GVA) []arbiter.Waiter { return e.arb.Waiters(key) }
