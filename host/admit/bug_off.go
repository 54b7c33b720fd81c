//go:build !dpubug

package admit

import "github.com/aitherion/dpu/coherence"

func answerPastFailure() bool { return false }

func ignoreBudget() bool { return false }

// admitted is the credential a request is admitted with: its user's.
func admitted(cred coherence.Cred) coherence.Cred { return cred }
