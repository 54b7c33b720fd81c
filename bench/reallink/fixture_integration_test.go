package reallink_test

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/bench/reallink"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/udp"
	"github.com/aitherion/dpu/noc/port/xdp"
)

// AgentEnv names a prebuilt dpu-agent binary to run instead of building
// one (a profiling build, or a release binary).
const AgentEnv = "DPU_BENCH_AGENT"

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
)

// workspace holds every fabric the tests bring up (root only); opening it
// removes what a killed earlier run left behind.
var workspace *reallink.Workspace

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		w, swept, err := reallink.OpenWorkspace(filepath.Join(os.TempDir(), "dpu-bench-reallink"), 2*time.Minute)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if swept > 0 {
			fmt.Fprintf(os.Stderr, "removed %d fabrics left by an earlier run in %s\n", swept, w.Dir())
		}
		workspace = w
	}
	code := m.Run()
	if workspace != nil {
		workspace.Close()
	}
	os.Exit(code)
}

// fabricDir is a new fabric directory in the workspace, removed at
// cleanup (after the fabric's own cleanups, registered later, ran).
func fabricDir(tb testing.TB) string {
	tb.Helper()
	privtest.Require(tb)
	if workspace == nil {
		tb.Fatal("no workspace: TestMain opens it when running as root")
	}
	d, err := workspace.FabricDir(tb.Name())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// agentBinary is $DPU_BENCH_AGENT, or dpu-agent built once per test
// binary into the workspace (without -race: the agent is measured, not
// checked).
func agentBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv(AgentEnv); p != "" {
		return p
	}
	if workspace == nil {
		tb.Fatal("no workspace: TestMain opens it when running as root")
	}
	buildOnce.Do(func() {
		builtPath = filepath.Join(workspace.Dir(), ".bin", "dpu-agent")
		build := func(vcs string) ([]byte, error) {
			return exec.Command("go", "build", "-buildvcs="+vcs, "-o", builtPath, "github.com/aitherion/dpu/cmd/dpu-agent").CombinedOutput()
		}
		out, err := build("true")
		if err != nil { // no VCS here: build without the stamp
			out, err = build("false")
		}
		if err != nil {
			buildErr = fmt.Errorf("building dpu-agent: %w\n%s", err, out)
			return
		}
		// Which tree the measured agent came from (others' uncommitted
		// work included), for the record next to the results.
		fmt.Fprintln(os.Stderr, "dpu-agent built:", buildVCS(builtPath))
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return builtPath
}

// buildVCS describes the revision a binary was built from.
func buildVCS(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, s := range bi.Settings {
		if strings.HasPrefix(s.Key, "vcs.") {
			parts = append(parts, s.Key+"="+s.Value)
		}
	}
	return strings.Join(parts, " ")
}

// line brings up an n-node line of namespaces and removes it at cleanup,
// checking that none of its namespaces is left.
func line(tb testing.TB, n int) *veth.Fabric {
	tb.Helper()
	dir := fabricDir(tb)
	f, err := reallink.Line(dir, n)
	if err != nil {
		tb.Fatalf("line of %d: %v", n, err)
	}
	tb.Cleanup(func() {
		if err := veth.Down(dir); err != nil {
			tb.Errorf("veth.Down: %v", err)
		}
		if left := namespacesOf(tb, f); len(left) > 0 {
			tb.Errorf("namespaces left behind: %v", left)
		}
	})
	return f
}

// namespacesOf lists the named namespaces of fabric f that exist.
func namespacesOf(tb testing.TB, f *veth.Fabric) []string {
	tb.Helper()
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "dpu-f"+f.ID+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// ipv4Line is line(n) made an IPv4 network (addresses, routes, forwarding).
func ipv4Line(tb testing.TB, n int) *veth.Fabric {
	tb.Helper()
	f := line(tb, n)
	if err := reallink.RouteIPv4(f); err != nil {
		tb.Fatal(err)
	}
	return f
}

// xdpNode is an in-process node with one AF_XDP port on device dev of
// node i (AF_PACKET is refused: it would measure something else).
func xdpNode(tb testing.TB, f *veth.Fabric, i int, dev string) *reallink.Node {
	tb.Helper()
	var p noc.Port
	var kind xdp.Kind
	err := f.Do(i, func() (err error) {
		p, kind, err = xdp.Open(dev, xdp.Options{Name: dev, TxBatch: 32})
		return err
	})
	if err != nil {
		tb.Fatalf("node %d: open %s: %v", i, dev, err)
	}
	if kind != xdp.KindXDP {
		p.Close()
		tb.Fatalf("node %d: %s opened as %v, want AF_XDP", i, dev, kind)
	}
	return newNode(tb, i, p)
}

// udpNode is an in-process node with one UDP port from local to remote,
// opened in node i's namespace.
func udpNode(tb testing.TB, f *veth.Fabric, i int, local, remote string) *reallink.Node {
	tb.Helper()
	var p *udp.Port
	if err := f.Do(i, func() (err error) { p, err = udp.Open(local, remote, 1500); return err }); err != nil {
		tb.Fatalf("node %d: UDP port: %v", i, err)
	}
	return newNode(tb, i, p)
}

func newNode(tb testing.TB, i int, p noc.Port) *reallink.Node {
	tb.Helper()
	n, err := reallink.NewNode(reallink.NodeConfig{Self: noc.NodeID(i), Ports: []noc.Port{p}, Seed: uint64(i + 1)})
	if err != nil {
		p.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	return n
}

// agentOn starts a dpu-agent process as node i and stops it at cleanup.
func agentOn(tb testing.TB, f *veth.Fabric, i int, poll bool, ports ...string) *reallink.Agent {
	tb.Helper()
	a, err := reallink.StartAgent(reallink.AgentConfig{
		Binary:    agentBinary(tb),
		Namespace: f.Namespace(i),
		Node:      noc.NodeID(i),
		RunDir:    filepath.Join(f.Dir, fmt.Sprintf("node%d", i)),
		Ports:     ports,
		Poll:      poll,
		Seed:      uint64(i + 1),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := a.Stop(); err != nil {
			tb.Errorf("stop agent %d: %v", i, err)
		}
	})
	return a
}

// converge drives the in-process nodes until each has a route to every
// node of want but itself (the agents converge on their own). Nodes that
// have their routes keep serving until all do, so the others' links stay
// up.
func converge(tb testing.TB, want []noc.NodeID, nodes ...*reallink.Node) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var routed sync.WaitGroup
	routed.Add(len(nodes))
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			var err error
			for _, id := range want {
				if id != n.Self() && err == nil {
					err = n.WaitRoute(ctx, id, 10*time.Second)
				}
			}
			routed.Done()
			if err == nil {
				err = n.Serve(ctx)
			}
			errs <- err
		}()
	}
	routed.Wait()
	cancel()
	for range nodes {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			tb.Fatal(err)
		}
	}
}
