package agent_test

import (
	"bufio"
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

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
)

// TestHelperSquat is not a test: TestSquattersCannotStopARestart runs
// this test binary as an unprivileged user to bind DPU_TEST_SQUAT (a UDP
// address; port 0 picks one, which the answer names) and hold it until the
// test kills it (a minute at most).
func TestHelperSquat(t *testing.T) {
	addr := os.Getenv("DPU_TEST_SQUAT")
	if addr == "" {
		t.Skip("helper process only")
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		var errno syscall.Errno
		errors.As(err, &errno)
		fmt.Printf("squat %s: %s\n", addr, errno.Error())
		return
	}
	defer c.Close()
	fmt.Printf("squat %s: held\n", c.LocalAddr())
	time.Sleep(time.Minute) // the test kills it once the agent tried the address
}

// privilegedUDPAddrs returns n loopback UDP addresses below the
// unprivileged port range, free a moment ago.
func privilegedUDPAddrs(t *testing.T, n int) []string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		t.Skipf("no ip_unprivileged_port_start: %v", err)
	}
	start, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || start < 700 {
		t.Skipf("net.ipv4.ip_unprivileged_port_start is %q: no privileged range to use", b)
	}
	var out []string
	for port := 600; port < start && len(out) < n; port++ {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			continue
		}
		c.Close()
		out = append(out, c.LocalAddr().String())
	}
	if len(out) < n {
		t.Skip("no free privileged ports")
	}
	return out
}

// TestSquattersCannotStopARestart: a
// node whose link ports are in the privileged range restarts while an
// unprivileged user tries to hold its address; on an unprivileged port
// the same user does hold it, and the agent's refusal names the holder's
// uid and the remedy.
func TestSquattersCannotStopARestart(t *testing.T) {
	privtest.Require(t)
	const nobody = 65534
	dir, err := os.MkdirTemp("", "agent-squat")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := testBinaryIn(t, dir)
	squat := func(addr string) (*exec.Cmd, chan string) {
		cmd := exec.Command(bin, "-test.run=^TestHelperSquat$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DPU_TEST_SQUAT="+addr)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			sent := false
			for sc.Scan() { // to the end, so the helper never blocks on a full pipe
				if l := sc.Text(); !sent && strings.HasPrefix(l, "squat ") {
					line <- l
					sent = true
				}
			}
			if !sent {
				line <- "(no answer)"
			}
		}()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, line
	}
	wait := func(line chan string) string {
		select {
		case l := <-line:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("the squatter said nothing")
		}
		return ""
	}

	addrs := privilegedUDPAddrs(t, 2)
	cfgs := make([]agent.Config, 2)
	for i := range cfgs {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(i)
		cfg.RunDir = filepath.Join(dir, fmt.Sprintf("node%d", i))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDP, Args: []string{addrs[i], addrs[1-i]}}}
		cfgs[i] = cfg
	}
	n0, _ := runAgent(t, cfgs[0])
	n1, stop1 := runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})
	stop1()
	_, line := squat(addrs[1])
	if got := wait(line); got != "squat "+addrs[1]+": "+syscall.EACCES.Error() {
		t.Fatalf("an unprivileged user on the dead node's privileged address: %q", got)
	}
	n1, _ = runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})

	// the same on an unprivileged port: the squatter holds it, and the
	// agent says who and what to do
	_, line = squat("127.0.0.1:0")
	got := wait(line)
	free, ok := strings.CutSuffix(strings.TrimPrefix(got, "squat "), ": held")
	if !ok {
		t.Fatalf("an unprivileged user on a free unprivileged address: %q", got)
	}
	cfg := cfgs[1]
	cfg.Node = 2
	cfg.RunDir = filepath.Join(dir, "node2")
	cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDP, Args: []string{free, addrs[0]}}}
	a, err := agent.New(cfg, nil)
	if err == nil {
		err = a.Run(ctxT(t, 5*time.Second))
	}
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "uid 65534") ||
		!strings.Contains(err.Error(), "ip_unprivileged_port_start") {
		t.Fatalf("agent on a squatted address: %v", err)
	}
}
