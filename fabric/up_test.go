package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
)

// gone reports whether pid has exited (or is a zombie left to reap).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// TestUpFailureStopsWhatItStarted: an up that does not converge in time
// stops every agent it started, and says what was missing in a short
// message.
func TestUpFailureStopsWhatItStarted(t *testing.T) {
	dir := t.TempDir()
	spec := fabric.Spec{Nodes: 8, Topo: "ring", Dir: dir, Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: time.Millisecond}
	var log bytes.Buffer
	st, err := fabric.Up(context.Background(), spec, &log)
	if !errors.Is(err, fabric.ErrNotConverged) {
		t.Fatalf("up: %v", err)
	}
	if len(err.Error()) > 300 || !strings.Contains(err.Error(), "nodes still miss routes: node 0 (") || !strings.Contains(err.Error(), "more") {
		t.Errorf("error (%d bytes): %v", len(err.Error()), err)
	}
	if !strings.Contains(log.String(), "up failed: stopped the agents it started") {
		t.Errorf("log: %s", log.String())
	}
	if st == nil || len(st.Agents) != spec.Nodes {
		t.Fatalf("state %+v", st)
	}
	for _, a := range st.Agents {
		deadline := time.Now().Add(5 * time.Second)
		for !gone(a.Pid) {
			if time.Now().After(deadline) {
				t.Fatalf("agent %d (pid %d) still runs after a failed up", a.Node, a.Pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
