package host

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/hostif"
)

// TestDoTakesOnlyItsVerbs: Do runs a session's open and close and a
// replica's ref and unref; a verb it does not know (the requests of the
// core go through Submit) is refused with EINVAL without reaching the
// core.
func TestDoTakesOnlyItsVerbs(t *testing.T) {
	b := New(Config{})
	for _, v := range []hostif.Verb{0, hostif.VerbUnref + 1, 255} {
		if err := b.Do(context.Background(), &hostif.Call{Verb: v}); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("verb %d: %v, want EINVAL", v, err)
		}
	}
}
