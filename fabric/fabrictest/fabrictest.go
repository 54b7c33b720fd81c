// Package fabrictest starts fabrics of real agents for tests and
// benchmarks in other packages: the dpu-agent of this module, built for
// the test, brought up with fabric.Up and taken down when the test ends.
package fabrictest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
)

// Agent builds cmd/dpu-agent of this module into a directory of tb's and
// returns the binary's path.
func Agent(tb testing.TB) string {
	tb.Helper()
	bin := tb.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/aitherion/dpu/cmd/dpu-agent").CombinedOutput(); err != nil {
		tb.Fatalf("building dpu-agent: %v\n%s", err, out)
	}
	return filepath.Join(bin, "dpu-agent")
}

// Up starts spec's fabric and takes it down when tb ends. Left zero,
// spec.Dir is a directory of tb's, spec.AgentPath the agent Agent builds,
// spec.Seed 1 and spec.Timeout 60 s. A fabric that does not come up fails
// tb with fabric.Up's log.
func Up(tb testing.TB, spec fabric.Spec) *fabric.State {
	tb.Helper()
	if spec.Dir == "" {
		spec.Dir = tb.TempDir()
	}
	if spec.AgentPath == "" {
		spec.AgentPath = Agent(tb)
	}
	if spec.Seed == 0 {
		spec.Seed = 1
	}
	if spec.Timeout == 0 {
		spec.Timeout = 60 * time.Second
	}
	var log bytes.Buffer
	st, err := fabric.Up(context.Background(), spec, &log)
	tb.Cleanup(func() { fabric.Down(spec.Dir) })
	if err != nil {
		tb.Fatalf("fabric up: %v\n%s", err, log.String())
	}
	return st
}

// Sock is the host socket of node i of st.
func Sock(st *fabric.State, i int) string {
	return filepath.Join(st.Agents[i].RunDir, "dpu0.sock")
}
