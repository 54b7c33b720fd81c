//go:build dpubug

package admit

import (
	"sync/atomic"

	"github.com/aitherion/dpu/coherence"
)

var asRoot, pastFailure, noBudget atomic.Bool

// BugAnswerPastFailure plants a bug in bulk transfers (checker tests
// only): the answer counts the bytes of the pieces after the first that
// failed as done.
func BugAnswerPastFailure(on bool) { pastFailure.Store(on) }

// BugNoBudget plants a bug in bulk transfers (checker tests only): a
// session's pieces go into the core regardless of its budget.
func BugNoBudget(on bool) { noBudget.Store(on) }

func answerPastFailure() bool { return pastFailure.Load() }

func ignoreBudget() bool { return noBudget.Load() }

// BugAdmitAsRoot plants a bug in admission (checker tests only): every
// request is admitted as root, whoever sent it. on=false takes it out.
func BugAdmitAsRoot(on bool) { asRoot.Store(on) }

// admitted is the credential a request is admitted with: its user's, or
// root's with the planted bug.
func admitted(cred coherence.Cred) coherence.Cred {
	if asRoot.Load() {
		return coherence.Cred{}
	}
	return cred
}
