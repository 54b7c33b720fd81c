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
// zero-length kernel): bare, through the hook with no agent, through the
// hook with an agent but no quota, and through the hook under a 100% quota
// (the quota path: within_token, a clock read per launch, and a token
// renewal from the agent every millisecond or so). launchbench times b.N
// launches itself (best of 3 rounds): the only figure is ns/launch. The
// ns/op column (the child's whole run, process start and driver setup
// included, over b.N) measures nothing useful and is suppressed.
func BenchmarkLaunch(b *testing.B) {
	dir := build(b)
	sock, quotaSock := tempSocket(b), tempSocket(b)
	startAgent(b, sock, ledger.Config{})
	startAgent(b, quotaSock, ledger.Config{Default: ledger.Limit{Quota: 100}})
	hook := "LD_PRELOAD=" + filepath.Join(dir, "libdpucuda.so")
	for _, c := range []struct {
		name  string
		env   []string
		quota bool // the hook must have learnt a quota
	}{
		{"bare", nil, false},
		{"hook-no-agent", []string{hook, "DPU_SOCKET=" + sock + ".absent"}, false},
		{"hook-agent-no-quota", []string{hook, "DPU_SOCKET=" + sock}, false},
		{"hook-agent-quota", []string{hook, "DPU_SOCKET=" + quotaSock}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			cmd := exec.Command(filepath.Join(dir, "launchbench"), strconv.Itoa(b.N), "3")
			for _, e := range os.Environ() {
				if !strings.HasPrefix(e, "LD_PRELOAD=") && !strings.HasPrefix(e, "DPU_") {
					cmd.Env = append(cmd.Env, e)
				}
			}
			cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(dir, "fake"), "DPU_CUDA_LOG=info")
			cmd.Env = append(cmd.Env, c.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				b.Fatalf("launchbench: %v\n%s%s", err, stdout.String(), stderr.String())
			}
			f := strings.Fields(stdout.String())
			if len(f) < 2 || f[0] != "launch_ns" {
				b.Fatalf("launchbench: %q", stdout.String())
			}
			ns, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				b.Fatal(err)
			}
			if learnt := strings.Contains(stderr.String(), "kernel quota 100%"); learnt != c.quota {
				b.Fatalf("the hook learnt a quota: %v, want %v (its log:\n%s)", learnt, c.quota, stderr.String())
			}
			b.ReportMetric(ns, "ns/launch")
			b.ReportMetric(0, "ns/op")
		})
	}
}
