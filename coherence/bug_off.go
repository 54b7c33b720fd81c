//go:build !dpubug

package coherence

import (
	"time"

	"github.com/aitherion/dpu/noc"
)

// bugsCompiled: the product carries no planted bug; Config.Bug is refused
// (see bug_on.go, built with -tags dpubug for the checkers' tests).
const bugsCompiled = false

func (e *Engine) staleCAS(time.Duration, *request) bool { return false }

func bugSkipHostChecks(noc.NodeID) bool { return false }
