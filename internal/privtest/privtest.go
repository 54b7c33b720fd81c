// Package privtest is the one gate of the privileged tests (network
// namespaces, veth, BPF, AF_XDP): they skip where the process cannot do
// those things, and fail instead of skipping when DPU_PRIV_TESTS=require
// (CI sets it, so a CI that silently stopped running them goes red).
//
// It never changes the system: Require only looks (effective uid, and
// whether the netns and BPF file systems are there).
package privtest

import (
	"os"
	"testing"
)

// Env is the variable that turns skips into failures when set to "require".
const Env = "DPU_PRIV_TESTS"

// Require skips (or, under DPU_PRIV_TESTS=require, fails) t unless the
// process may create network namespaces, veth pairs and BPF objects.
func Require(t testing.TB) {
	t.Helper()
	if reason := missing(); reason != "" {
		if os.Getenv(Env) == "require" {
			t.Fatalf("privileged test cannot run (%s) but %s=require", reason, Env)
		}
		t.Skipf("privileged test skipped: %s (run as root; %s=require turns this into a failure)", reason, Env)
	}
}

func missing() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "no network namespaces: " + err.Error()
	}
	if _, err := os.Stat("/sys/fs/bpf"); err != nil {
		return "no /sys/fs/bpf: " + err.Error()
	}
	return ""
}
