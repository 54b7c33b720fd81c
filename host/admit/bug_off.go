//go:build !dpubug

package admit

import "github.com/aitherion/dpu/coherence"

// admitted is the credential a request is admitted with: its user's.
func admitted(cred coherence.Cred) coherence.Cred { return cred }
