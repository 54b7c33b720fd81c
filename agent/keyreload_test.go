package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc/port/secure"
)

// TestReloadAppliesKeyRemoval: a key removed from fabric-keys is applied on
// reload (SIGHUP) at once and logged: the neighbour holding it loses its
// link session and its handshakes are refused, so its routes go; put back,
// it rejoins on the next reload.
func TestReloadAppliesKeyRemoval(t *testing.T) {
	cfgs, dir := securePair(t)
	n0, _ := runAgent(t, cfgs[0])
	n1, _ := runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})
	keysFile := filepath.Join(dir, "fabric.keys")
	full, err := os.ReadFile(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	fab, err := secure.ParseFabric(full)
	if err != nil || fab.Len() != 2 {
		t.Fatalf("fabric keys: %v", err)
	}
	var kept []string
	for _, l := range strings.Split(string(full), "\n") {
		if !strings.HasPrefix(l, "node1 ") {
			kept = append(kept, l)
		}
	}
	if err := rundir.WriteFile(keysFile, []byte(strings.Join(kept, "\n")), 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	applied, _, err := n0.a.Reload(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(applied, "fabric-keys") {
		t.Fatalf("reload applied %q, want fabric-keys", applied)
	}
	if log := n0.log.String(); !strings.Contains(log, "fabric key removed") || !strings.Contains(log, "link session ended") {
		t.Fatalf("the removal is not logged:\n%s", log)
	}
	// the link goes down (heartbeats unanswered for the dead interval):
	// no route to node 1 remains, and node 1's handshakes are refused
	waitFor(t, 20*time.Second, "node 0's route to node 1 to go", func() bool {
		var rs []ctl.Route
		err := withCtl(n0.runDir, 2*time.Second, func(c *ctl.Client, ctx context.Context) (err error) {
			rs, err = c.Routes(ctx)
			return err
		})
		return err == nil && len(rs) == 0
	})
	if _, err := os.Stat(keysFile); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteFile(keysFile, full, 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n0.a.Reload(cfgs[0]); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, []*liveNode{n0, n1})
}
