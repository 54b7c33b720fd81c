//go:build dpubug

package hostif

import (
	"sync"

	"github.com/aitherion/dpu/gva"
)

// Test hooks, compiled only with the tag dpubug (the planted-bug tests).
const bugsCompiled = true

var bugSkip sync.Map // gva.MachineIndex -> true

// BugSkipChecks makes the servers of machine m skip their users'
// permission checks (but still pass the users' credentials on), as a
// modified node would: the nodes that serve its requests must refuse what
// its users may not do. on=false restores the checks.
func BugSkipChecks(m gva.MachineIndex, on bool) {
	if on {
		bugSkip.Store(m, true)
	} else {
		bugSkip.Delete(m)
	}
}

func bugSkipChecks(m gva.MachineIndex) bool {
	_, ok := bugSkip.Load(m)
	return ok
}
