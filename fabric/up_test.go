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

	"github.com/aitherion/dpu/ctl"
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
	if len(err.Error()) > 300 || !strings.Contains(err.Error(), "nodes not converged: node 0 (") || !strings.Contains(err.Error(), "more") {
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

// TestUpConvergesToShortestRoutes: when up says "converged", every agent
// of a ring already routes to every other node the shorter way round (up
// used to return as soon as every route table was full, while a node
// could still route to its ring neighbour through the other three).
func TestUpConvergesToShortestRoutes(t *testing.T) {
	for run := range 3 {
		t.Run(strconv.Itoa(run), func(t *testing.T) { shortestAfterUp(t, run) })
	}
}

// shortestAfterUp is one run of TestUpConvergesToShortestRoutes.
func shortestAfterUp(t *testing.T, run int) {
	st := up(t, 4, "ring")
	n := len(st.Agents)
	for i, a := range st.Agents {
		c, err := ctl.Dial(a.Ctl())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rs, err := c.Routes(ctx)
		cancel()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			d := (int(r.Dst) - i + n) % n
			if want := min(d, n-d); r.Hops != want {
				t.Errorf("run %d: right after up, node %d routes to node %d through node %d in %d hops; the ring's shortest is %d",
					run, i, r.Dst, r.NextHop, r.Hops, want)
			}
		}
	}
}

// TestUpReplace: up --replace with options that cannot be built (a ring of
// two: make run NODES=2) leaves the running fabric alone; with good ones
// it stops the old fabric and starts the new one.
func TestUpReplace(t *testing.T) {
	st := up(t, 3, "ring")
	spec := fabric.Spec{Nodes: 2, Topo: "ring", Dir: st.Dir(), Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second, Replace: true}
	var log bytes.Buffer
	if _, err := fabric.Up(context.Background(), spec, &log); err == nil || !strings.Contains(err.Error(), "at least 3 nodes") {
		t.Fatalf("up --replace of a ring of 2: %v", err)
	}
	for i, a := range st.Agents {
		if !st.Alive(i) {
			t.Fatalf("agent %d (pid %d) stopped by an up that was refused", i, a.Pid)
		}
	}
	spec.Topo = "line"
	st2, err := fabric.Up(context.Background(), spec, &log)
	if err != nil {
		t.Fatalf("up --replace of a line of 2: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "stopped the fabric that ran in") {
		t.Errorf("log: %s", log.String())
	}
	for _, a := range st.Agents {
		deadline := time.Now().Add(5 * time.Second)
		for !gone(a.Pid) {
			if time.Now().After(deadline) {
				t.Fatalf("the replaced fabric's agent %d (pid %d) still runs", a.Node, a.Pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(st2.Agents) != 2 || !st2.Alive(0) || !st2.Alive(1) {
		t.Fatalf("the new fabric: %+v", st2.Agents)
	}
}
