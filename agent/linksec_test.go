package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/secure"
)

// securePair writes keys for two nodes and a fabric key list listing them,
// and returns the two nodes' configurations over UDP loopback.
func securePair(t *testing.T) (cfgs [2]agent.Config, dir string) {
	dir = t.TempDir()
	fab := secure.NewFabric()
	var order []secure.PublicKey
	addrs := agent.HoldUDP(t, 2)
	for i := range cfgs {
		kp, err := secure.GenerateKeyPair()
		if err != nil {
			t.Fatal(err)
		}
		keyFile := filepath.Join(dir, fmt.Sprintf("node%d.key", i))
		if err := secure.WriteKeyFile(keyFile, kp, -1, -1); err != nil {
			t.Fatal(err)
		}
		fab.AddNode(fmt.Sprintf("node%d", i), kp.Public, uint32(i))
		order = append(order, kp.Public)
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(i)
		cfg.RunDir = filepath.Join(dir, fmt.Sprintf("node%d", i))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		cfg.RequestTimeout = 300 * time.Millisecond
		cfg.Ports = []agent.PortSpec{{Name: "p0", Kind: agent.PortUDPHeld, Args: []string{addrs[i], addrs[1-i]}}}
		cfg.KeyFile, cfg.FabricKeys = keyFile, filepath.Join(dir, "fabric.keys")
		cfgs[i] = cfg
	}
	if err := rundir.WriteFile(filepath.Join(dir, "fabric.keys"), fab.Format(order), 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	return cfgs, dir
}

func neighbours(t *testing.T, nd *liveNode) []ctl.Neighbour {
	c, err := ctl.Dial(filepath.Join(nd.runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Neighbours(ctxT(t, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestRogueNodeIsRefused (attack 1): after a node dies, someone binds its
// link addresses and runs an agent with the same configuration but a key
// of its own (it cannot read the dead node's 0600 key file). The
// neighbour never accepts it: no adjacency, no route, nothing of the
// neighbour's pages reachable from it.
func TestRogueNodeIsRefused(t *testing.T) {
	cfgs, dir := securePair(t)
	n0, _ := runAgent(t, cfgs[0])
	n1, stop1 := runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})
	ns := neighbours(t, n0)
	if len(ns) != 1 || ns[0].KeyName != "node1" || ns[0].Key == "" {
		t.Fatalf("neighbour show on node 0: %+v, want node1's key", ns)
	}
	c0 := dialHost(t, n0)
	ctx := ctxT(t, time.Minute)
	secret, err := c0.Alloc(ctx, 4096, 0o666) // even a page open to all users
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Store64(ctx, secret, 7); err != nil {
		t.Fatal(err)
	}
	stop1()
	// node 0 notices the death first
	gone := time.Now().Add(5 * time.Second)
	for reachable(t, n0) {
		if time.Now().After(gone) {
			t.Fatal("node 0 never noticed node 1's death")
		}
		time.Sleep(20 * time.Millisecond)
	}

	rogueKey, err := secure.GenerateKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	rogue := cfgs[1]
	rogue.RunDir = filepath.Join(dir, "rogue")
	rogue.KeyFile = filepath.Join(dir, "rogue.key")
	if err := secure.WriteKeyFile(rogue.KeyFile, rogueKey, -1, -1); err != nil {
		t.Fatal(err)
	}
	nr, _ := runAgent(t, rogue)
	cr := dialHost(t, nr)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if reachable(t, n0) {
			t.Fatalf("node 0 took the rogue as a neighbour: %+v", neighbours(t, n0))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := cr.Load64(ctx, secret); err == nil {
		t.Fatal("the rogue read node 0's page")
	}
	if _, err := cr.Store64(ctx, secret, 666); err == nil {
		t.Fatal("the rogue wrote node 0's page")
	}
	if v, err := c0.Load64(ctx, secret); err != nil || v != 7 {
		t.Fatalf("node 0's page: %d %v", v, err)
	}
	if !strings.Contains(nr.log.String(), "link security on") {
		t.Fatal("the rogue ran without link security")
	}
	_ = os.Remove(rogue.KeyFile)
}

func reachable(t *testing.T, nd *liveNode) bool {
	for _, n := range neighbours(t, nd) {
		if n.State == ctl.NeighReachable {
			return true
		}
	}
	return false
}

// TestPlaintextLinksAreSaidOutLoud: an agent whose ports have no link
// security warns at start and link show marks its links plaintext; with
// key-file and fabric-keys it does not warn and its links are sealed.
func TestPlaintextLinksAreSaidOutLoud(t *testing.T) {
	links := func(nd *liveNode) []ctl.Link {
		c, ctx := dialCtl(t, nd.runDir)
		ls, err := c.Links(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}
	const warning = "links are plaintext"
	plain := startLine(t, 2, nil)
	waitRoutes(t, plain)
	if !strings.Contains(plain[0].log.String(), warning) {
		t.Errorf("an agent without key-file said nothing about plaintext links:\n%s", plain[0].log.String())
	}
	for _, l := range links(plain[0]) {
		if l.Security != ctl.LinkPlaintext {
			t.Errorf("link %s without key-file: security %q, want %q", l.Name, l.Security, ctl.LinkPlaintext)
		}
	}
	cfgs, _ := securePair(t)
	n0, _ := runAgent(t, cfgs[0])
	n1, _ := runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})
	if strings.Contains(n0.log.String(), warning) {
		t.Errorf("an agent with key-file warned about plaintext links:\n%s", n0.log.String())
	}
	for _, l := range links(n0) {
		if l.Security != ctl.LinkSealed {
			t.Errorf("link %s with key-file: security %q, want %q", l.Name, l.Security, ctl.LinkSealed)
		}
	}
}

// TestKeyIsBoundToItsNodeID: fabric-keys binds each key to a node id. After
// node 1 dies, the holder of node 2's key (a listed key, so its handshake
// succeeds) takes node 1's addresses and claims node id 1: node 0 never
// takes it as a neighbour, reaches nothing through it, and logs why.
func TestKeyIsBoundToItsNodeID(t *testing.T) {
	cfgs, dir := securePair(t)
	kp2, err := secure.GenerateKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	key2 := filepath.Join(dir, "node2.key")
	if err := secure.WriteKeyFile(key2, kp2, -1, -1); err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(dir, "fabric.keys")
	list, err := os.ReadFile(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	list = fmt.Appendf(list, "node2 %s node=2\n", kp2.Public)
	if err := rundir.WriteFile(keysFile, list, 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	n0, _ := runAgent(t, cfgs[0])
	n1, stop1 := runAgent(t, cfgs[1])
	waitRoutes(t, []*liveNode{n0, n1})
	c0 := dialHost(t, n0)
	ctx := ctxT(t, time.Minute)
	page, err := c0.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Store64(ctx, page, 7); err != nil {
		t.Fatal(err)
	}
	stop1()
	waitFor(t, 10*time.Second, "node 0 to notice node 1's death", func() bool { return !reachable(t, n0) })

	rogue := cfgs[1] // node id 1, node 1's addresses
	rogue.RunDir = filepath.Join(dir, "rogue")
	rogue.KeyFile = key2
	// its own key list, which binds nothing (its agent would refuse to
	// run as node 1 with node 2's key under the fabric's)
	rogue.FabricKeys = filepath.Join(dir, "rogue.keys")
	unbound := regexp.MustCompile(` node=[0-9]+`).ReplaceAll(list, nil)
	if err := rundir.WriteFile(rogue.FabricKeys, unbound, 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	nr, _ := runAgent(t, rogue)
	waitFor(t, 20*time.Second, "node 0 to refuse the claim", func() bool {
		return strings.Contains(n0.log.String(), "neighbour refused")
	})
	log := n0.log.String()
	if !strings.Contains(log, "claims=1") || !strings.Contains(log, "bound_to=2") {
		t.Fatalf("the refusal does not say what was claimed and bound:\n%s", log)
	}
	// the handshake succeeded (the key is listed), the claim did not: no
	// adjacency, no route, nothing of node 0's pages from the rogue
	for range 10 {
		if reachable(t, n0) {
			t.Fatalf("node 0 took the holder of node 2's key as node 1: %+v", neighbours(t, n0))
		}
		c, cctx := dialCtl(t, n0.runDir)
		if rs, err := c.Routes(cctx); err != nil || len(rs) != 0 {
			t.Fatalf("node 0's routes: %+v %v", rs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cr := dialHost(t, nr)
	if _, err := cr.Store64(ctx, page, 666); err == nil {
		t.Fatal("the rogue wrote node 0's page")
	}
	if v, err := c0.Load64(ctx, page); err != nil || v != 7 {
		t.Fatalf("node 0's page: %d %v", v, err)
	}
}
