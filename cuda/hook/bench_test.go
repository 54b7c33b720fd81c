package hook_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aitherion/dpu/cuda/ledger"
)

// BenchmarkLaunch measures cuLaunchKernel against the fake driver (a
// zero-length kernel): bare, through the hook with no agent, and through
// the hook with an agent but no quota. launchbench times b.N launches
// itself (best of 3 rounds); the metric is ns/launch.
func BenchmarkLaunch(b *testing.B) {
	dir := build(b)
	sock := tempSocket(b)
	startAgent(b, sock, ledger.Config{})
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"bare", nil},
		{"hook-no-agent", []string{"LD_PRELOAD=" + filepath.Join(dir, "libdpucuda.so"), "DPU_SOCKET=" + sock + ".absent"}},
		{"hook-agent-no-quota", []string{"LD_PRELOAD=" + filepath.Join(dir, "libdpucuda.so"), "DPU_SOCKET=" + sock}},
	} {
		b.Run(c.name, func(b *testing.B) {
			cmd := exec.Command(filepath.Join(dir, "launchbench"), strconv.Itoa(b.N), "3")
			for _, e := range os.Environ() {
				if !strings.HasPrefix(e, "LD_PRELOAD=") && !strings.HasPrefix(e, "DPU_") {
					cmd.Env = append(cmd.Env, e)
				}
			}
			cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(dir, "fake"))
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				b.Fatalf("launchbench: %v\n%s", err, out)
			}
			f := strings.Fields(string(out))
			if len(f) < 2 || f[0] != "launch_ns" {
				b.Fatalf("launchbench: %q", out)
			}
			ns, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(ns, "ns/launch")
		})
	}
}
