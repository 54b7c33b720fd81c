package fabric_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/internal/rundir"
)

// TestDownSparesAForeignPid: a state file whose pid now names another
// process (the agent exited and the pid was reused, or the record was
// edited) must not make down kill that process.
func TestDownSparesAForeignPid(t *testing.T) {
	st := up(t, 1, "line")
	victim := exec.Command("sleep", "30")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _, _ = victim.Process.Wait() }()
	agentPid := st.Agents[0].Pid
	defer syscall.Kill(agentPid, syscall.SIGKILL)

	editState(t, st.Dir(), func(m map[string]any) {
		m["agents"].([]any)[0].(map[string]any)["pid"] = victim.Process.Pid
	})
	err := fabric.Down(st.Dir())
	if !errors.Is(err, fabric.ErrNotOurs) {
		t.Fatalf("down over a foreign pid: %v, want ErrNotOurs", err)
	}
	if err := syscall.Kill(victim.Process.Pid, 0); err != nil {
		t.Fatalf("down signalled the foreign process: %v", err)
	}
	_ = syscall.Kill(agentPid, syscall.SIGTERM)
}

// TestStateOthersCanWriteIsRefused: fabric.json that another user could
// have written is not trusted (its agent_path would be run as root).
func TestStateOthersCanWriteIsRefused(t *testing.T) {
	st := up(t, 1, "line")
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "evil.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(script, 0o777); err != nil {
		t.Fatal(err)
	}
	editState(t, st.Dir(), func(m map[string]any) { m["agent_path"] = script })
	// a world-writable program is never run
	st2, err := fabric.Load(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Restart(0); err == nil || !strings.Contains(err.Error(), "others can write it") {
		t.Fatalf("restart with a world-writable agent_path: %v", err)
	}
	// a world-writable state file is not read at all
	if err := os.Chmod(filepath.Join(st.Dir(), "fabric.json"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := fabric.Load(st.Dir()); !errors.Is(err, rundir.ErrUnsafe) {
		t.Fatalf("world-writable state: %v, want ErrUnsafe", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the planted script ran")
	}
	_ = os.Chmod(filepath.Join(st.Dir(), "fabric.json"), 0o644)
}

// TestForgedStateOfAnotherUser is the dpu-fabric attack as it was run: a
// user who could write the fabric directory forged fabric.json so that
// root's "fault … restart" ran the user's script. The file is not
// root's, so it is refused; so is a fabric directory the user made.
func TestForgedStateOfAnotherUser(t *testing.T) {
	privtest.Require(t)
	st := up(t, 1, "line")
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "evil.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(script, 65534, 65534)
	editState(t, st.Dir(), func(m map[string]any) { m["agent_path"] = script })
	state := filepath.Join(st.Dir(), "fabric.json")
	if err := os.Chown(state, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := fabric.Load(st.Dir()); !errors.Is(err, rundir.ErrUnsafe) {
		t.Fatalf("state owned by uid 65534: %v, want ErrUnsafe", err)
	}
	_ = os.Chown(state, 0, 0)
	st2, err := fabric.Load(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Restart(0); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("restart with agent_path owned by uid 65534: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the planted script ran as root")
	}

	// a fabric directory pre-created by another user
	pre := filepath.Join(t.TempDir(), "f")
	if err := os.Mkdir(pre, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(pre, 65534, 65534)
	spec := fabric.Spec{Nodes: 1, Topo: "line", Dir: pre, AgentPath: filepath.Join(binDir, "dpu-agent"), Timeout: 5 * time.Second}
	if _, err := fabric.Up(context.Background(), spec, testWriter{t}); !errors.Is(err, rundir.ErrUnsafe) {
		t.Fatalf("up in a directory of uid 65534: %v, want ErrUnsafe", err)
	}
}

// editState rewrites fabric.json as its owner would.
func editState(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "fabric.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, _ = json.Marshal(m)
	if err := rundir.WriteFile(p, b, 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
}
