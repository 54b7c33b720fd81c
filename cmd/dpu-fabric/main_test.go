package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/fabrictest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"--version"}, {"up", "--help"}, {"down", "-h"}} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if err != nil && !errors.Is(err, errHelp) {
			t.Errorf("%v: %v", args, err)
		}
		if out.Len() == 0 || errOut.Len() != 0 {
			t.Errorf("%v: stdout %q stderr %q", args, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"up", "--bogus"}, &out, &errOut); err == nil || errors.Is(err, errHelp) || !strings.Contains(err.Error(), "usage:") {
		t.Errorf("bad flag: %v", err)
	}
	if !strings.Contains(usage, "--agent PATH") {
		t.Error("usage does not name --agent")
	}
}

// TestUpPlanned stands up a fabric of real agents over UDP loopback (no
// root) wired as the planner proposes: the saved wiring is the plan's and
// every agent's routes carry the plan's hop counts.
func TestUpPlanned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dpu-agent and runs a fabric")
	}
	const nodes, ports = 12, 3
	agent := fabrictest.Agent(t)
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	args := []string{"up", "--nodes", strconv.Itoa(nodes), "--ports", strconv.Itoa(ports), "--topo", "planned",
		"--dir", dir, "--agent", agent, "--timeout", "60s"}
	err := run(context.Background(), args, &out, &errOut)
	t.Cleanup(func() { fabric.Down(dir) })
	if err != nil {
		t.Fatalf("up: %v\n%s%s", err, out.String(), errOut.String())
	}
	p, err := topo.Plan(nodes, ports, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := fabric.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Topo != "planned" || !slices.Equal(st.Edges, p.Links) {
		t.Fatalf("fabric %s wired %v, plan %v", st.Topo, st.Edges, p.Links)
	}
	for i, a := range st.Agents {
		dist := p.Graph.Distances(noc.NodeID(i))
		var rs []ctl.Route
		deadline := time.Now().Add(20 * time.Second)
		for {
			rs = agentRoutes(t, a.Ctl())
			if hopsMatch(rs, dist) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !hopsMatch(rs, dist) {
			t.Fatalf("node %d routes %+v, plan distances %v", i, rs, dist)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"down", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("down: %v", err)
	}
}

func agentRoutes(t *testing.T, sock string) []ctl.Route {
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

// hopsMatch reports whether rs reaches every other node in dist's hops.
func hopsMatch(rs []ctl.Route, dist []int) bool {
	n := 0
	for _, r := range rs {
		if r.Port == "" {
			continue // the local node
		}
		if int(r.Dst) >= len(dist) || r.Hops != dist[r.Dst] {
			return false
		}
		n++
	}
	return n == len(dist)-1
}
