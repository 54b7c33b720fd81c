package fabric_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestLinkPortsArePrivileged: a fabric brought up by root puts its links
// on privileged ports, so that once a node stops, an unprivileged user
// cannot bind its addresses (and keep it from restarting): the bind fails
// with EACCES. (Up run by an unprivileged user picks unprivileged ports
// and says so.)
func TestLinkPortsArePrivileged(t *testing.T) {
	privtest.Require(t)
	st := up(t, 2, "line")
	start := 1024
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			start = n
		}
	}
	var addrs []string
	for _, a := range st.Agents {
		conf, err := os.ReadFile(a.Config)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(conf), "\n") {
			f := strings.Fields(l)
			if len(f) == 6 && f[0] == "port" && f[3] == "udp" {
				addrs = append(addrs, f[4])
			}
		}
	}
	if len(addrs) != 2 {
		t.Fatalf("link addresses %v", addrs)
	}
	for _, ad := range addrs {
		_, p, _ := strings.Cut(ad, ":")
		if n, _ := strconv.Atoi(p); n <= 0 || n >= start {
			t.Fatalf("link address %s: not a privileged port (below %d)", ad, start)
		}
	}
	if err := fabric.Down(st.Dir()); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fabric-bind") // 0700 under a world-searchable /tmp
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "fabric.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ad := range addrs {
		cmd := exec.Command(bin, "-test.run=^TestHelperBind$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DPU_TEST_BIND="+ad)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "bind "+ad+": "+syscall.EACCES.Error()) {
			t.Fatalf("nobody binding a stopped node's address %s:\n%s", ad, out)
		}
	}
}

// TestHelperBind is not a test: TestLinkPortsArePrivileged runs it as
// another user to bind DPU_TEST_BIND and print the outcome.
func TestHelperBind(t *testing.T) {
	addr := os.Getenv("DPU_TEST_BIND")
	if addr == "" {
		t.Skip("helper process only")
	}
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			fmt.Printf("bind %s: %s\n", addr, errno.Error())
			return
		}
		fmt.Printf("bind %s: %v\n", addr, err)
		return
	}
	c.Close()
	fmt.Printf("bind %s: ok\n", addr)
}

// TestUpThroughAnotherUsersSymlinkIsRefused (hole 5, dpu-fabric): root's
// "up --dir" given a path through a symlink that another user owns, in a
// world-writable sticky directory (as a --dir under /tmp is), is refused
// before anything is written: the user could point the link at a
// directory of its own once the fabric ran, and every later use of the
// path (down, fault, the agents' sockets) would follow it. down and the
// commands that load the fabric refuse the path too, and a link to a
// directory that does not exist yet does not get it made.
func TestUpThroughAnotherUsersSymlinkIsRefused(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "fabric")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "pub")
	if err := os.Mkdir(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		t.Helper()
		p := filepath.Join(pub, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		return p
	}
	spec := func(d string) fabric.Spec {
		return fabric.Spec{Nodes: 1, Topo: "line", Dir: d, Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"), Timeout: 10 * time.Second}
	}

	l := link("dpu", real)
	_, err := fabric.Up(context.Background(), spec(l), testWriter{t})
	if !errors.Is(err, rundir.ErrUnsafe) || !strings.Contains(err.Error(), "symlink of uid 65534") {
		t.Fatalf("up --dir through uid 65534's symlink: %v, want ErrUnsafe naming the link", err)
	}
	if names, _ := os.ReadDir(real); len(names) != 0 {
		t.Fatalf("up wrote through the other user's link: %v", names)
	}
	if _, err := fabric.Load(l); !errors.Is(err, rundir.ErrUnsafe) {
		t.Errorf("load through uid 65534's symlink: %v, want ErrUnsafe", err)
	}
	if err := fabric.Down(l); !errors.Is(err, rundir.ErrUnsafe) {
		t.Errorf("down through uid 65534's symlink: %v, want ErrUnsafe", err)
	}

	missing := filepath.Join(dir, "not-yet")
	l2 := link("dpu2", missing)
	if _, err := fabric.Up(context.Background(), spec(l2), testWriter{t}); err == nil {
		t.Fatal("up --dir through uid 65534's dangling symlink succeeded")
	}
	if _, err := os.Lstat(missing); err == nil {
		t.Fatal("up made the directory the other user's link names")
	}
}
