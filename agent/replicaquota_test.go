package agent_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/internal/quota"
)

// TestHelperReplicaClient is not a test: TestReplicasCountAgainstTheQuota
// runs this test binary as another user. On DPU_TEST_HOST_SOCKET it
// allocates DPU_TEST_ALLOC pages (one allocation, printing "alloc ok GVA"
// or "alloc err ERRNO"), then, when DPU_TEST_MAP names a GVA, maps
// DPU_TEST_MAP_PAGES pages from it (DPU_TEST_MAP=self: from the pages it
// allocated) without local mappings (MAP NOFD;
// "map ok" or "map err ERRNO"), and holds its connection (and so its
// refs) until its standard input closes.
func TestHelperReplicaClient(t *testing.T) {
	sock := os.Getenv("DPU_TEST_HOST_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
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
	ctx := ctxT(t, time.Minute)
	var allocated gva.GVA
	if n, _ := strconv.Atoi(os.Getenv("DPU_TEST_ALLOC")); n > 0 {
		c, err := client.Dial(ctx, sock, client.Options{Name: "replica-helper", NoRings: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g, err := c.Alloc(ctx, n*gva.PageSize, 0o644)
		fmt.Printf("alloc %s %v\n", result(err), g)
		allocated = g
	}
	if m := os.Getenv("DPU_TEST_MAP"); m != "" {
		g, err := allocated, error(nil)
		if m != "self" {
			g, err = gva.Parse(m)
		}
		if err != nil {
			t.Fatal(err)
		}
		pages, _ := strconv.Atoi(os.Getenv("DPU_TEST_MAP_PAGES"))
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		in := make([]byte, wire.MaxMessage)
		send := func(r *wire.Request) error {
			_, err := rawStatus(t, uc, in, r, 30*time.Second)
			return err
		}
		if err := send(&wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1}); err != nil {
			t.Fatal(err)
		}
		err = send(&wire.Request{Header: wire.Header{Op: wire.OpMap, ID: 2, GVA: g}, Bytes: uint64(pages * gva.PageSize), Flags: wire.MapNoFD})
		fmt.Printf("map %s\n", result(err))
	}
	fmt.Println("holding")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startReplicaHelper runs TestHelperReplicaClient as uid (in the socket
// group) on sock and returns its alloc and map lines once it holds;
// closing the returned writer lets it go.
func startReplicaHelper(t *testing.T, bin, sock string, uid uint32, env ...string) ([]string, io.Closer) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperReplicaClient$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "DPU_TEST_HOST_SOCKET="+sock), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{permGroup}}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		l := sc.Text()
		if l == "holding" {
			go io.Copy(io.Discard, stdout)
			return lines, stdin
		}
		if strings.HasPrefix(l, "alloc ") || strings.HasPrefix(l, "map ") {
			lines = append(lines, l)
		}
	}
	t.Fatalf("helper on %s ended before it held: %v %q", sock, sc.Err(), lines)
	return nil, nil
}

// helperDir is a directory other users may enter, for a copy of the test
// binary they run.
func helperDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent-replica-quota")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMappedReplicasCountAgainstTheUsersDescriptors (hole 3, second
// route): every replica file a user's connection holds is one of the
// agent's descriptors, counted against the user's budget (user-files)
// with the connections and ring pairs. With a budget of 24, a user that
// maps 40 of its own pages (40 files on top of its two connections) is
// refused with EDQUOT, and everything the refused map took is given back:
// the same user, still holding on, maps 10 pages, and root maps all 40.
// Before the budget the 40-page map succeeded, and ~1,000 pages ran an
// agent with the common limit of 1,024 descriptors out of them.
func TestMappedReplicasCountAgainstTheUsersDescriptors(t *testing.T) {
	privtest.Require(t)
	const uid, userFiles, pages = 4243, 24, 40
	nodes := startLine(t, 1, func(c *agent.Config) {
		c.Pages, c.UserPages, c.UserFiles = 256, 128, userFiles
		c.SocketGroup = strconv.Itoa(permGroup)
	})
	bin := testBinaryIn(t, helperDir(t))
	sock := nodes[0].hostSocket()
	big, _ := startReplicaHelper(t, bin, sock, uid, "DPU_TEST_ALLOC="+strconv.Itoa(pages), "DPU_TEST_MAP=self", "DPU_TEST_MAP_PAGES="+strconv.Itoa(pages))
	t.Logf("the user mapping %d pages: %q", pages, big)
	if len(big) != 2 || !strings.HasPrefix(big[0], "alloc ok ") {
		t.Fatalf("the user's allocation: %q", big)
	}
	if want := "map err " + syscall.EDQUOT.Error(); big[1] != want {
		t.Fatalf("the user mapping %d pages with a budget of %d descriptors: %q, want %q", pages, userFiles, big[1], want)
	}
	small, _ := startReplicaHelper(t, bin, sock, uid, "DPU_TEST_ALLOC=10", "DPU_TEST_MAP=self", "DPU_TEST_MAP_PAGES=10")
	if len(small) != 2 || small[1] != "map ok" {
		t.Fatalf("the same user mapping 10 pages beside the refused map (its charges given back?): %q", small)
	}
	g, err := gva.Parse(strings.Fields(big[0])[2])
	if err != nil {
		t.Fatal(err)
	}
	c := dialHost(t, nodes[0])
	if _, err := c.Map(ctxT(t, 30*time.Second), g, pages*gva.PageSize); err != nil {
		t.Fatalf("root mapping the user's %d pages: %v", pages, err)
	}
}

// TestReplicasCountAgainstTheQuota (hole 4): with 64 pages a node and 32
// a user, a user who allocated its 32 on node 0 and 32 on node 1 cannot
// map its node-1 pages on node 0 (each replica takes a physical page of
// node 0, charged to the mapping user): the map is refused with EDQUOT,
// and root can still allocate on node 0 while the user holds on.
func TestReplicasCountAgainstTheQuota(t *testing.T) {
	privtest.Require(t)
	const uid, pages, userPages = 4242, 64, 32
	nodes := startLine(t, 2, func(c *agent.Config) {
		c.Pages, c.UserPages = pages, userPages
		c.SocketGroup = strconv.Itoa(permGroup)
	})
	bin := testBinaryIn(t, helperDir(t))
	start := func(node int, env ...string) ([]string, io.Closer) {
		t.Helper()
		return startReplicaHelper(t, bin, nodes[node].hostSocket(), uid, env...)
	}
	remote, _ := start(1, "DPU_TEST_ALLOC="+strconv.Itoa(userPages))
	if len(remote) != 1 || !strings.HasPrefix(remote[0], "alloc ok ") {
		t.Fatalf("the user's allocation on node 1: %q", remote)
	}
	first := strings.Fields(remote[0])[2]
	local, _ := start(0, "DPU_TEST_ALLOC="+strconv.Itoa(userPages), "DPU_TEST_MAP="+first, "DPU_TEST_MAP_PAGES="+strconv.Itoa(userPages))
	t.Logf("the user on node 0: %q", local)
	if len(local) != 2 || !strings.HasPrefix(local[0], "alloc ok ") {
		t.Fatalf("the user's allocation on node 0: %q", local)
	}
	if want := "map err " + syscall.EDQUOT.Error(); local[1] != want {
		t.Errorf("the user mapping its node-1 pages on a node where it holds its quota: %q, want %q", local[1], want)
	}
	// root still allocates on node 0 while the user holds its connections
	c := dialHost(t, nodes[0])
	for i := range 4 {
		if _, err := c.Alloc(ctxT(t, 10*time.Second), gva.PageSize, 0); err != nil {
			t.Fatalf("root's allocation %d on node 0: %v", i, err)
		}
	}
}

// TestBackupsAreChargedToRemote: the backup copies a node keeps for
// another node's pages (replicas = 2) are counted in its page ledger as
// quota.Remote, page for page, and given back when the pages are freed
// (so the ledger sees the store's backups as the engine keeps them).
func TestBackupsAreChargedToRemote(t *testing.T) {
	nodes := startLine(t, 2, func(c *agent.Config) { c.Replicas = 2 })
	ctx := ctxT(t, time.Minute)
	c := dialHost(t, nodes[0])
	g, err := c.Alloc(ctx, 3*gva.PageSize, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	remote := func() (ledger, backups uint64) {
		cc, err := ctl.Dial(filepath.Join(nodes[1].runDir, "ctl.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		qs, err := ctl.Quotas(ctxT(t, 5*time.Second), cc)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if !q.Default && q.UID == quota.Remote {
				ledger = q.PagesUsed
			}
		}
		return ledger, counter(t, nodes[1], "pages_backup")
	}
	waitFor(t, 30*time.Second, "node 1 to keep 3 backups, charged to quota.Remote", func() bool {
		l, b := remote()
		return l == 3 && b == 3
	})
	if err := c.Free(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node 1 to give the backups back", func() bool {
		l, b := remote()
		return l == 0 && b == 0
	})
}
