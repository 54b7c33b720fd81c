package agent_test

import (
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
	"github.com/aitherion/dpu/internal/privtest"
)

// TestQuotaSetShow: root sets uid 65534's quota (dpuctl quota set's
// command); the user gets exactly that many pages, quota show counts
// them, and the quota outlives a restart of the agent.
func TestQuotaSetShow(t *testing.T) {
	privtest.Require(t)
	const nobody = 65534
	dir, err := os.MkdirTemp("", "agent-quota-set")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(dir, "run")
	cfg.Pages, cfg.UserPages = 64, 20
	cfg.SocketGroup = "65534"
	nd, stop := runAgent(t, cfg)
	if err := os.Chmod(cfg.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	quotas := func(nd *liveNode) map[string]ctl.Quota {
		c, err := ctl.Dial(filepath.Join(nd.runDir, "ctl.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		qs, err := ctl.Quotas(ctxT(t, 5*time.Second), c)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]ctl.Quota{}
		for _, q := range qs {
			if q.Default {
				m["default"] = q
			} else {
				m[itoa(q.UID)] = q
			}
		}
		return m
	}
	c, err := ctl.Dial(filepath.Join(nd.runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetQuota(ctxT(t, 5*time.Second), c, ctl.Quota{UID: nobody, PagesLimit: 5}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if q := quotas(nd)["default"]; q.PagesLimit != 20 || q.BytesLimit != 20*4096 {
		t.Fatalf("default quota %+v", q)
	}
	if q, ok := quotas(nd)[itoa(nobody)]; !ok || q.PagesLimit != 5 || q.PagesUsed != 0 {
		t.Fatalf("uid %d's quota %+v %v", nobody, q, ok)
	}
	bin := testBinaryIn(t, dir)
	cmd := exec.Command(bin, "-test.run=^TestHelperHostClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DPU_TEST_HOST_SOCKET="+nd.hostSocket())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "allocated=5\n") {
		t.Fatalf("uid %d under a quota of 5 pages: %v\n%s", nobody, err, out)
	}
	if q := quotas(nd)[itoa(nobody)]; q.PagesUsed != 5 || q.BytesUsed != 5*4096 {
		t.Fatalf("after the allocations: %+v", q)
	}
	stop()
	nd, _ = runAgent(t, cfg)
	if q, ok := quotas(nd)[itoa(nobody)]; !ok || q.PagesLimit != 5 {
		t.Fatalf("after a restart: %+v %v", q, ok)
	}
}

func itoa(u uint32) string { return strconv.FormatUint(uint64(u), 10) }
