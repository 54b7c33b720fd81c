package host

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/hostif"
)

// TestEveryVerbIsAHostRequest: every verb of the host interface but the
// session's open and close maps to a request of the core's host session,
// distinct verbs to distinct requests,
// and a verb the agent does not know is refused (EINVAL) without reaching
// the core.
func TestEveryVerbIsAHostRequest(t *testing.T) {
	seen := map[any]hostif.Verb{}
	for v := hostif.VerbAlloc; v <= hostif.VerbWhere; v++ {
		if int(v) >= len(hostOps) || hostOps[v] == 0 {
			t.Fatalf("verb %v has no host request", v)
		}
		if w, dup := seen[hostOps[v]]; dup {
			t.Fatalf("verbs %v and %v both map to %v", w, v, hostOps[v])
		}
		seen[hostOps[v]] = v
	}
	b := New(Config{})
	for _, v := range []hostif.Verb{0, hostif.VerbClose + 1, 255} {
		if err := b.Do(context.Background(), &hostif.Call{Verb: v}); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("verb %d: %v, want EINVAL", v, err)
		}
	}
}
