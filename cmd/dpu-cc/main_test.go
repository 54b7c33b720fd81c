package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestVersion: dpu-cc --version says it is dpu-cc first, then which
// compiler it drives and that compiler's own banner.
func TestVersion(t *testing.T) {
	if _, err := exec.LookPath(compiler()); err != nil {
		t.Skipf("no compiler %s", compiler())
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "dpu-cc ") || !strings.HasPrefix(lines[1], "compiler: "+compiler()) {
		t.Fatalf("dpu-cc --version:\n%s", out.String())
	}
}
