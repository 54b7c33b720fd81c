package fabric_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

var binDir string

// TestMain builds the real binaries once: these tests run real agent
// processes over UDP loopback.
func TestMain(m *testing.M) {
	if os.Getenv("DPU_TEST_BIND") != "" {
		os.Exit(m.Run()) // a helper process (TestHelperBind): nothing to build
	}
	dir, err := os.MkdirTemp("", "dpu-fabric-test")
	if err != nil {
		panic(err)
	}
	binDir = dir
	args := []string{"build", "-o", dir + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "github.com/aitherion/dpu/cmd/dpu-agent", "github.com/aitherion/dpu/cmd/dpuctl")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		panic("building dpu-agent and dpuctl: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func up(t *testing.T, nodes int, kind string) *fabric.State {
	t.Helper()
	dir := t.TempDir()
	spec := fabric.Spec{Nodes: nodes, Topo: kind, Dir: dir, Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second}
	st, err := fabric.Up(context.Background(), spec, testWriter{t})
	t.Cleanup(func() {
		if err := fabric.Down(dir); err != nil {
			t.Errorf("down: %v", err)
		}
		if t.Failed() {
			for i := 0; i < nodes; i++ {
				b, _ := os.ReadFile(filepath.Join(dir, "node"+strconv.Itoa(i), "agent.log"))
				t.Logf("node %d log:\n%s", i, b)
			}
		}
	})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	return st
}

func routes(t *testing.T, sock string) []ctl.Route {
	t.Helper()
	c, err := ctl.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := c.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestSmallWorldFabric: 8 agents on a small-world wiring converge, every
// agent lists 7 destinations with the hop counts of the wiring; killing one
// agent makes the others drop its routes within the dead interval.
func TestSmallWorldFabric(t *testing.T) {
	st := up(t, 8, "smallworld")
	g, err := topo.Generate("smallworld", 8, topo.Options{Ports: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	hopsRight := func() bool {
		for i, a := range st.Agents {
			dist := g.Distances(noc.NodeID(i))
			rs := routes(t, a.Ctl())
			if len(rs) != 7 {
				return false
			}
			for _, r := range rs {
				if r.Hops != dist[r.Dst] {
					return false
				}
			}
		}
		return true
	}
	if !eventually(10*time.Second, hopsRight) {
		for _, a := range st.Agents {
			t.Logf("node %d routes %+v", a.Node, routes(t, a.Ctl()))
		}
		t.Fatal("hop counts do not match the wiring")
	}

	victim := 3
	killed := time.Now()
	if err := st.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	dropped := func() bool {
		for _, a := range st.Agents {
			if a.Node == victim {
				continue
			}
			for _, r := range routes(t, a.Ctl()) {
				if r.Dst == noc.NodeID(victim) {
					return false
				}
			}
		}
		return true
	}
	if !eventually(5*time.Second, dropped) {
		t.Fatal("routes to the killed agent remain")
	}
	took := time.Since(killed)
	t.Logf("routes to killed node %d dropped everywhere after %v (dead interval 600ms)", victim, took)
	if took > 600*time.Millisecond+time.Second {
		t.Errorf("routes dropped after %v, beyond the dead interval plus a second", took)
	}
	if err := st.Restart(victim); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.WaitConverged(ctx); err != nil {
		t.Fatalf("restarted agent did not rejoin: %v", err)
	}
}

// TestDownStopsEverything: down ends every agent's process (checked with
// signal 0: the agents are this process's children, reaped by down) and
// says so only when it did; up then works again in the same directory.
func TestDownStopsEverything(t *testing.T) {
	st := up(t, 2, "line")
	if err := fabric.Down(st.Dir()); err != nil {
		t.Errorf("down: %v", err)
	}
	st2, err := fabric.Load(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range st.Agents {
		if st2.Alive(i) || !st2.Agents[i].Stopped {
			t.Errorf("agent %d after down: alive %v, recorded stopped %v", i, st2.Alive(i), st2.Agents[i].Stopped)
		}
		if err := syscall.Kill(a.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("agent %d (pid %d) after down: signal 0 gives %v, want ESRCH", i, a.Pid, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if _, err := fabric.Up(context.Background(), fabric.Spec{Nodes: 2, Topo: "line", Dir: st.Dir(), AgentPath: filepath.Join(binDir, "dpu-agent")}, testWriter{t}); err != nil {
		t.Fatalf("up again in the same dir: %v", err)
	}
}

func eventually(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// TestMultiChannelFabric: a ring whose links stripe over two UDP channels
// each converges, and every link lists both channels up.
func TestMultiChannelFabric(t *testing.T) {
	spec := fabric.Spec{Nodes: 3, Topo: "ring", Channels: 2}
	checkChannels(t, upChannels(t, spec), 2, "")
}

// TestQueueChannelFabric: over veth, the channels are the devices' queues
// (AF_XDP multi-queue): a ring whose links stripe over four queues each
// converges, every link lists four channels up, named after their queues,
// and carries data on each.
func TestQueueChannelFabric(t *testing.T) {
	privtest.Require(t)
	spec := fabric.Spec{Nodes: 3, Topo: "ring", Channels: 4, Links: "veth"}
	checkChannels(t, upChannels(t, spec), 4, "/q")
}

func upChannels(t *testing.T, spec fabric.Spec) *fabric.State {
	t.Helper()
	dir := t.TempDir()
	spec.Dir, spec.Seed, spec.AgentPath = dir, 1, filepath.Join(binDir, "dpu-agent")
	spec.Heartbeat, spec.DeadInterval, spec.Timeout = 50*time.Millisecond, 600*time.Millisecond, 60*time.Second
	st, err := fabric.Up(context.Background(), spec, testWriter{t})
	t.Cleanup(func() {
		if t.Failed() && st != nil {
			for _, a := range st.Agents {
				b, _ := os.ReadFile(a.Log)
				t.Logf("node %d log:\n%s", a.Node, b)
			}
		}
		if err := fabric.Down(dir); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	return st
}

// checkChannels waits until every agent's two links list k channels up
// (named with nameHas when it is not empty) that have each carried data.
func checkChannels(t *testing.T, st *fabric.State, k int, nameHas string) {
	t.Helper()
	for _, a := range st.Agents {
		c, err := ctl.Dial(a.Ctl())
		if err != nil {
			t.Fatal(err)
		}
		var last []ctl.Link
		ok := eventually(10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			links, err := c.Links(ctx)
			if err != nil || len(links) != 2 {
				return false
			}
			last = links
			for _, l := range links {
				if len(l.Channels) != k {
					return false
				}
				for _, ch := range l.Channels {
					if ch.State != ctl.LinkUp || !strings.Contains(ch.Name, nameHas) || counter(ch.Counters, "rx_datagrams") == 0 {
						return false
					}
				}
			}
			return true
		})
		c.Close()
		if !ok {
			t.Fatalf("node %d: links do not list %d channels up, each with data: %+v", a.Node, k, last)
		}
	}
}

func counter(cs []ctl.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestRestartFailsWhenTheAgentDoesNotComeUp: fault … restart of an agent
// whose configuration no longer starts (here, a key the agent does not
// know) reports the failure with the end of the agent's log, and records
// the agent as stopped; a restart that comes up returns once its control
// socket answers.
func TestRestartFailsWhenTheAgentDoesNotComeUp(t *testing.T) {
	st := up(t, 2, "line")
	if err := st.Restart(1); err != nil {
		t.Fatalf("restart of a good agent: %v", err)
	}
	if _, err := routeCountOf(t, st.Agents[1].Ctl()); err != nil {
		t.Fatalf("the restarted agent does not answer: %v", err)
	}
	f, err := os.OpenFile(st.Agents[1].Config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("no-such-key = 1\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = st.Restart(1)
	if err == nil || !strings.Contains(err.Error(), "exited as it started") || !strings.Contains(err.Error(), "no-such-key") {
		t.Fatalf("restart of an agent that cannot start: %v, want a failure quoting its log", err)
	}
	st2, err := fabric.Load(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !st2.Agents[1].Stopped {
		t.Fatal("the agent that did not come up is recorded as running")
	}
}

func routeCountOf(t *testing.T, sock string) (int, error) {
	c, err := ctl.Dial(sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := c.Routes(ctx)
	return len(rs), err
}
