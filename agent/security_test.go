package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc"
)

// runAgent starts one agent with cfg; stop ends it and waits.
func runAgent(tb testing.TB, cfg agent.Config) (nd *liveNode, stop func()) {
	tb.Helper()
	logBuf := &syncBuffer{}
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(logBuf, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		tb.Fatalf("agent: %v\n%s", err, logBuf.String())
	case <-time.After(10 * time.Second):
		cancel()
		tb.Fatal("agent not ready")
	}
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tb.Error("agent did not stop")
		}
	}
	tb.Cleanup(stop)
	return &liveNode{a: a, runDir: cfg.RunDir, log: logBuf}, stop
}

func oneNodeConfig(tb testing.TB) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(tb.TempDir(), "run")
	cfg.Pages = 1024
	return cfg
}

// TestRunDirOfAnotherUserIsRefused (attack 2): a run directory that
// another user created (and so can rename sockets in, or swap names for
// symlinks) is refused with a message naming the override.
func TestRunDirOfAnotherUserIsRefused(t *testing.T) {
	privtest.Require(t)
	cfg := oneNodeConfig(t)
	if err := os.Mkdir(cfg.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cfg.RunDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(cfg, nil)
	if err == nil {
		err = a.Run(context.Background())
	}
	if !errors.Is(err, rundir.ErrUnsafe) || !strings.Contains(err.Error(), "insecure-run-dir") {
		t.Fatalf("run dir owned by uid 65534: %v, want ErrUnsafe naming insecure-run-dir", err)
	}
	if _, err := os.Lstat(filepath.Join(cfg.RunDir, "ctl.sock")); err == nil {
		t.Fatal("the agent made its control socket in the other user's directory")
	}
}

// TestHugeAllocIsRefusedCheaply (attack 3): an allocation larger than the
// node's capacity is refused before any per-page work: no memory
// proportional to the request, and the agent serves on.
func TestHugeAllocIsRefusedCheaply(t *testing.T) {
	nd, _ := runAgent(t, oneNodeConfig(t))
	c := dialHost(t, nd)
	ctx := ctxT(t, time.Minute)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := c.Alloc(ctx, 16<<30, 0) // 4 Mi pages: ~0.5 GB of requests if built
	runtime.ReadMemStats(&after)
	if !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("16 GiB alloc on a 4 MiB node: %v, want ENOMEM", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 32<<20 {
		t.Fatalf("refusing a 16 GiB alloc allocated %d MB", d>>20)
	}
	if _, err := c.Alloc(ctx, 1<<40, 0); !errors.Is(err, syscall.ENOMEM) { // the documented maximum
		t.Fatalf("1 TiB alloc: %v, want ENOMEM", err)
	}
	if _, err := c.Alloc(ctx, 4096, 0); err != nil {
		t.Fatalf("a small alloc after the huge ones: %v", err)
	}
}

// TestRestartNeverReusesAGVA (attack 5): after its agent restarts, a node
// never hands out a GVA it handed out before, and a client still holding
// the old GVA gets an error, never the new page.
func TestRestartNeverReusesAGVA(t *testing.T) {
	cfg := oneNodeConfig(t)
	cfg.Seed = 42
	nd, stop := runAgent(t, cfg)
	ctx := ctxT(t, time.Minute)
	c := dialHost(t, nd)
	old, err := c.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store64(ctx, old, 7); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stop()

	nd, _ = runAgent(t, cfg)
	c = dialHost(t, nd)
	fresh, err := c.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Key() == old.Key() {
		t.Fatalf("the restarted node handed out %v again", old)
	}
	if _, err := c.Store64(ctx, fresh, 1000); err != nil {
		t.Fatal(err)
	}
	if _, swapped, err := c.CompareAndSwap(ctx, old, 1000, 1007); err == nil || swapped {
		t.Fatalf("CAS on the previous run's GVA: swapped %v, err %v; want an error", swapped, err)
	} else {
		t.Logf("CAS on the previous run's GVA: %v", err)
	}
	// past the restart's grace (two home refresh periods), the answer is
	// ESTALE: the handle is dead, not a node down
	time.Sleep(2500 * time.Millisecond)
	if _, _, err := c.CompareAndSwap(ctx, old, 1000, 1007); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("CAS on the previous run's GVA after the grace: %v, want ESTALE", err)
	}
	if _, err := c.Load64(ctx, old); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("load of the previous run's GVA after the grace: %v, want ESTALE", err)
	}
	if v, err := c.Load64(ctx, fresh); err != nil || v != 1000 {
		t.Fatalf("new page: %d %v", v, err)
	}
}

// TestRestartWithTheSameSeedRejoins (attack 6): a node restarted with the
// same configured seed gets a new link session and its links come back
// up within a few heartbeats, not after the neighbour's retired-session
// memory runs out.
func TestRestartWithTheSameSeedRejoins(t *testing.T) {
	dir := t.TempDir()
	addrs := agent.HoldUDP(t, 2)
	cfgs := make([]agent.Config, 2)
	for i := range cfgs {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(i)
		cfg.RunDir = filepath.Join(dir, fmt.Sprintf("node%d", i))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		cfg.Seed = uint64(7 + i) // the same seed at every start
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Args: []string{addrs[i], addrs[1-i]}}}
		cfgs[i] = cfg
	}
	n0, _ := runAgent(t, cfgs[0])
	n1, stop1 := runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})
	stop1()
	time.Sleep(100 * time.Millisecond)
	n1, _ = runAgent(t, cfgs[1])
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		c, err := ctl.Dial(filepath.Join(n1.runDir, "ctl.sock"))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := c.Routes(ctxT(t, 2*time.Second))
		c.Close()
		if err == nil && len(rs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node (same seed) did not rejoin within %v", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHelperHostClient is not a test: TestUserQuotas runs this test binary
// as another user to be an ordinary client of dpu0.sock.
func TestHelperHostClient(t *testing.T) {
	sock := os.Getenv("DPU_TEST_HOST_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	ctx := ctxT(t, 30*time.Second)
	c, err := client.Dial(ctx, sock, client.Options{Name: "quota-helper"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	for ; n < 1000; n++ {
		if _, err := c.Alloc(ctx, 4096, 0); err != nil {
			if !errors.Is(err, syscall.EDQUOT) {
				t.Fatalf("alloc %d: %v, want EDQUOT", n, err)
			}
			break
		}
	}
	fmt.Printf("allocated=%d\n", n)
}

// TestUserQuotas (attack 4, host socket): an ordinary user can take no
// more than its share of the node's pages (which outlive its
// connections), and root can still allocate afterwards.
func TestUserQuotas(t *testing.T) {
	privtest.Require(t)
	dir, err := os.MkdirTemp("", "agent-quota")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(dir, "run")
	cfg.Pages, cfg.UserPages = 64, 20
	cfg.SocketGroup = "65534"
	nd, _ := runAgent(t, cfg)
	if err := os.Chmod(cfg.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// the test binary, where uid 65534 may run it
	bin := testBinaryIn(t, dir)
	run := func() string {
		cmd := exec.Command(bin, "-test.run=^TestHelperHostClient$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DPU_TEST_HOST_SOCKET="+nd.hostSocket())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid 65534: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "allocated=20\n") {
		t.Fatalf("first connection of uid 65534:\n%s", out)
	}
	// the pages outlive the connection: a second one gets none
	if out := run(); !strings.Contains(out, "allocated=0\n") {
		t.Fatalf("second connection of uid 65534:\n%s", out)
	}
	c := dialHost(t, nd)
	if _, err := c.Alloc(ctxT(t, 10*time.Second), 16*4096, 0); err != nil {
		t.Fatalf("root after the user took its share: %v", err)
	}
}

// TestRunDirThroughAnotherUsersSymlinkIsRefused (hole 5): root's agent
// given a run directory through a symlink another user owns, in a
// world-writable sticky directory (as a path under /tmp is), refuses to
// start: the user could point the link at its own directory, and every
// later use of the path would follow it. agent.conf owned by another
// user is refused too.
func TestRunDirThroughAnotherUsersSymlinkIsRefused(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "run")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "pub")
	if err := os.Mkdir(pub, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(pub, "dpu")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cfg := oneNodeConfig(t)
	cfg.RunDir = link
	a, err := agent.New(cfg, nil)
	if err == nil {
		err = a.Run(ctxT(t, 5*time.Second)) // a bound: an agent that starts would serve on
	}
	if !errors.Is(err, rundir.ErrUnsafe) || !strings.Contains(err.Error(), "symlink of uid 65534") {
		t.Fatalf("run dir through uid 65534's symlink: %v, want ErrUnsafe naming the link", err)
	}
	if _, err := os.Lstat(filepath.Join(real, "ctl.sock")); err == nil {
		t.Fatal("the agent made its control socket through the other user's link")
	}

	conf := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(conf, []byte("pages = 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(conf, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	c := agent.DefaultConfig()
	if err := c.LoadFile(conf); !errors.Is(err, rundir.ErrUnsafe) {
		t.Fatalf("agent.conf of uid 65534: %v, want ErrUnsafe", err)
	}
}

// TestRunDirIsUsedThroughItsDescriptor: the run directory (here also the
// state directory) is opened once, when it is checked, and every later use
// goes through that descriptor: after the directory is renamed and
// another put where its path led, a quota set from the control socket is
// kept in the directory that was checked, and nothing is written to the
// new one.
func TestRunDirIsUsedThroughItsDescriptor(t *testing.T) {
	parent := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(parent, "run")
	runAgent(t, cfg)
	moved := filepath.Join(parent, "moved")
	if err := os.Rename(cfg.RunDir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfg.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := ctl.Dial(filepath.Join(moved, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ctl.SetQuota(ctxT(t, 5*time.Second), c, ctl.Quota{UID: 65534, PagesLimit: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(moved, "quotas.json")); err != nil {
		t.Fatalf("the quota is not in the directory that was checked: %v", err)
	}
	if names, _ := os.ReadDir(cfg.RunDir); len(names) != 0 {
		t.Fatalf("the agent wrote through the path again, into the new directory: %v", names)
	}
}

// TestPageLogAndGPULimitsGoThroughTheRunDirsDescriptor: the durable page
// log and gpu-limits.json are used through the descriptor of the
// directory that was checked, as the other files there are: after the
// run directory (here also the state directory) is renamed and another
// put where its path led, a store and a GPU limit set from the control
// socket land in the directory that was checked, and nothing is written
// to the new one.
func TestPageLogAndGPULimitsGoThroughTheRunDirsDescriptor(t *testing.T) {
	parent := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(parent, "run")
	cfg.Pages = 64
	cfg.Durable = true
	runAgent(t, cfg)
	moved := filepath.Join(parent, "moved")
	if err := os.Rename(cfg.RunDir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfg.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	c, err := ctl.Dial(filepath.Join(moved, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := gpuctl.SetLimit(ctx, c, gpuctl.Limit{Cgroup: "/dpu-test", MemoryLimit: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	h, err := client.Dial(ctx, filepath.Join(moved, "dpu0.sock"), client.Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	g, err := h.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store64(ctx, g, 42); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(cfg.RunDir); len(names) != 0 {
		t.Fatalf("the agent wrote through the path again, into the new directory: %v", names)
	}
	if b, err := os.ReadFile(filepath.Join(moved, "gpu-limits.json")); err != nil || !strings.Contains(string(b), "/dpu-test") {
		t.Fatalf("the GPU limit is not in the directory that was checked: %v %q", err, b)
	}
	if fi, err := os.Stat(filepath.Join(moved, "pages.log")); err != nil || fi.Size() == 0 {
		t.Fatalf("the page log is not in the directory that was checked: %v", err)
	}
}
