package examples_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

var (
	binDir   string // dpu-agent and dpuctl, built for this run
	buildErr string // why the C examples could not be built
)

// TestMain builds the agent and dpuctl (with -race when the test runs with
// it) and the C examples once.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dpu-examples-test")
	if err != nil {
		panic(err)
	}
	binDir = dir
	args := []string{"build", "-o", dir + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "github.com/aitherion/dpu/cmd/dpu-agent", "github.com/aitherion/dpu/cmd/dpuctl",
		"github.com/aitherion/dpu/cmd/dpu-cc")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		panic("building dpu-agent and dpuctl: " + err.Error())
	}
	buildErr = buildExamples()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildExamples runs make here; it returns why it could not.
func buildExamples() string {
	for _, tool := range []string{"cc", "make", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found"
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return err.Error()
	}
	cmd := exec.Command("make", "-s", "DPUCC="+filepath.Join(binDir, "dpu-cc"))
	cmd.Env = append(os.Environ(), "DPU_CC_ROOT="+root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("make: %v\n%s", err, out)
	}
	return ""
}

// needExamples skips without a C toolchain, unless DPU_PRIV_TESTS=require
// (CI), which makes it a failure; a failed build always fails.
func needExamples(t *testing.T) {
	t.Helper()
	switch {
	case buildErr == "":
	case strings.HasPrefix(buildErr, "make:") || os.Getenv("DPU_PRIV_TESTS") == "require":
		t.Fatal(buildErr)
	default:
		t.Skip(buildErr)
	}
}

// iterations is how many increments each process makes: the examples'
// default, unless DPU_EXAMPLES_ITERATIONS says otherwise.
func iterations(t *testing.T) int {
	if s := os.Getenv("DPU_EXAMPLES_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DPU_EXAMPLES_ITERATIONS=%q", s)
		}
		return n
	}
	return 10000
}

// up starts a fabric of real agents; it is taken down when the test ends.
func up(t *testing.T, nodes int, kind string) *fabric.State {
	t.Helper()
	dir := t.TempDir()
	spec := fabric.Spec{Nodes: nodes, Topo: kind, Dir: dir, Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second}
	var log bytes.Buffer
	st, err := fabric.Up(context.Background(), spec, &log)
	t.Cleanup(func() {
		if err := fabric.Down(dir); err != nil {
			t.Errorf("down: %v", err)
		}
		if t.Failed() {
			for i := range nodes {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node%d", i), "agent.log"))
				t.Logf("node %d log:\n%s", i, b)
			}
		}
	})
	if err != nil {
		t.Fatalf("up: %v\n%s", err, log.String())
	}
	return st
}

func hostSocket(st *fabric.State, node int) string {
	return filepath.Join(st.Agents[node].RunDir, "dpu0.sock")
}

// dpuctl runs dpuctl mem against a node and returns its stdout.
func dpuctl(t *testing.T, st *fabric.State, node int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "dpuctl"), append([]string{"-d", hostSocket(st, node), "mem"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dpuctl mem %v on node %d: %v\n%s", args, node, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// runCounter allocates a counter on node a, runs the example prog on nodes
// a and b at once, and checks that the counter ends at exactly twice the
// iterations, read through both nodes.
func runCounter(t *testing.T, st *fabric.State, prog string, a, b int) {
	needExamples(t)
	n := iterations(t)
	g := dpuctl(t, st, a, "alloc", "4096")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type result struct {
		node int
		out  string
		err  error
	}
	results := make(chan result, 2)
	start := time.Now()
	for _, node := range []int{a, b} {
		cmd := exec.CommandContext(ctx, filepath.Join("build", prog), g, strconv.Itoa(n), "2")
		cmd.Env = append(os.Environ(), "DPU_SOCKET="+hostSocket(st, node))
		go func() {
			out, err := cmd.CombinedOutput()
			results <- result{node, string(out), err}
		}()
	}
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Errorf("%s on node %d: %v\n%s", prog, r.node, r.err, r.out)
			continue
		}
		if !strings.Contains(r.out, fmt.Sprintf("%s: %d increments", prog, n)) {
			t.Errorf("%s on node %d printed %q", prog, r.node, r.out)
		}
		t.Logf("node %d: %s", r.node, strings.TrimSpace(r.out))
	}
	took := time.Since(start)
	for _, node := range []int{a, b} {
		got := dpuctl(t, st, node, "read", g, "--u64")
		if got != strconv.Itoa(2*n) {
			t.Errorf("counter read through node %d: %s, want %d", node, got, 2*n)
		}
	}
	t.Logf("%s: 2 x %d increments from nodes %d and %d in %v (race-built agents: %v)", prog, n, a, b,
		took.Round(time.Millisecond), raceEnabled)
}

// TestCountersTwoNodes: the examples on the two nodes of a 2-node fabric
// (one link: a ring needs three nodes), the C11 one built with dpu-cc on
// gcc and on clang.
func TestCountersTwoNodes(t *testing.T) {
	st := up(t, 2, "line")
	t.Run("cas", func(t *testing.T) { runCounter(t, st, "counter_cas", 0, 1) })
	t.Run("lock", func(t *testing.T) { runCounter(t, st, "counter_lock", 0, 1) })
	for _, cc := range []string{"gcc", "clang"} {
		t.Run("c11-"+cc, func(t *testing.T) { runC11(t, st, "c11_shared."+cc+"-dpu", 0, -1, 0, 1) })
	}
}

// c11Iterations is how many rounds each C11 party makes (each costs a few
// round trips to the page's owner): DPU_EXAMPLES_C11_ITERATIONS, else 60.
func c11Iterations(t *testing.T) int {
	if s := os.Getenv("DPU_EXAMPLES_C11_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DPU_EXAMPLES_C11_ITERATIONS=%q", s)
		}
		return n
	}
	return 60
}

var acquisitions = regexp.MustCompile(`(\d+) ownership acquisitions`)

// runC11 runs the unmodified C11 program built with dpu-cc as two
// processes, party 0 on node a and party 1 on node b, on two pages
// allocated on node home (with blockHome >= 0, the second page, the block
// the message pass publishes, is allocated on node blockHome): both must
// exit 0, the last to finish must have verified the exact result, and the
// counter must read 2 x iterations through the node.
func runC11(t *testing.T, st *fabric.State, prog string, home, blockHome, a, b int) {
	needExamples(t)
	if _, err := os.Stat(filepath.Join("build", prog)); err != nil {
		if os.Getenv("DPU_PRIV_TESTS") == "require" {
			t.Fatalf("%s not built: %v", prog, err)
		}
		t.Skipf("%s not built (no such compiler?)", prog)
	}
	n := c11Iterations(t)
	g, args := dpuctl(t, st, home, "alloc", "8192"), []string(nil)
	if blockHome >= 0 {
		g = dpuctl(t, st, home, "alloc", "4096")
		args = []string{dpuctl(t, st, blockHome, "alloc", "4096")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type result struct {
		party int
		out   string
		err   error
	}
	results := make(chan result, 2)
	start := time.Now()
	for party, node := range []int{a, b} {
		cmd := exec.CommandContext(ctx, filepath.Join("build", prog), append([]string{"2", strconv.Itoa(n), g, strconv.Itoa(party)}, args...)...)
		cmd.Env = append(os.Environ(), "DPU_SOCKET="+hostSocket(st, node))
		go func() {
			out, err := cmd.CombinedOutput()
			results <- result{party, string(out), err}
		}()
	}
	verified := 0
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Errorf("%s party %d: %v\n%s", prog, r.party, r.err, r.out)
		}
		verified += strings.Count(r.out, "c11_shared: verified:")
		t.Logf("party %d: %s", r.party, strings.TrimSpace(r.out))
		// Party 0 writes the message on both pages: away from their home
		// node, its plain writes must have taken their ownership.
		if m := acquisitions.FindStringSubmatch(r.out); m == nil {
			t.Errorf("party %d printed no mapping counters", r.party)
		} else if n, _ := strconv.Atoi(m[1]); r.party == 0 && a != home && n < 2 {
			t.Errorf("party 0 on node %d (pages of node %d) took ownership %d times, want 2 or more", a, home, n)
		}
	}
	if verified != 1 {
		t.Errorf("%d parties printed a verified result, want 1", verified)
	}
	page, err := gva.Parse(g)
	if err != nil {
		t.Fatal(err)
	}
	counter := page
	counter.Lo += 16 // struct page: arrived, finished, counter
	for _, node := range []int{a, b} {
		if got := dpuctl(t, st, node, "read", counter.String(), "--u64"); got != strconv.Itoa(2*n) {
			t.Errorf("counter read through node %d: %s, want %d", node, got, 2*n)
		}
	}
	t.Logf("%s: 2 parties x %d rounds on nodes %d and %d in %v", prog, n, a, b, time.Since(start).Round(time.Millisecond))
}

// TestC11SingleHost: the same C11 source built with plain cc runs its
// parties as processes of this host over an anonymous shared page.
func TestC11SingleHost(t *testing.T) {
	needExamples(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join("build", "c11_shared"), "3", "5000").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "c11_shared: verified:") {
		t.Fatalf("c11_shared: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}

// TestCountersFourNodeRing: the examples on nodes 0 and 2 of a 4-node
// ring, two hops apart.
func TestCountersFourNodeRing(t *testing.T) {
	st := up(t, 4, "ring")
	t.Run("cas", func(t *testing.T) { runCounter(t, st, "counter_cas", 0, 2) })
	t.Run("lock", func(t *testing.T) { runCounter(t, st, "counter_lock", 0, 2) })
	// Pages made on node 1, parties on nodes 0 and 2: every plain write
	// takes its page's ownership across the fabric, and the message of the
	// release/acquire pass crosses pages owned away from their home.
	t.Run("c11-gcc", func(t *testing.T) { runC11(t, st, "c11_shared.gcc-dpu", 1, -1, 0, 2) })
}

// TestC11CrossPath: the C11 program on a 5-node ring, party 0 on node 0
// and party 1 on node 1, its first page made on node 1 and the block its
// release publishes on node 3. Both parties map the block first through
// its home (node 1 below node 3 by node 2, node 0 by node 4); party 0's
// writes make node 0 the block's owner, so the block's updates reach node
// 1 by 0-4-3-2-1 while the release on the first page takes 0-1. Party 1
// must still see every round's block after its acquire.
func TestC11CrossPath(t *testing.T) {
	st := up(t, 5, "ring")
	for _, cc := range []string{"gcc", "clang"} {
		t.Run("c11-"+cc, func(t *testing.T) { runC11(t, st, "c11_shared."+cc+"-dpu", 1, 3, 0, 1) })
	}
}

// TestGoMmapTwoNodes: Go programs' shared memory (client.Mmap) on the two
// nodes of a fabric of real agents: a record of two pages written with
// plain stores under a lock of its first page, alternately on each node,
// is read back whole under the lock on the other.
func TestGoMmapTwoNodes(t *testing.T) {
	st := up(t, 2, "line")
	ctx := context.Background()
	var cs [2]*client.Client
	var as [2]*client.Area
	for i := range cs {
		c, err := client.Dial(ctx, hostSocket(st, i), client.Options{Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	g, err := cs[0].Alloc(ctx, 2*4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	for i := range as {
		a, err := cs[i].Mmap(ctx, g, 2*4096, true)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Munmap(ctx)
		as[i] = a
	}
	const steps = 20
	for s := range steps {
		c, m := cs[s%2], as[s%2].Bytes()
		if err := c.Lock(ctx, g, 10*time.Second); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		if v := binary.LittleEndian.Uint64(m[8:]); v != uint64(s) {
			t.Fatalf("step %d on node %d: counter %d under the lock", s, s%2, v)
		}
		for w := range 64 { // the second page: published by the unlock too
			if v := binary.LittleEndian.Uint64(m[4096+8*w:]); s > 0 && v != uint64(s*1000+w) {
				t.Fatalf("step %d on node %d: word %d of the second page is %d", s, s%2, w, v)
			}
			binary.LittleEndian.PutUint64(m[4096+8*w:], uint64((s+1)*1000+w))
		}
		binary.LittleEndian.PutUint64(m[8:], uint64(s+1))
		if err := c.Unlock(ctx, g); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
	}
	// Under the lock every node reads the last unlock's counter. A plain
	// load is the path-cache protocol's, weakly ordered: the other node's
	// replica may lag its last unlock a moment, and converges to it.
	counter := gva.GVA{Hi: g.Hi, Lo: g.Lo + 8}
	for i, c := range cs {
		if err := c.Lock(ctx, g, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		v, err := c.Load64(ctx, counter)
		if err != nil || v != steps {
			t.Fatalf("counter through node %d under its lock: %d, %v", i, v, err)
		}
		if err := c.Unlock(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cs {
		var v uint64
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err = c.Load64(ctx, counter)
			if err == nil && v == steps || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil || v != steps {
			t.Fatalf("counter through node %d did not converge: %d, %v", i, v, err)
		}
	}
	for i, a := range as {
		t.Logf("node %d: %+v", i, a.Stats())
	}
}
