//go:build dpubug

package admit

import (
	"sync/atomic"

	"github.com/aitherion/dpu/coherence"
)

var asRoot atomic.Bool

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
