package backoff

import (
	"testing"
	"time"
)

// TestAcceptDoublesToItsBound: failures wait 5 ms, 10 ms, ... doubling up
// to 1 s and staying there; a success starts over at 5 ms.
func TestAcceptDoublesToItsBound(t *testing.T) {
	var a Accept
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if d := a.Failed(); d != w*time.Millisecond {
			t.Fatalf("failure %d: wait %v, want %v", i+1, d, w*time.Millisecond)
		}
	}
	a.Succeeded()
	if d := a.Failed(); d != Min {
		t.Fatalf("first failure after a success: wait %v, want %v", d, Min)
	}
}
