package hostif_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

// privileged skips a test that needs root, unless DPU_PRIV_TESTS=require
// (CI), which turns the skip into a failure.
func privileged(t *testing.T) {
	t.Helper()
	if os.Getuid() == 0 {
		return
	}
	if os.Getenv("DPU_PRIV_TESTS") == "require" {
		t.Fatal("needs root (DPU_PRIV_TESTS=require)")
	}
	t.Skip("needs root to run clients as other users")
}

// serveForOtherUsers serves a node of a one-node fabric with opts in a
// directory other users may enter, beside a copy of this test binary
// they can run, and returns the copy's and the socket's paths and the
// fabric.
func serveForOtherUsers(t *testing.T, prefix string, opts hostif.Options) (bin, path string, fab *hostiftest.Fabric) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "hostif.test")
	copyFile(t, self, bin)

	fab = hostiftest.NewFabric()
	be := fab.Node(1)
	t.Cleanup(be.Close)
	path = filepath.Join(dir, hostif.SocketName)
	srv, err := hostif.NewServer(be, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "socket", func() bool { _, err := os.Stat(path); return err == nil })
	return bin, path, fab
}

// TestPermissionsOfOtherUsers runs clients as other uids (subprocesses with
// real credentials): pages are checked against the owner uid/gid/mode set at
// alloc, a denied access changes nothing, and the socket's own mode keeps
// out users outside its group.
func TestPermissionsOfOtherUsers(t *testing.T) {
	privileged(t)
	const nobody, nogroup = 65534, 65534
	bin, path, fab := serveForOtherUsers(t, "hostif-perm", hostif.Options{SocketGroup: fmt.Sprint(nogroup)})

	root := dial(t, path)
	cctx := ctxT(t)
	alloc := func(mode os.FileMode) gva.GVA {
		g, err := root.Alloc(cctx, 4096, mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.Store64(cctx, g, 1000+uint64(mode)); err != nil {
			t.Fatal(err)
		}
		return g
	}
	p600, p604, p606 := alloc(0o600), alloc(0o604), alloc(0o606)

	run := func(cred *syscall.Credential, script string) []string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), "HOSTIF_HELPER_SOCKET="+path, "HOSTIF_HELPER_SCRIPT="+script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid %d: %v\n%s", cred.Uid, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	expect := func(lines []string, want ...string) {
		t.Helper()
		if len(lines) != len(want) {
			t.Fatalf("helper printed %q, want %q", lines, want)
		}
		for i := range want {
			if !strings.HasPrefix(lines[i], want[i]) {
				t.Errorf("line %d: %q, want prefix %q", i, lines[i], want[i])
			}
		}
	}
	eacces, eperm := fmt.Sprint(int(syscall.EACCES)), fmt.Sprint(int(syscall.EPERM))

	// uid nobody: "other" for every root page.
	lines := run(&syscall.Credential{Uid: nobody, Gid: nogroup}, strings.Join([]string{
		"load " + p600.String(), "map " + p600.String(), "store " + p600.String() + " 7",
		"cas " + p600.String() + " 7", "fetchadd " + p600.String() + " 7", "lock " + p600.String(),
		"acquire " + p600.String(), "where " + p600.String(), "free " + p600.String(),
		"load " + p604.String(), "map " + p604.String(), "store " + p604.String() + " 7",
		"store " + p606.String() + " 7", "free " + p606.String(),
		"alloc - 0640",
	}, "\n"))
	expect(lines, "load "+eacces, "map "+eacces, "store "+eacces, "cas "+eacces, "fetchadd "+eacces,
		"lock "+eacces, "acquire "+eacces, "where "+eacces, "free "+eperm,
		"load 0 1388", "map 0", "store "+eacces, "store 0", "free "+eperm, "alloc 0 gva:")
	q := strings.Fields(lines[len(lines)-1])[2]

	// Nothing the denied requests asked for happened.
	for _, c := range []struct {
		g    gva.GVA
		want uint64
	}{{p600, 1000 + 0o600}, {p604, 1000 + 0o604}, {p606, 7}} {
		if v, err := root.Load64(cctx, c.g); err != nil || v != c.want {
			t.Errorf("page %v = %d (%v), want %d", c.g, v, err, c.want)
		}
	}
	if _, locked := fab.LockedBy(p600); locked || fab.Refs(p600, 1) != 0 || fab.Acquired(p600, 1) {
		t.Error("a denied request left state behind")
	}

	// A member of the page's group (supplementary group, SO_PEERGROUPS)
	// gets the group bits; a stranger outside the socket's group cannot
	// even connect.
	lines = run(&syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{nogroup}},
		"load "+q+"\nstore "+q+" 1\nload "+p600.String())
	expect(lines, "load 0", "store "+eacces, "load "+eacces)
	lines = run(&syscall.Credential{Uid: 4343, Gid: 4343}, "load "+q)
	expect(lines, "dial "+eacces)

	// Root may free what nobody allocated.
	qg, _ := gva.Parse(q)
	if err := root.Free(cctx, qg); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
