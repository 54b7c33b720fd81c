package reallink_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/bench/reallink"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/mem"
)

// memLine is a line of three in-process nodes over in-memory links: the
// ends read blocking, the middle (two ports) polls.
func memLine(t *testing.T, cfg mem.Config) (n0, n1, n2 *reallink.Node) {
	t.Helper()
	a0, b1, err := mem.Pair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	a1, b2, err := mem.Pair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id noc.NodeID, ports ...noc.Port) *reallink.Node {
		n, err := reallink.NewNode(reallink.NodeConfig{Self: id, Ports: ports, Seed: uint64(id) + 7})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	return mk(0, a0), mk(1, b1, a1), mk(2, b2)
}

// serve drives n on its own goroutine until the test ends.
func serve(t *testing.T, n *reallink.Node) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve node %v: %v", n.Self(), err)
		}
	})
}

func TestNodeForwardAndEcho(t *testing.T) {
	n0, n1, n2 := memLine(t, mem.Config{Seed: 1})
	converge(t, ids(0, 1, 2), n0, n1, n2)
	serve(t, n1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const frames = 3000 // several windows and send queues' worth
	fl, err := reallink.NoCForward(ctx, n0, n2, make([]byte, 64), frames)
	if err != nil {
		t.Fatal(err)
	}
	if fl.Sent != frames || fl.Delivered != frames || fl.Elapsed <= 0 || fl.Rate() <= 0 || fl.Loss() != 0 {
		t.Fatalf("flow: %v", fl)
	}
	if got := n2.Delivered(); got != frames {
		t.Fatalf("node 2 counted %d frames, want %d", got, frames)
	}
	if n2.LastDelivery().IsZero() {
		t.Fatal("no delivery time recorded")
	}

	rtts, err := reallink.NoCEcho(ctx, n0, 1, []byte("ping"), 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rtts) != 50 || reallink.Percentile(rtts, 50) <= 0 {
		t.Fatalf("echo: %d round trips, p50 %v", len(rtts), reallink.Percentile(rtts, 50))
	}
	if n0.Delivered() != 0 {
		t.Fatalf("echo replies counted as deliveries: %d", n0.Delivered())
	}
	if st := n0.Stats(); st.Originated < frames+50 {
		t.Fatalf("node 0 originated %d frames, want at least %d", st.Originated, frames+50)
	}
}

// Frames lost on the wire are retransmitted by the links: all arrive.
func TestNodeForwardLossyLinks(t *testing.T) {
	n0, n1, n2 := memLine(t, mem.Config{Seed: 3, Drop: 0.02, Reorder: 0.02})
	converge(t, ids(0, 1, 2), n0, n1, n2)
	serve(t, n1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fl, err := reallink.NoCForward(ctx, n0, n2, make([]byte, 64), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if fl.Delivered != 1000 {
		t.Fatalf("flow over lossy links: %v", fl)
	}
}

// An echo to a node nobody drives is lost within its bound.
func TestEchoLost(t *testing.T) {
	n0, n1, n2 := memLine(t, mem.Config{Seed: 5})
	converge(t, ids(0, 1, 2), n0, n1, n2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := n0.Echo(ctx, 2, nil, 1)
	if !errors.Is(err, reallink.ErrEchoLost) {
		t.Fatalf("echo through an undriven middle: %v, want ErrEchoLost", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("lost echo took %v to report", d)
	}
}

func TestWaitRouteBound(t *testing.T) {
	n0, _, _ := memLine(t, mem.Config{Seed: 9})
	err := n0.WaitRoute(context.Background(), 42, 200*time.Millisecond)
	if !errors.Is(err, reallink.ErrNoRoute) {
		t.Fatalf("route to a node that does not exist: %v, want ErrNoRoute", err)
	}
}

func TestNewNodeChecks(t *testing.T) {
	if _, err := reallink.NewNode(reallink.NodeConfig{Self: 1}); err == nil {
		t.Fatal("a node without ports was accepted")
	}
	a, b, _ := mem.Pair(mem.Config{})
	defer a.Close()
	defer b.Close()
	if _, err := reallink.NewNode(reallink.NodeConfig{Self: noc.BroadcastNode, Ports: []noc.Port{a}}); err == nil {
		t.Fatal("the broadcast id was accepted as a node id")
	}
}

func TestPercentile(t *testing.T) {
	if reallink.Percentile(nil, 50) != 0 {
		t.Fatal("percentile of nothing")
	}
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {50, 51}, {99, 100}, {100, 100}} {
		if got := reallink.Percentile(ds, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestFlowRates(t *testing.T) {
	fl := reallink.Flow{Sent: 1000, Delivered: 900, Forwarded: 950, Elapsed: 2 * time.Second, SendTime: time.Second}
	if fl.Rate() != 450 || fl.ForwardRate() != 475 || fl.OfferedRate() != 1000 {
		t.Fatalf("rates %v %v %v", fl.Rate(), fl.ForwardRate(), fl.OfferedRate())
	}
	if l := fl.Loss(); l < 0.0999 || l > 0.1001 {
		t.Fatalf("loss %v", l)
	}
	var zero reallink.Flow
	if zero.Rate() != 0 || zero.Loss() != 0 || zero.OfferedRate() != 0 {
		t.Fatal("rates of an empty flow")
	}
}

func TestIPv4Plan(t *testing.T) {
	for _, c := range []struct {
		node, port int
		want       string
	}{
		{0, reallink.East, "10.77.0.1"},
		{1, reallink.West, "10.77.0.2"},
		{1, reallink.East, "10.77.1.1"},
		{2, reallink.West, "10.77.1.2"},
	} {
		if got := reallink.IPv4(c.node, c.port); got != netip.MustParseAddr(c.want) {
			t.Errorf("IPv4(%d, %d) = %v, want %s", c.node, c.port, got, c.want)
		}
	}
}

func TestCPUOfStat(t *testing.T) {
	// A command name with a space and a parenthesis, utime 250, stime 50.
	stat := "1234 (dpu (agent) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 100 0 0"
	got, err := reallink.CPUOfStat(stat)
	if err != nil || got != 3*time.Second {
		t.Fatalf("cpu of stat = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "1234 (x) S 1", "1234 (x) S 1 1 1 0 -1 0 0 0 0 0 u s"} {
		if _, err := reallink.CPUOfStat(bad); err == nil {
			t.Errorf("stat %q accepted", bad)
		}
	}
}

// A workspace left by a killed run: its agent (a stand-in process whose
// command line names its run dir) is killed and its fabric directory
// removed by the next OpenWorkspace; a second opener meanwhile is refused.
func TestWorkspaceSweep(t *testing.T) {
	base := t.TempDir()
	w, n, err := reallink.OpenWorkspace(base, 0)
	if err != nil || n != 0 {
		t.Fatalf("open empty workspace: %d swept, %v", n, err)
	}
	if _, _, err := reallink.OpenWorkspace(base, 200*time.Millisecond); !errors.Is(err, reallink.ErrBusy) {
		t.Fatalf("second open while held: %v, want ErrBusy", err)
	}
	fd, err := w.FabricDir("BenchmarkX/sub case")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(fd) != base || strings.ContainsAny(filepath.Base(fd), "/ ") {
		t.Fatalf("fabric dir %q", fd)
	}
	runDir := filepath.Join(fd, "node1")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command("sh", "-c", "sleep 30; : "+runDir)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	t.Cleanup(func() { agent.Process.Kill() })
	if err := os.WriteFile(filepath.Join(runDir, "agent.pid"), []byte(strconv.Itoa(agent.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another process that is no agent of this workspace: left alone.
	bystander := exec.Command("sleep", "30")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bystander.Process.Kill(); bystander.Wait() })
	other := filepath.Join(fd, "node2")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "agent.pid"), []byte(strconv.Itoa(bystander.Process.Pid)), 0o644)

	w.Close() // the run "dies": its lock goes
	w2, n, err := reallink.OpenWorkspace(base, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if n != 1 {
		t.Fatalf("swept %d fabrics, want 1", n)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatal("leftover agent exited cleanly instead of being killed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("leftover agent still runs")
	}
	if err := bystander.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("a process that is not the workspace's agent was killed: %v", err)
	}
	if _, err := os.Stat(fd); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("fabric dir left: %v", err)
	}
}
