package privtest

import (
	"os"
	"testing"
)

func TestMissingAgreesWithUID(t *testing.T) {
	reason := missing()
	if os.Geteuid() != 0 && reason != "not root" {
		t.Fatalf("non-root process: reason %q", reason)
	}
	if os.Geteuid() == 0 && reason == "not root" {
		t.Fatal("root reported as not root")
	}
}
