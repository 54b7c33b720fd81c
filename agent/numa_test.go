package agent_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/internal/numa"
)

// fakeSys is a sysfs of two nodes whose node 0 holds every CPU this
// process may run on (so binding to it is real on any host) and node 1 a
// CPU no host has; lo sits on node nicNode.
func fakeSys(t *testing.T, nodes int, nicNode int) fstest.MapFS {
	cpus, err := numa.Affinity()
	if err != nil {
		t.Fatal(err)
	}
	f := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	sys := fstest.MapFS{
		"devices/system/node/node0/cpulist": f(cpus.String() + "\n"),
		"devices/system/node/node0/meminfo": f("Node 0 MemTotal: 1048576 kB\nNode 0 MemFree: 524288 kB\n"),
		"class/net/lo/device/numa_node":     f(strconv.Itoa(nicNode) + "\n"),
	}
	if nodes > 1 {
		sys["devices/system/node/node1/cpulist"] = f("8000\n")
		sys["devices/system/node/node1/meminfo"] = f("Node 1 MemTotal: 1048576 kB\nNode 1 MemFree: 1024 kB\n")
	}
	return sys
}

// startNUMAAgent runs one agent with a udp port on the loopback device
// (so its NIC is lo) over sysfs sys, and returns its control client, its
// log and its metrics address.
func startNUMAAgent(t *testing.T, setting string, sys fstest.MapFS) (*ctl.Client, *syncBuffer, string) {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	cfg.Pages = 256
	cfg.MetricsListen = "127.0.0.1:0"
	addrs := agent.HoldUDP(t, 2)
	cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Args: []string{addrs[0], addrs[1]}}}
	var err error
	if cfg.NUMA, err = numa.ParseSetting(setting); err != nil {
		t.Fatal(err)
	}
	logBuf := &syncBuffer{}
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(logBuf, nil)), agent.WithSysfs(sys))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v\n%s", err, logBuf.String())
	case <-time.After(10 * time.Second):
		t.Fatal("agent not ready")
	}
	c, err := ctl.Dial(filepath.Join(cfg.RunDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, logBuf, "http://" + a.MetricsAddr().String() + "/metrics"
}

// TestNUMABindsToTheNICsNode: on a two-node host whose NIC (lo, the udp
// port's device) sits on node 0, numa = auto binds the agent there: dpuctl
// numa show and /metrics say so, with the address server:numa, and the
// page memory is placed on the node.
func TestNUMABindsToTheNICsNode(t *testing.T) {
	c, log, metricsURL := startNUMAAgent(t, "auto", fakeSys(t, 2, 0))
	n, err := c.NUMAShow(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n.Bound != 0 || n.Address != "0:0" || n.Setting != "auto" || n.PageMemory != 256*4096 || len(n.Nodes) != 2 {
		t.Fatalf("numa show: %+v", n)
	}
	if got := n.Nodes[0].NICs; len(got) != 1 || got[0] != "lo" {
		t.Fatalf("node 0's NICs: %v, want lo", got)
	}
	if n.Nodes[1].MemTotal != 1<<30 || n.Nodes[1].MemFree != 1<<20 || n.Nodes[1].CPUs != "8000" {
		t.Fatalf("node 1: %+v", n.Nodes[1])
	}
	if !strings.Contains(log.String(), "numa: bound") || !strings.Contains(log.String(), "address=0:0") {
		t.Fatalf("no binding in the log:\n%s", log.String())
	}
	m := get(t, metricsURL)
	for _, want := range []string{`dpu_numa_bound{address="0:0",numa="0"} 1`, `dpu_numa_nic{nic="lo",numa="0"} 1`,
		`dpu_numa_node_memory_free_bytes{numa="1"} 1.048576e+06`, `dpu_numa_page_memory_bytes 1.048576e+06`,
		`dpu_numa_node_cpus{cpus="8000",numa="1"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestNUMANotBound: one node, a NIC on no node, and numa = off bind
// nothing and say why; a node the host lacks is refused at start.
func TestNUMANotBound(t *testing.T) {
	for _, c := range []struct {
		setting      string
		nodes, nicAt int
		why          string
	}{
		{"auto", 1, 0, "one NUMA node"},
		{"auto", 2, -1, "no NUMA node known for NICs lo"},
		{"off", 2, 0, "numa = off"},
	} {
		cl, log, metricsURL := startNUMAAgent(t, c.setting, fakeSys(t, c.nodes, c.nicAt))
		n, err := cl.NUMAShow(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if n.Bound != -1 || n.Address != "" || n.PageMemory != 0 || !strings.Contains(n.Reason, c.why) {
			t.Errorf("%s on %d node(s): %+v, want not bound: %s", c.setting, c.nodes, n, c.why)
		}
		if !strings.Contains(log.String(), "numa: not bound") {
			t.Errorf("%s: the log does not say it is not bound:\n%s", c.setting, log.String())
		}
		if m := get(t, metricsURL); strings.Contains(m, "dpu_numa_bound{") {
			t.Errorf("%s: /metrics shows a binding", c.setting)
		}
	}
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	cfg.NUMA, _ = numa.ParseSetting("3")
	if a, err := agent.New(cfg, nil, agent.WithSysfs(fakeSys(t, 2, 0))); err == nil {
		a.Close()
		t.Fatal("numa = 3 on a two-node host was accepted")
	} else if !strings.Contains(err.Error(), "no node 3") {
		t.Fatalf("numa = 3: %v", err)
	}
}
