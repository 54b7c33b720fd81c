package veth

import (
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

	"github.com/aitherion/dpu/internal/privtest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// crashEnv makes a re-executed test binary bring a fabric up and die
// (os.Exit, no cleanup) right after recording the n-th object.
const crashEnv = "DPU_VETH_TEST_CRASH_AFTER"

func TestMain(m *testing.M) {
	if n := os.Getenv(crashEnv); n != "" {
		after, _ := strconv.Atoi(n)
		afterRecord = func(k int) {
			if k == after {
				os.Exit(3)
			}
		}
		_, err := Up(ring3(os.Getenv("DPU_VETH_TEST_DIR")))
		fmt.Fprintln(os.Stderr, "Up returned instead of crashing:", err)
		os.Exit(4)
	}
	os.Exit(m.Run())
}

// ring3 is three nodes in a ring, each using ports 0 and 1: 3 namespaces,
// 3 veth pairs, 1 pin directory.
func ring3(dir string) Spec {
	return Spec{Dir: dir, Nodes: 3, Edges: []Edge{{0, 0, 1, 1}, {1, 0, 2, 1}, {2, 0, 0, 1}}}
}

// namespacesOf lists the named namespaces of fabric id.
func namespacesOf(t *testing.T, id string) []string {
	t.Helper()
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "dpu-f"+id+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// portsIn lists the p* devices of the namespace behind h.
func portsIn(t *testing.T, h netns.NsHandle) []netlink.Link {
	t.Helper()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	links, err := nh.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []netlink.Link
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "p") {
			out = append(out, l)
		}
	}
	return out
}

// assertGone checks that nothing of fabric f is left: no namespace, no
// veth in the namespaces held open by held, no pins, no state file.
func assertGone(t *testing.T, f *Fabric, held []netns.NsHandle) {
	t.Helper()
	if ns := namespacesOf(t, f.ID); len(ns) != 0 {
		t.Errorf("namespaces left: %v", ns)
	}
	for i, h := range held {
		if ps := portsIn(t, h); len(ps) != 0 {
			t.Errorf("node %d still has %d veth devices", i, len(ps))
		}
	}
	if _, err := os.Stat(f.PinRoot()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin root left: %v", err)
	}
	if _, err := os.Stat(statePath(f.Dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left: %v", err)
	}
}

// hold opens every node's namespace so the test can look inside after the
// names are gone.
func hold(t *testing.T, f *Fabric) []netns.NsHandle {
	t.Helper()
	var hs []netns.NsHandle
	for i := range f.Nodes {
		h, err := netns.GetFromName(f.Namespace(i))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		t.Cleanup(func() { h.Close() })
	}
	return hs
}

func TestUpDown(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	f, err := Up(ring3(dir))
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() { Down(dir) })
	if _, err := Up(ring3(dir)); !errors.Is(err, ErrFabricExists) {
		t.Fatalf("second Up: %v, want ErrFabricExists", err)
	}
	if ns := namespacesOf(t, f.ID); len(ns) != 3 {
		t.Fatalf("namespaces %v, want 3", ns)
	}
	held := hold(t, f)
	for i, h := range held {
		ports := portsIn(t, h)
		if len(ports) != 2 {
			t.Fatalf("node %d has %d ports, want 2", i, len(ports))
		}
		for _, l := range ports {
			a := l.Attrs()
			if l.Type() != "veth" || a.MTU != DefaultMTU || a.Flags&net.FlagUp == 0 {
				t.Errorf("node %d %s: type %s MTU %d flags %v", i, a.Name, l.Type(), a.MTU, a.Flags)
			}
		}
	}
	for i := range f.Nodes {
		if _, err := os.Stat(f.NodePinDir(i)); err != nil {
			t.Errorf("pin dir of node %d: %v", i, err)
		}
	}
	loaded, err := Load(dir)
	if err != nil || loaded.ID != f.ID || len(loaded.Edges) != 3 || loaded.MTU != DefaultMTU {
		t.Fatalf("Load = %+v, %v", loaded, err)
	}
	if err := Down(dir); err != nil {
		t.Fatalf("Down: %v", err)
	}
	assertGone(t, f, held)
	if err := Down(dir); err != nil {
		t.Fatalf("second Down: %v", err)
	}
}

// Up dies right after recording its n-th object (before creating it):
// Down still removes exactly what was created, for every n.
func TestDownAfterCrash(t *testing.T) {
	privtest.Require(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const objects = 3 + 3 + 1 // namespaces, veth pairs, pin root
	for n := 1; n <= objects; n++ {
		dir := t.TempDir()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), crashEnv+"="+strconv.Itoa(n), "DPU_VETH_TEST_DIR="+dir)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("crash after %d: %v\n%s", n, err, out)
		}
		f, err := Load(dir)
		if err != nil {
			t.Fatalf("crash after %d: %v", n, err)
		}
		st, _ := readState(f.Dir)
		if len(st.Objects) != n {
			t.Fatalf("crash after %d: %d objects recorded", n, len(st.Objects))
		}
		created := min(n-1, 3)
		if ns := namespacesOf(t, f.ID); len(ns) != created {
			t.Fatalf("crash after %d: %d namespaces exist, want %d", n, len(ns), created)
		}
		var held []netns.NsHandle
		for i := range created {
			h, err := netns.GetFromName(f.Namespace(i))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			held = append(held, h)
		}
		if err := Down(dir); err != nil {
			t.Fatalf("Down after crash %d: %v", n, err)
		}
		assertGone(t, f, held)
	}
}

func TestStartAndDoIn(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	f, err := Up(Spec{Dir: dir, Nodes: 2, Edges: []Edge{{0, 0, 1, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Down(dir) })
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, f.Namespace(1)), &want); err != nil {
		t.Fatal(err)
	}
	nsID := fmt.Sprintf("net:[%d]", want.Ino)

	cmd := exec.Command("readlink", "/proc/self/ns/net")
	out := new(strings.Builder)
	cmd.Stdout = out
	if err := f.Start(1, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != nsID {
		t.Fatalf("process runs in %s, want %s", got, nsID)
	}

	root, _ := os.Readlink("/proc/self/ns/net")
	var inside string
	if err := f.Do(1, func() (err error) {
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside != nsID {
		t.Fatalf("DoIn ran in %s, want %s", inside, nsID)
	}
	if after, _ := os.Readlink("/proc/self/ns/net"); after != root {
		t.Fatalf("the process moved from %s to %s", root, after)
	}
	if err := DoIn("dpu-no-such-namespace", func() error { return nil }); err == nil {
		t.Fatal("DoIn of a missing namespace succeeded")
	}
}

func TestSetLinkAndDropErrors(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	f, err := Up(ring3(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Down(dir) })
	up := func(node, port int) bool {
		var isUp bool
		f.Do(node, func() error {
			l, err := netlink.LinkByName(PortName(port))
			if err == nil {
				isUp = l.Attrs().Flags&net.FlagUp != 0
			}
			return err
		})
		return isUp
	}
	if err := SetLink(dir, 0, 1, false); err != nil {
		t.Fatal(err)
	}
	if up(0, 0) || up(1, 1) || !up(0, 1) {
		t.Fatal("link 0-1 not down, or another link touched")
	}
	if err := f.SetLink(1, 0, true); err != nil {
		t.Fatal(err)
	}
	if !up(0, 0) || !up(1, 1) {
		t.Fatal("link 0-1 not up again")
	}
	f2, _ := Up(Spec{Dir: t.TempDir(), Nodes: 3, Edges: []Edge{{0, 0, 1, 0}}})
	if f2 != nil {
		t.Cleanup(func() { Down(f2.Dir) })
		if err := f2.SetLink(0, 2, false); !errors.Is(err, ErrNoLink) {
			t.Fatalf("SetLink of non-neighbours: %v", err)
		}
	}
	if err := SetDrop(dir, 0, 1, 10); !errors.Is(err, ErrNoProgram) {
		t.Fatalf("SetDrop with no agent: %v, want ErrNoProgram", err)
	}
}
