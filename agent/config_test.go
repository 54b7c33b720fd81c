package agent

import (
	"context"
	"errors"
	"github.com/aitherion/dpu/coherence"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigLoad(t *testing.T) {
	c := DefaultConfig()
	in := `# a node
node = 3
run-dir = /tmp/x
port = p0 udp 127.0.0.1:7000 127.0.0.1:7001
port = p1 xdp veth1
port = p2 udp 127.0.0.1:7010 127.0.0.1:7020 channels=4
channels = 2

heartbeat = 50ms
dead-interval = 400ms
poll = true
gpu-mem-limit = 8G
gpu-quota = 50%
gpu-device = GPU-1234 512M 25
replicas = 2
fabric-nodes = 5
durable = true
fabric-id = lab-a
placement = auto
placement-half-life = 250ms
`
	if err := c.Load("a.conf", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if c.Node != 3 || c.RunDir != "/tmp/x" || len(c.Ports) != 3 || c.Ports[2].Channels != 4 || c.Ports[0].Channels != 0 || c.Channels != 2 || c.Ports[1].Args[0] != "veth1" || c.Heartbeat != 50*time.Millisecond || c.Loop != LoopPoll || c.Replicas != 2 || c.FabricNodes != 5 || !c.Durable || c.FabricID != "lab-a" {
		t.Fatalf("got %+v", c)
	}
	if c.Placement != coherence.PlacementAuto || c.PlacementHalfLife != 250*time.Millisecond {
		t.Fatalf("placement %v, half-life %v", c.Placement, c.PlacementHalfLife)
	}
	if c.GPU.Default.Memory != 8<<30 || c.GPU.Default.Quota != 50 || c.GPU.Devices["GPU-1234"].Memory != 512<<20 || c.GPU.Devices["GPU-1234"].Quota != 25 {
		t.Fatalf("gpu config %+v", c.GPU)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"nodes = 1", `a.conf:1: unknown key "nodes"`},
		{"\n\nnode = x", "a.conf:3: bad value \"x\" for node"},
		{"node = 4294967295", "reserved"},
		{"port = p0 tcp a b", `unknown kind "tcp"`},
		{"port = p0 udp a", "takes 2 argument(s)"},
		{"heartbeat = -1s", "must be positive"},
		{"garbage", "a.conf:1: want \"key = value\""},
		{"log-level = loud", "want debug"},
		{"gpu-quota = 101", "above 100"},
		{"gpu-mem-limit = 8Q", "bad value"},
		{"gpu-device = 0 1G", "want DEVICE"},
		{"channels = 0", "outside [1, 64]"},
		{"replicas = 0", "must be 1..8"},
		{"replicas = 9", "must be 1..8"},
		{"fabric-nodes = -1", "must be 0"},
		{"durable = maybe", "bad value"},
		{"port = p0 udp a b channels=x", "invalid syntax"},
		{"port = p0 udp a channels=2", "takes 2 argument(s)"},
		{"placement = on", "want off or auto"},
		{"placement-half-life = 0s", "positive"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		err := c.Load("a.conf", strings.NewReader(tc.in))
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want containing %q", tc.in, err, tc.want)
		}
	}
	c := DefaultConfig()
	c.Ports = []PortSpec{{Name: "p0", Kind: "udp"}, {Name: "p0", Kind: "udp"}}
	if err := c.Validate(); err == nil {
		t.Fatal("duplicate port names accepted")
	}
}

// TestRunFailsCleanlyWhenTheSocketIsTaken: an agent whose host socket
// cannot be created returns an error instead of hanging, and releases its
// control socket.
func TestRunFailsCleanlyWhenTheSocketIsTaken(t *testing.T) {
	dir := t.TempDir()
	// a directory where the host socket should be makes its creation fail
	if err := os.Mkdir(filepath.Join(dir, "dpu0.sock"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dpu0.sock", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RunDir = dir
	a, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run succeeded without its host socket")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run hung after its host socket failed")
	}
	if _, err := os.Stat(filepath.Join(dir, "ctl.sock")); err == nil {
		t.Fatal("control socket left behind")
	}
}

// TestConfigDuplicateKeysAndBadAddresses: a key set twice and a port whose
// address cannot be one are errors naming the file and the line.
func TestConfigDuplicateKeysAndBadAddresses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"node = 1\nheartbeat = 50ms\nnode = 2\n", "c.conf:3: node is set twice (first at line 1)"},
		{"node = 1\nport = p0 udp 10.0.0.3:abc 10.0.0.4:7000\n", `c.conf:2: port "p0 udp 10.0.0.3:abc 10.0.0.4:7000": address "10.0.0.3:abc"`},
		{"port = p0 udp 10.0.0.3 10.0.0.4:7000\n", `c.conf:1: port "p0 udp 10.0.0.3 10.0.0.4:7000": address "10.0.0.3": want HOST:PORT`},
		{"port = p0 udp 10.0.0.3:65534 10.0.0.4:7000 channels=4\n", "4 channels from port 65534 run past 65535"},
		{"port = p4 rdma rxe0 10.0.1.3 10.0.1.4:7700\n", `c.conf:1: port "p4 rdma rxe0 10.0.1.3 10.0.1.4:7700": address "10.0.1.3"`},
	} {
		c := DefaultConfig()
		err := c.Load("c.conf", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
	c := DefaultConfig()
	ok := "gpu-device = 0 1G 50\ngpu-device = 1 2G 50\nport = p0 udp 10.0.0.3:7000 10.0.0.4:7000\nport = p1 udp [fd00::3]:7000 [fd00::4]:7000\n"
	if err := c.Load("c.conf", strings.NewReader(ok)); err != nil {
		t.Errorf("repeatable keys: %v", err)
	}
}
