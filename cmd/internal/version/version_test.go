package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/aitherion/dpu", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "2e75108aabbccddeeff"}, {Key: "vcs.time", Value: "2026-11-24T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := format("dpuctl", bi), "dpuctl v0.3.0 (revision 2e75108aabbc, modified, 2026-11-24T00:00:00Z) go1.26.8"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := format("dpu-sim", &debug.BuildInfo{GoVersion: "go1.26.8"}); got != "dpu-sim (devel) go1.26.8" {
		t.Errorf("no vcs: %q", got)
	}
	if got := String("x"); !strings.HasPrefix(got, "x ") || !strings.Contains(got, "go1.") {
		t.Errorf("String: %q", got)
	}
}
