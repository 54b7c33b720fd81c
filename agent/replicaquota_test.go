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
// DPU_TEST_MAP_PAGES pages from it without local mappings (MAP NOFD;
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
	if n, _ := strconv.Atoi(os.Getenv("DPU_TEST_ALLOC")); n > 0 {
		c, err := client.Dial(ctx, sock, client.Options{Name: "replica-helper", NoRings: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g, err := c.Alloc(ctx, n*gva.PageSize, 0o644)
		fmt.Printf("alloc %s %v\n", result(err), g)
	}
	if m := os.Getenv("DPU_TEST_MAP"); m != "" {
		g, err := gva.Parse(m)
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
	dir, err := os.MkdirTemp("", "agent-replica-quota")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := testBinaryIn(t, dir)
	// start runs the helper on a node and returns its lines until
	// "holding"; closing the returned writer lets it go.
	start := func(node int, env ...string) ([]string, io.Closer) {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestHelperReplicaClient$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), "DPU_TEST_HOST_SOCKET="+nodes[node].hostSocket()), env...)
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
		t.Fatalf("helper on node %d ended before it held: %v %q", node, sc.Err(), lines)
		return nil, nil
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
