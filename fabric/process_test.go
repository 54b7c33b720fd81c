package fabric

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sleeper starts a process that would run for a minute and returns it
// recorded as agent 0 of a state in a temporary directory (recorded as
// stopped: Alive and Kill must look at the process, not the record).
func sleeper(t *testing.T) (*State, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &State{dir: dir, Agents: []Agent{{Node: 0, Pid: cmd.Process.Pid, Start: st.start, Stopped: true, RunDir: filepath.Join(dir, "node0")}}}
	return s, cmd
}

// TestAliveLooksAtTheProcess: an agent recorded as stopped whose process
// runs is alive; a zombie is not; a pid now naming another process (a
// different start time) is not the agent.
func TestAliveLooksAtTheProcess(t *testing.T) {
	s, cmd := sleeper(t)
	if !s.Alive(0) {
		t.Fatal("a running process recorded as stopped: Alive says no")
	}
	other := *s
	other.Agents = []Agent{s.Agents[0]}
	other.Agents[0].Start++
	if other.Alive(0) {
		t.Fatal("a pid with another start time taken for the agent")
	}
	if err := other.Kill(0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("Kill signalled a process that only shares the agent's pid: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not waited for: a zombie until reaped.
	for range 500 {
		if st, err := readProcStat(cmd.Process.Pid); err == nil && st.state == 'Z' {
			break
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 10e6}, nil)
	}
	if st, err := readProcStat(cmd.Process.Pid); err != nil || st.state != 'Z' {
		t.Fatalf("killed child not a zombie: %+v %v", st, err)
	}
	if s.Alive(0) {
		t.Fatal("a zombie is alive")
	}
}

// TestKillStopsAndReaps: Kill ends the process (even one recorded as
// stopped), reaps it when it is a child, and records the agent stopped.
func TestKillStopsAndReaps(t *testing.T) {
	s, cmd := sleeper(t)
	s.Agents[0].Stopped = false
	if err := s.Kill(0, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if s.Alive(0) || !s.Agents[0].Stopped {
		t.Fatalf("after Kill: alive %v, recorded stopped %v", s.Alive(0), s.Agents[0].Stopped)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("after Kill the process is still there (or unreaped): %v", err)
	}
	loaded, err := Load(s.dir)
	if err != nil || !loaded.Agents[0].Stopped {
		t.Fatalf("saved state: %+v %v", loaded, err)
	}

	s2, cmd2 := sleeper(t) // recorded as stopped, still running
	if err := s2.Kill(0, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(cmd2.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("Kill left a process recorded as stopped running: %v", err)
	}
}

// TestAgentConfReplicas: --replicas R becomes every agent's replicas key,
// with the fabric's size (fabric-nodes, the split rule's majority); none
// for the default, 1.
func TestAgentConfReplicas(t *testing.T) {
	spec := Spec{Nodes: 2, Topo: "line", Links: "udp", Dir: t.TempDir(), Replicas: 2}
	if c := agentConf(1, "/run/x", spec); !strings.Contains(c, "\nreplicas = 2\nfabric-nodes = 2\n") {
		t.Fatalf("agent.conf with --replicas 2 (and the fabric's size, for the split rule):\n%s", c)
	}
	spec.Replicas = 1
	if c := agentConf(1, "/run/x", spec); strings.Contains(c, "replicas") {
		t.Fatalf("agent.conf with --replicas 1:\n%s", c)
	}
	spec.Replicas = 9
	if err := spec.defaults(); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("--replicas 9: %v", err)
	}
}

// TestPortChoiceLock: a second up waits for the first to let the port
// lock go, and gives up waiting after its bound (then goes on unlocked).
func TestPortChoiceLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports.lock")
	unlock := openPortBook(path, time.Second).unlock
	got := make(chan time.Time, 1)
	go func() {
		u := openPortBook(path, 10*time.Second).unlock
		got <- time.Now()
		u()
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("a second holder got the lock while the first held it")
	default:
	}
	released := time.Now()
	unlock()
	unlock() // a second call does nothing
	if at := <-got; at.Before(released) {
		t.Fatalf("second holder got the lock at %v, before the release at %v", at, released)
	}
	// a holder that never lets go delays an up by the bound, no more
	hold := openPortBook(path, time.Second).unlock
	defer hold()
	start := time.Now()
	openPortBook(path, 50*time.Millisecond).unlock()
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("waiting for a held lock took %v, want its 50ms bound", d)
	}
}
