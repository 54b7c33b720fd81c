package fabric_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
)

// skewStep is how much further each node's CLOCK_MONOTONIC runs than the
// previous node's: node i's time namespace adds i × skewStep (whole
// seconds: unshare(1) takes no fraction), so the true offset of node j's
// clock from node i's is (j - i) × skewStep.
const skewStep = 7 * time.Second

// TestClockRecoversTimeNamespaceOffsets runs a line of three agents on a
// veth fabric, each in a time namespace of its own with a known
// CLOCK_MONOTONIC offset, and checks that node 0's fabric clock recovers
// every other node's offset within its stated bound at every look. Beside
// it, over the same veth link, linuxptp's ptp4l (software timestamps, the
// clock left free running) measures the same pair of hosts' CLOCK_REALTIME,
// whose true offset is zero; the test reports both estimators' error
// against their truth.
func TestClockRecoversTimeNamespaceOffsets(t *testing.T) {
	privtest.Require(t)
	for _, tool := range []string{"unshare", "ptp4l", "pmc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(privtest.Env) == "require" {
				t.Fatalf("%s not found (.ci/run installs util-linux and linuxptp)", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
	dir := t.TempDir()
	// The fabric starts its agents through this wrapper: each in a new
	// time namespace whose monotonic clock is node × skewStep ahead.
	wrapper := filepath.Join(dir, "dpu-agent-timens")
	script := fmt.Sprintf("#!/bin/sh\n# dpu-agent in a time namespace of its own (the clock test's)\nnode=$(sed -n 's/^node = //p' \"$2\")\n"+
		"exec unshare --time --fork --kill-child=SIGTERM --monotonic $((node * %d)) %s \"$@\"\n",
		int(skewStep/time.Second), filepath.Join(binDir, "dpu-agent"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	fdir := filepath.Join(dir, "fabric")
	spec := fabric.Spec{Nodes: 3, Topo: "line", Dir: fdir, Links: "veth", Seed: 1, AgentPath: wrapper,
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second}
	st, err := fabric.Up(context.Background(), spec, testWriter{t})
	t.Cleanup(func() {
		if t.Failed() && st != nil {
			for _, a := range st.Agents {
				b, _ := os.ReadFile(a.Log)
				t.Logf("node %d log:\n%s", a.Node, b)
			}
		}
		if err := fabric.Down(fdir); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	// The agents really run with the offsets: their /proc/PID/timens_offsets.
	for _, a := range st.Agents {
		got := agentTimeOffsets(t, a.Pid)
		want := []string{"monotonic", strconv.Itoa(a.Node * int(skewStep/time.Second)), "0"}
		if !slices.ContainsFunc(strings.Split(got, "\n"), func(l string) bool { return slices.Equal(strings.Fields(l), want) }) {
			t.Fatalf("node %d's agent: timens_offsets %q, want %q", a.Node, got, want)
		}
	}

	// ptp4l over the link between nodes 0 and 1: master at node 0.
	var e0, e1 int = -1, -1
	for _, l := range st.Edges {
		if l.A == 0 && l.B == 1 {
			e0, e1 = int(l.PortA), int(l.PortB)
		} else if l.A == 1 && l.B == 0 {
			e0, e1 = int(l.PortB), int(l.PortA)
		}
	}
	if e0 < 0 {
		t.Fatalf("no link between nodes 0 and 1 in %+v", st.Edges)
	}
	slaveSock := startPTP(t, dir, st.Agents[0].Netns, veth.PortName(e0), "master", false)
	startPTP(t, dir, st.Agents[1].Netns, veth.PortName(e1), "slave", true)
	_ = slaveSock

	c, err := ctl.Dial(st.Agents[0].Ctl())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The estimator's window is 16 s; the bound holds from the first
	// sample. Look for 20 s.
	var ours = map[noc.NodeID][]float64{}
	var bounds = map[noc.NodeID][]float64{}
	var theirs []float64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		entries, err := c.Clock(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Self || e.Excluded {
				if e.Excluded {
					t.Errorf("node %d excluded: %s", e.Node, e.Reason)
				}
				continue
			}
			truth := time.Duration(e.Node) * skewStep
			errv := e.Offset - truth
			if errv > e.Bound || -errv > e.Bound {
				t.Errorf("node 0's estimate of node %d: %v ± %v, the truth is %v (off by %v)", e.Node, e.Offset, e.Bound, truth, errv)
			}
			if time.Until(deadline) < 10*time.Second { // the second half: the window has samples
				ours[e.Node] = append(ours[e.Node], math.Abs(float64(errv)))
				bounds[e.Node] = append(bounds[e.Node], float64(e.Bound))
			}
		}
		if off, ok := ptpOffset(slaveSockPath(dir, "slave")); ok && time.Until(deadline) < 10*time.Second {
			theirs = append(theirs, math.Abs(off))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(ours[1]) == 0 || len(ours[2]) == 0 {
		t.Fatalf("node 0's clock never knew nodes 1 and 2: %v", ours)
	}
	for _, n := range []noc.NodeID{1, 2} {
		t.Logf("fabric clock, node 0 → node %d (%d hops): |error| median %s max %s; bound median %s",
			n, n, ns(median(ours[n])), ns(slices.Max(ours[n])), ns(median(bounds[n])))
	}
	if len(theirs) == 0 {
		t.Errorf("ptp4l's slave reported no offset (pmc)")
	} else {
		t.Logf("ptp4l -S (free running), node 0 → node 1: |offsetFromMaster| median %s max %s over %d looks",
			ns(median(theirs)), ns(slices.Max(theirs)), len(theirs))
	}
}

func ns(v float64) string { return time.Duration(v).String() }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// agentTimeOffsets is the timens_offsets of the agent the wrapper started
// (the child of the unshare process pid).
func agentTimeOffsets(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		t.Fatalf("unshare %d has no child", pid)
	}
	out, err := os.ReadFile("/proc/" + f[0] + "/timens_offsets")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func slaveSockPath(dir, role string) string { return filepath.Join(dir, "ptp-"+role+".sock") }

// startPTP runs ptp4l on dev in network namespace ns: software
// timestamps, layer 2, 8 syncs a second, the clock never adjusted (the
// host's CLOCK_REALTIME is every namespace's). It ends with the test.
func startPTP(t *testing.T, dir, ns, dev, role string, slave bool) string {
	t.Helper()
	conf := filepath.Join(dir, "ptp-"+role+".conf")
	sock := slaveSockPath(dir, role)
	text := "[global]\nfree_running 1\ntime_stamping software\nnetwork_transport L2\nlogSyncInterval -3\n" +
		"logMinDelayReqInterval -3\nlogAnnounceInterval -2\nannounceReceiptTimeout 3\nuds_address " + sock + "\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-i", dev, "-f", conf, "-m"}
	if slave {
		args = append(args, "-s")
	}
	cmd := exec.Command("ptp4l", args...)
	logf, err := os.Create(filepath.Join(dir, "ptp-"+role+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := veth.StartIn(ns, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	return sock
}

// ptpOffset asks a ptp4l (its UNIX socket) for its offset from the master
// in ns; false before it has one.
func ptpOffset(sock string) (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pmc", "-u", "-s", sock, "-i", sock+".pmc", "-b", "0", "GET CURRENT_DATA_SET").Output()
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "offsetFromMaster" {
			v, err := strconv.ParseFloat(f[1], 64)
			return v, err == nil && v != 0
		}
	}
	return 0, false
}
