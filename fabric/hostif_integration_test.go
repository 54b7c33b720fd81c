package fabric_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/privtest"
)

// asUser runs dpuctl mem ARGS on node as uid/gid (a process with those
// real credentials) and returns its stdout, stderr and exit status.
func asUser(t *testing.T, st *fabric.State, dpuctl string, node int, uid, gid uint32, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, dpuctl, append([]string{"-d", hostSock(st, node), "mem"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("dpuctl as uid %d: %v", uid, err)
	}
	return out.String(), errOut.String(), code
}

// TestOtherUsersRefused: on a 2-node fabric of real agents, a process of
// another user (uid nobody, a dpuctl subprocess) gets EACCES for every
// access to a page root allocated 0600 — on the page's node and across the
// fabric — and EPERM for free; nothing it asked for happens (content,
// version, owner and lock unchanged). A page readable by others (0604) is
// readable, not writable, on every node: its attributes travel with it.
func TestOtherUsersRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		privtest.Require(t) // skips, or fails under DPU_PRIV_TESTS=require
	}
	const nobody, nogroup = 65534, 65534
	st, dpuctl := upShared(t, 2, "line")
	ctx := ctxFor(t, time.Minute)
	c0, c1 := dialNode(t, st, 0), dialNode(t, st, 1) // root
	private, err := c0.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := c0.Alloc(ctx, 4096, 0o604)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []gva.GVA{private, shared} {
		if _, err := c0.Store64(ctx, g, 1234); err != nil {
			t.Fatal(err)
		}
	}
	before := make([]byte, 16)
	v0, err := c0.Load(ctx, private, before)
	if err != nil {
		t.Fatal(err)
	}

	p := private.String()
	for _, node := range []int{0, 1} {
		for _, args := range [][]string{
			{"read", p},
			{"read", p, "--u64"},
			{"write", p, "--u64", "7"},
			{"write", p + "+8", "ff"},
			{"cas", p, "1234", "7"},
			{"add", p, "1"},
			{"where", p},
			{"lock", p, "--timeout", "1s", "--", "echo", "ran under the lock"},
		} {
			out, errOut, code := asUser(t, st, dpuctl, node, nobody, nogroup, args...)
			if code != 1 || out != "" || !strings.Contains(errOut, "permission denied") {
				t.Errorf("node %d: nobody: mem %v: exit %d, stdout %q, stderr %q; want exit 1 and EACCES", node, args, code, out, errOut)
			}
		}
	}
	for _, node := range []int{0, 1} {
		_, errOut, code := asUser(t, st, dpuctl, node, nobody, nogroup, "free", p)
		if code != 1 || !strings.Contains(errOut, "operation not permitted") && !strings.Contains(errOut, "no such file") {
			t.Errorf("node %d: nobody: mem free: exit %d, stderr %q; want EPERM (or ENOENT away from its node)", node, code, errOut)
		}
	}

	// Nothing changed: content, version, owner, and no lock left behind
	// (root on the other node takes it at once).
	after := make([]byte, 16)
	v1, err := c0.Load(ctx, private, after)
	if err != nil || v1 != v0 || !bytes.Equal(after, before) {
		t.Errorf("after the refused requests: version %d content %x (%v), want version %d content %x", v1, after, err, v0, before)
	}
	if loc, err := c0.Where(ctx, private); err != nil || loc.Owner != 0 {
		t.Errorf("owner after the refused requests: %+v %v", loc, err)
	}
	if err := c1.Lock(ctx, private, time.Second); err != nil {
		t.Errorf("root on node 1 locking after the refused requests: %v", err)
	} else if err := c1.Unlock(ctx, private); err != nil {
		t.Error(err)
	}

	// Others may read a 0604 page on its node, not write it.
	out, errOut, code := asUser(t, st, dpuctl, 0, nobody, nogroup, "read", shared.String(), "--u64")
	if code != 0 || out != "1234\n" {
		t.Errorf("nobody reading a 0604 page on its node: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := asUser(t, st, dpuctl, 0, nobody, nogroup, "add", shared.String(), "1"); code != 1 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("nobody adding to a 0604 page: exit %d %q", code, errOut)
	}
	// The page's attributes travel with it: the same on every node.
	if out, errOut, code := asUser(t, st, dpuctl, 1, nobody, nogroup, "read", shared.String(), "--u64"); code != 0 || out != "1234\n" {
		t.Errorf("nobody reading a 0604 page through another node: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := asUser(t, st, dpuctl, 1, nobody, nogroup, "add", shared.String(), "1"); code != 1 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("nobody adding to a 0604 page through another node: exit %d %q", code, errOut)
	}
	if v, err := c1.Load64(ctx, shared); err != nil || v != 1234 {
		t.Errorf("root reading the 0604 page through node 1: %d %v", v, err)
	}
}
