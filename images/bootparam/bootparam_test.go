package bootparam

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
)

func TestFields(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  console=ttyAMA0   panic=-1\n", []string{"console=ttyAMA0", "panic=-1"}},
		{`dpu.ports="p0 udp a b" quiet`, []string{"dpu.ports=p0 udp a b", "quiet"}},
		{`"dpu.ports=p0 udp a b"`, []string{"dpu.ports=p0 udp a b"}},
		{`a="" b`, []string{"a=", "b"}},
		{`unterminated="x y`, []string{"unterminated=x y"}},
	}
	for _, tt := range tests {
		if got := Fields(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Fields(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseEmpty(t *testing.T) {
	p, err := Parse("console=ttyAMA0 root=/dev/vda quiet")
	if err != nil {
		t.Fatal(err)
	}
	if p.Configures() || p.Test.Enabled || len(p.Netdevs()) != 0 {
		t.Errorf("no dpu.* parameters, got %+v", p)
	}
	if got := p.AgentFlags(""); len(got) != 0 {
		t.Errorf("AgentFlags = %q, want none", got)
	}
	if got := p.AgentFlags("/etc/dpu/agent.conf"); !reflect.DeepEqual(got, []string{"--config", "/etc/dpu/agent.conf"}) {
		t.Errorf("AgentFlags with file = %q", got)
	}
}

func TestParseLinks(t *testing.T) {
	p, err := Parse("console=ttyAMA0 dpu.node=3 dpu.links=eth0,eth1 dpu.linkkind=afpacket dpu.loglevel=debug")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--node", "3",
		"--port", "p0 afpacket eth0",
		"--port", "p1 afpacket eth1",
		"--log-level", "debug",
	}
	if got := p.AgentFlags(""); !reflect.DeepEqual(got, want) {
		t.Errorf("AgentFlags = %q\nwant %q", got, want)
	}
	if got := p.Netdevs(); !reflect.DeepEqual(got, []Link{{Dev: "eth0"}, {Dev: "eth1"}}) {
		t.Errorf("Netdevs = %+v", got)
	}
}

func TestParseDefaultKindIsXDP(t *testing.T) {
	p, err := Parse("dpu.links=eth0")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.PortSpecs(); !reflect.DeepEqual(got, []string{"p0 xdp eth0"}) {
		t.Errorf("PortSpecs = %q", got)
	}
}

func TestParseUDPPeers(t *testing.T) {
	p, err := Parse("dpu.node=1 dpu.links=eth0=10.0.0.1/24,eth1=fd00::1/64 dpu.peers=10.0.0.2,[fd00::2]:7100")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p0 udp 10.0.0.1:7000 10.0.0.2:7000",
		"p1 udp [fd00::1]:7000 [fd00::2]:7100",
	}
	if got := p.PortSpecs(); !reflect.DeepEqual(got, want) {
		t.Errorf("PortSpecs = %q\nwant %q", got, want)
	}
	nd := p.Netdevs()
	if len(nd) != 2 || nd[0].Addr != netip.MustParsePrefix("10.0.0.1/24") || nd[1].Dev != "eth1" {
		t.Errorf("Netdevs = %+v", nd)
	}
}

func TestParseRawPorts(t *testing.T) {
	p, err := Parse(`dpu.links=eth0 dpu.ports="p1 afpacket eth2;p2,udp,127.0.0.1:7001,127.0.0.1:7002"`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p0 xdp eth0", "p1 afpacket eth2", "p2 udp 127.0.0.1:7001 127.0.0.1:7002"}
	if got := p.PortSpecs(); !reflect.DeepEqual(got, want) {
		t.Errorf("PortSpecs = %q\nwant %q", got, want)
	}
	if got := p.Netdevs(); !reflect.DeepEqual(got, []Link{{Dev: "eth0"}, {Dev: "eth2"}}) {
		t.Errorf("Netdevs = %+v", got)
	}
}

// Every port the command line produces must be one the agent accepts.
func TestPortSpecsAreAgentSyntax(t *testing.T) {
	p, err := Parse(`dpu.links=eth0=10.1.0.1/30,eth1=10.1.0.5/30 dpu.peers=10.1.0.2,10.1.0.6:7009 dpu.ports="x9,afpacket,eth3;x8,xdp,eth4"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range p.PortSpecs() {
		ps, err := agent.ParsePortSpec(spec)
		if err != nil {
			t.Errorf("agent rejects %q: %v", spec, err)
			continue
		}
		if ps.String() != spec {
			t.Errorf("agent reads %q as %q", spec, ps.String())
		}
	}
}

func TestParseTest(t *testing.T) {
	p, err := Parse("dpu.test=1 dpu.test.peers=1,2 dpu.test.timeout=30s dpu.test.linger=3s")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Test.Enabled || !reflect.DeepEqual(p.Test.Peers, []uint32{1, 2}) || p.TestTimeout() != 30*time.Second || p.Test.Linger != 3*time.Second {
		t.Errorf("Test = %+v", p.Test)
	}
	if p.Configures() {
		t.Error("test parameters alone do not configure the agent")
	}
	p, err = Parse("dpu.test=0")
	if err != nil || p.Test.Enabled || p.TestTimeout() != DefaultTestTimeout {
		t.Errorf("dpu.test=0: %+v, %v", p.Test, err)
	}
}

func TestParseLaterOverrides(t *testing.T) {
	p, err := Parse("dpu.node=1 dpu.node=2")
	if err != nil || p.Node != 2 {
		t.Errorf("Node = %d, %v", p.Node, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		cmdline string
		want    string // part of the error text
	}{
		{"dpu.node=x", "dpu.node"},
		{"dpu.node=4294967295", "broadcast"},
		{"dpu.node=-1", "dpu.node"},
		{"dpu.nodes=1", "unknown parameter"},
		{"dpu.links=", "empty"},
		{"dpu.links=eth0,eth0", "twice"},
		{"dpu.links=a/b", "netdev name"},
		{"dpu.links=averyveryverylongname0", "netdev name"},
		{"dpu.links=eth0=10.0.0.1", "link eth0"},
		{"dpu.links=eth0 dpu.peers=10.0.0.2", "needs an address"},
		{"dpu.links=eth0=10.0.0.1/24 dpu.peers=10.0.0.2,10.0.0.3", "2 peers for 1 links"},
		{"dpu.peers=nowhere", "ADDR:PORT"},
		{"dpu.linkkind=rdma", "xdp or afpacket"},
		{"dpu.ports=p0,udp", "NAME,KIND"},
		{`dpu.links=eth0 dpu.ports="p0 afpacket eth1"`, "used twice"},
		{"dpu.conf=etc/x", "absolute"},
		{"dpu.loglevel=loud", "debug, info"},
		{"dpu.test=maybe", "dpu.test"},
		{"dpu.test.peers=a", "dpu.test.peers"},
		{"dpu.test.timeout=-3s", "positive"},
		{"dpu.test.linger=2h", "0 to 1m"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.cmdline)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", tt.cmdline)
			continue
		}
		if !errors.Is(err, ErrParam) {
			t.Errorf("Parse(%q) = %v, does not wrap ErrParam", tt.cmdline, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want it to mention %q", tt.cmdline, err, tt.want)
		}
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse("dpu.node=x dpu.loglevel=loud")
	if err == nil || !strings.Contains(err.Error(), "dpu.node") || !strings.Contains(err.Error(), "dpu.loglevel") {
		t.Errorf("err = %v, want both problems", err)
	}
}
