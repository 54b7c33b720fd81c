package agent

import (
	"github.com/aitherion/dpu/gva"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the fenced block of ../README.md whose first line is
// first, as written there.
func readmeBlock(t *testing.T, first string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```\n"+first+"\n")
	if !ok {
		t.Fatalf("README.md has no block starting %q", first)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("README.md: the block starting %q is not closed", first)
	}
	return first + "\n" + block
}

// TestReadmeSampleConfig parses the README's sample agent.conf exactly as
// written there, trailing comments included; it shows link security on.
func TestReadmeSampleConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Load("README.md", strings.NewReader(readmeBlock(t, "# /etc/dpu/agent.conf"))); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Node = 3
	want.RunDir = "/run/dpu"
	want.Heartbeat = 100 * time.Millisecond
	want.DeadInterval = time.Second
	want.MetricsListen = "127.0.0.1:9464"
	want.KeyFile, want.FabricKeys = "/etc/dpu/node.key", "/etc/dpu/fabric.keys"
	want.StateDir, want.Durable = "/var/lib/dpu", true
	want.Tiers = []TierSpec{{Speed: gva.SpeedFastDisk, Path: "/var/lib/dpu/fast.tier", Size: 64 << 30}, {Speed: gva.SpeedSlowDisk, Path: "/dev/sdb", Size: 1 << 40}}
	want.Ports = []PortSpec{
		{Name: "p0", Kind: PortUDP, Args: []string{"10.0.0.3:7000", "10.0.0.4:7000"}},
		{Name: "p1", Kind: PortXDP, Args: []string{"eth1"}},
		{Name: "p2", Kind: PortAFPacket, Args: []string{"eth2"}},
		{Name: "p3", Kind: PortUDP, Args: []string{"10.0.0.3:7010", "10.0.0.4:7010"}, Channels: 4},
		{Name: "p4", Kind: "rdma", Args: []string{"rxe0", "10.0.1.3:7700", "10.0.1.4:7700"}},
		{Name: "p5", Kind: PortXDP, Args: []string{"eth3"}, Channels: 4},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("README sample parsed as\n%+v\nwant\n%+v", c, want)
	}
}

func TestConfigComments(t *testing.T) {
	c := DefaultConfig()
	in := "  # indented comment\nsocket-group = dpu#1   # a '#' inside a value stays\nheartbeat = 50ms\t# tab before\n"
	if err := c.Load("c.conf", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if c.SocketGroup != "dpu#1" || c.Heartbeat != 50*time.Millisecond {
		t.Fatalf("got socket-group %q heartbeat %v", c.SocketGroup, c.Heartbeat)
	}
	for _, bad := range []string{"metrics-listen = 9464", "metrics-listen = localhost"} {
		c := DefaultConfig()
		if err := c.Load("c.conf", strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestExamplesReadmePinBound: examples/README.md states the pin bound's
// default as the configuration has it.
func TestExamplesReadmePinBound(t *testing.T) {
	b, err := os.ReadFile("../examples/README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("pin is bounded by the agent \\(`pin-bound`, (\\S+) by default\\)").FindSubmatch(b)
	if m == nil {
		t.Fatal("examples/README.md no longer states the pin bound's default")
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil || d != DefaultConfig().PinBound {
		t.Fatalf("examples/README.md says the pin bound is %s by default; it is %v (%v)", m[1], DefaultConfig().PinBound, err)
	}
}
