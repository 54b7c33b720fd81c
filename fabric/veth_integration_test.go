package fabric_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/node"
)

func upVeth(t *testing.T, nodes int, kind string) *fabric.State {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	spec := fabric.Spec{Nodes: nodes, Topo: kind, Dir: dir, Links: "veth", Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second}
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
		assertNoNamespaces(t, dir)
	})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	return st
}

// assertNoNamespaces checks that nothing of the fabric in dir is left.
func assertNoNamespaces(t *testing.T, dir string) {
	t.Helper()
	id, err := veth.IDFor(dir)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "dpu-f"+id+"-") {
			t.Errorf("namespace %s left after down", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(veth.PinBase, "dpu-f"+id)); err == nil {
		t.Errorf("bpffs pins of fabric %s left after down", id)
	}
}

func TestVethRingOverAFXDP(t *testing.T) {
	st := upVeth(t, 4, "ring")
	// every port of every agent is an AF_XDP port with the program attached
	for _, a := range st.Agents {
		out, err := exec.Command(filepath.Join(binDir, "dpuctl"), "-s", a.Ctl(), "link", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("dpuctl: %v\n%s", err, out)
		}
		if n := strings.Count(string(out), "kind xdp"); n != 2 {
			t.Fatalf("node %d: %d AF_XDP ports, want 2:\n%s", a.Node, n, out)
		}
	}
	for _, a := range st.Agents {
		out, err := exec.Command("ip", "-n", a.Netns, "link", "show").CombinedOutput()
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(out), "prog/xdp"); n != 2 {
			t.Fatalf("node %d: %d XDP programs:\n%s", a.Node, n, out)
		}
	}

	// link down -> reroute within the dead interval -> link up
	if err := st.SetLink(0, 1, false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !eventually(5*time.Second, func() bool { return routeHops(t, st, 0, 1) == 3 }) {
		t.Fatalf("no reroute around the downed link: hops %d", routeHops(t, st, 0, 1))
	}
	t.Logf("rerouted after %v", time.Since(start))
	if took := time.Since(start); took > 600*time.Millisecond+time.Second {
		t.Errorf("reroute took %v", took)
	}
	if err := st.SetLink(0, 1, true); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return routeHops(t, st, 0, 1) == 1 }) {
		t.Fatal("direct route not restored after link up")
	}

	// kill -9 of an agent -> neighbours drop it -> restart -> it rejoins
	if err := st.Kill(2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return routeHops(t, st, 1, 2) < 0 && routeHops(t, st, 3, 2) < 0 }) {
		t.Fatal("neighbours still route to the killed agent")
	}
	if err := st.Restart(2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.WaitConverged(ctx); err != nil {
		t.Fatalf("restarted agent did not rejoin: %v", err)
	}
}

// routeHops is the hop count of node from's route to dst, -1 without one.
func routeHops(t *testing.T, st *fabric.State, from, dst int) int {
	for _, r := range routes(t, st.Agents[from].Ctl()) {
		if r.Dst == noc.NodeID(dst) {
			return r.Hops
		}
	}
	return -1
}

// endpoint is an in-process agent at the end of a line: it counts the
// frames addressed to it, in order.
type endpoint struct {
	mu   sync.Mutex
	got  []uint64
	dups int
	seen map[uint64]bool
}

func (e *endpoint) HandleFrame(_ time.Duration, _ noc.PortID, f *noc.Frame, _ noc.Routes) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen[f.RequestID] {
		e.dups++
		return
	}
	e.seen[f.RequestID] = true
	e.got = append(e.got, f.RequestID)
}
func (e *endpoint) PortState(time.Duration, noc.PortID, bool, noc.NodeID, noc.Routes) {}
func (e *endpoint) Tick(time.Duration, noc.Routes)                                    {}
func (e *endpoint) NextDeadline() (time.Duration, bool)                               { return 0, false }
func (e *endpoint) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing                    { return dst }

func (e *endpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.got)
}

// TestVethExactlyOnceAcrossThreeHops: a 4-node line over veth AF_XDP with
// real agents in the middle and 5% of NoC frames dropped inside the XDP
// program on every link; 10,000 frames each way between the ends arrive
// complete, in order, exactly once.
func TestVethExactlyOnceAcrossThreeHops(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	edges := []veth.Edge{{A: 0, PortA: 0, B: 1, PortB: 0}, {A: 1, PortA: 1, B: 2, PortB: 0}, {A: 2, PortA: 1, B: 3, PortB: 0}}
	vf, err := veth.Up(veth.Spec{Dir: dir, Nodes: 4, Edges: edges})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := veth.Down(dir); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// real agent processes in the middle
	for _, i := range []int{1, 2} {
		rd := filepath.Join(dir, fmt.Sprintf("node%d", i))
		os.MkdirAll(rd, 0o755)
		logf, _ := os.Create(filepath.Join(rd, "agent.log"))
		defer logf.Close()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "dpu-agent"), "--node", fmt.Sprint(i), "--run-dir", rd,
			"--heartbeat", "50ms", "--dead-interval", "2s", "--xdp-pin-dir", vf.NodePinDir(i), "--port", "p0 xdp p0", "--port", "p1 xdp p1")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := vf.Start(i, cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	// in-process agents at the ends, ports opened inside their namespaces
	ends := map[int]*endpoint{0: {seen: map[uint64]bool{}}, 3: {seen: map[uint64]bool{}}}
	agents := map[int]*agent.Agent{}
	for _, i := range []int{0, 3} {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(i)
		cfg.RunDir = filepath.Join(dir, fmt.Sprintf("node%d", i))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 2*time.Second
		cfg.XDPPinDir = vf.NodePinDir(i)
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortXDP, Args: []string{"p0"}}}
		err := vf.Do(i, func() error {
			a, err := agent.New(cfg, nil, agent.WithHandler(ends[i]))
			agents[i] = a
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		go agents[i].Run(ctx)
	}
	reach := func(from, to int) bool {
		ok := false
		agents[from].Exec(func(c *node.Core) { _, _, ok = c.NextHop(noc.NodeID(to)) })
		return ok
	}
	if !eventually(30*time.Second, func() bool { return reach(0, 3) && reach(3, 0) }) {
		t.Fatal("ends do not route to each other")
	}
	// 5% drop on every link, both ways, inside the XDP programs
	for _, e := range edges {
		if err := veth.SetDrop(dir, e.A, e.B, 5); err != nil {
			t.Fatal(err)
		}
	}

	const n = 10000
	var wg sync.WaitGroup
	for _, pair := range [][2]int{{0, 3}, {3, 0}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, to := pair[0], pair[1]
			f := noc.Frame{Class: noc.ClassStore, Op: 1, Src: noc.NodeID(from), Dst: noc.NodeID(to), Payload: make([]byte, 64)}
			for i := 0; i < n; {
				var err error
				f.RequestID = uint64(i)
				agents[from].Exec(func(c *node.Core) { err = c.SendNode(&f) })
				if err != nil {
					time.Sleep(time.Millisecond) // backpressure: the window is full
					continue
				}
				i++
			}
		}()
	}
	wg.Wait()
	if !eventually(60*time.Second, func() bool { return ends[0].count() == n && ends[3].count() == n }) {
		t.Fatalf("delivered %d and %d of %d", ends[3].count(), ends[0].count(), n)
	}
	for _, i := range []int{0, 3} {
		e := ends[i]
		for k, id := range e.got {
			if id != uint64(k) {
				t.Fatalf("node %d: frame %d arrived as number %d (out of order)", i, id, k)
			}
		}
		if e.dups != 0 {
			t.Fatalf("node %d: %d duplicates", i, e.dups)
		}
	}
	var drops uint64
	for _, i := range []int{0, 3} {
		agents[i].Exec(func(c *node.Core) {
			for _, p := range c.Ports() {
				drops += p.Link.Retransmits
			}
		})
	}
	if drops == 0 {
		t.Fatal("no retransmission at the ends: the 5% drop did not act")
	}
	t.Logf("10,000 frames each way across 3 hops, %d retransmissions at the ends", drops)
}
