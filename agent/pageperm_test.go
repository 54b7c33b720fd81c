package agent_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/internal/privtest"
)

// TestHelperPageClient is not a test: TestPagePermissionsTravel runs this
// test binary as other users. It runs DPU_TEST_SCRIPT (";"-separated:
// "alloc MODE", "load GVA", "store GVA VALUE") against
// DPU_TEST_HOST_SOCKET and prints one line per command.
func TestHelperPageClient(t *testing.T) {
	sock := os.Getenv("DPU_TEST_HOST_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	ctx := ctxT(t, 30*time.Second)
	c, err := client.Dial(ctx, sock, client.Options{Name: "perm-helper"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	result := func(err error) string {
		var errno syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &errno):
			return "err " + errno.Error()
		}
		return "err " + err.Error()
	}
	for _, cmd := range strings.Split(os.Getenv("DPU_TEST_SCRIPT"), ";") {
		f := strings.Fields(cmd)
		switch {
		case len(f) == 2 && f[0] == "alloc":
			mode, _ := strconv.ParseUint(f[1], 8, 32)
			g, err := c.Alloc(ctx, 4096, os.FileMode(mode))
			if err == nil {
				_, err = c.Store64(ctx, g, 1000+mode)
			}
			fmt.Printf("alloc %s %s %v\n", f[1], result(err), g)
		case len(f) == 2 && f[0] == "load":
			g, err := gva.Parse(f[1])
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.Load64(ctx, g)
			fmt.Printf("load %s %s %d\n", f[1], result(err), v)
		case len(f) == 3 && f[0] == "store":
			g, err := gva.Parse(f[1])
			if err != nil {
				t.Fatal(err)
			}
			v, _ := strconv.ParseUint(f[2], 10, 64)
			_, err = c.Store64(ctx, g, v)
			fmt.Printf("store %s %s\n", f[1], result(err))
		default:
			t.Fatalf("bad command %q", cmd)
		}
	}
}

// TestPagePermissionsTravel: a page's owner and mode hold on every node.
// uid A allocates pages of modes 0600 and 0644 on node 0; on node 1 (a
// neighbour over an authenticated link) uid A reads its 0600 page, uid B
// is refused it, and uid B may read the 0644 page but not write it.
func TestPagePermissionsTravel(t *testing.T) {
	privtest.Require(t)
	run, _ := permPair(t)
	a := run(uidA, 0, "alloc 600", "alloc 644")
	p600, p644 := gvaOfAlloc(t, a[0]), gvaOfAlloc(t, a[1])
	want := func(got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	perm := syscall.EACCES.Error()
	got := run(uidA, 1, "load "+p600, "store "+p600+" 7", "load "+p600)
	want(got[0], "load "+p600+" ok 1384") // 1000 + 0o600
	want(got[1], "store "+p600+" ok")
	want(got[2], "load "+p600+" ok 7")
	got = run(uidB, 1, "load "+p600, "store "+p600+" 9", "load "+p644, "store "+p644+" 9")
	want(got[0], "load "+p600+" err "+perm+" 0")
	want(got[1], "store "+p600+" err "+perm)
	want(got[2], "load "+p644+" ok 1420") // 1000 + 0o644
	want(got[3], "store "+p644+" err "+perm)
	// and the same on the page's own node
	got = run(uidB, 0, "load "+p600, "load "+p644)
	want(got[0], "load "+p600+" err "+perm+" 0")
	want(got[1], "load "+p644+" ok 1420")
}

// Users of the permission tests: A allocates, B is another user; both
// are in permGroup, the agents' socket group.
const uidA, uidB, permGroup = 4242, 4343, 65534

// permPair starts two agents over an authenticated link, whose sockets
// users A and B may reach, and returns run, which runs a script of
// TestHelperPageClient as a user on a node and returns its answers, and
// the nodes.
func permPair(t *testing.T) (run func(uid uint32, node int, script ...string) []string, nodes []*liveNode) {
	cfgs, dir := securePair(t)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range cfgs {
		cfgs[i].SocketGroup = strconv.Itoa(permGroup)
		nd, _ := runAgent(t, cfgs[i])
		if err := os.Chmod(cfgs[i].RunDir, 0o755); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
	}
	waitRoutes(t, nodes)
	bin := testBinaryIn(t, dir)
	run = func(uid uint32, node int, script ...string) []string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestHelperPageClient$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DPU_TEST_HOST_SOCKET="+nodes[node].hostSocket(),
			"DPU_TEST_SCRIPT="+strings.Join(script, ";"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{permGroup}}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid %d on node %d: %v\n%s", uid, node, err, out)
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "alloc ") || strings.HasPrefix(l, "load ") || strings.HasPrefix(l, "store ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != len(script) {
			t.Fatalf("helper as uid %d on node %d: %d answers to %d commands\n%s", uid, node, len(lines), len(script), out)
		}
		return lines
	}
	return run, nodes
}

// gvaOfAlloc is the GVA of a helper's "alloc" answer.
func gvaOfAlloc(t *testing.T, line string) string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 4 || f[2] != "ok" {
		t.Fatalf("alloc: %q", line)
	}
	return f[3]
}
