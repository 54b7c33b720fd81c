package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/images/bootparam"
	"github.com/aitherion/dpu/images/kmod"
)

// fakeSystem is the in-memory twin of the booted machine.
type fakeSystem struct {
	mu         sync.Mutex
	cmdline    string
	files      map[string]bool
	appearsAt  map[string]int // netdev → LinkUp calls before it exists
	linkCalls  map[string]int
	up         []string
	addrs      map[string]netip.Prefix
	agentArgs  []string
	rxe        []string
	kills      int
	started    bool
	dpuctl     func(call int, args []string) ([]byte, error)
	calls      int
	poweredOff bool
	released   bool
	// mem connects to the host interface (nil: there is none).
	mem func(ctx context.Context) (hostMemory, error)
}

func newFakeSystem(cmdline string) *fakeSystem {
	return &fakeSystem{
		cmdline:   cmdline,
		files:     map[string]bool{},
		appearsAt: map[string]int{"lo": 0},
		linkCalls: map[string]int{},
		addrs:     map[string]netip.Prefix{},
		dpuctl: func(int, []string) ([]byte, error) {
			return []byte(`[{"dst":0,"port":"","hops":0}]`), nil
		},
	}
}

func (s *fakeSystem) Cmdline() (string, error) { return s.cmdline, nil }
func (s *fakeSystem) Release() (string, error) { return "6.1.0-test", nil }
func (s *fakeSystem) LoadModules(string) (kmod.Result, error) {
	return kmod.Result{}, fmt.Errorf("open: %w", fs.ErrNotExist)
}
func (s *fakeSystem) LinkUp(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.appearsAt[name]
	s.linkCalls[name]++
	if !ok || s.linkCalls[name] <= n {
		return errNoNetdev
	}
	s.up = append(s.up, name)
	return nil
}
func (s *fakeSystem) AddAddr(name string, addr netip.Prefix) error {
	s.addrs[name] = addr
	return nil
}
func (s *fakeSystem) FileExists(path string) bool { return s.files[path] }
func (s *fakeSystem) KillAgent() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kills++
	return nil
}
func (s *fakeSystem) AddRxe(name, netdev string) error {
	s.rxe = append(s.rxe, name+"@"+netdev)
	return nil
}
func (s *fakeSystem) StartAgent(args []string) error {
	s.started, s.agentArgs = true, args
	return nil
}
func (s *fakeSystem) Dpuctl(_ context.Context, args ...string) ([]byte, error) {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.mu.Unlock()
	return s.dpuctl(call, args)
}
func (s *fakeSystem) HostMemory(ctx context.Context) (hostMemory, error) {
	if s.mem == nil {
		return nil, errors.New("no host interface in this test")
	}
	return s.mem(ctx)
}
func (s *fakeSystem) Uptime() time.Duration { return 3 * time.Second }
func (s *fakeSystem) PowerOff() error       { s.poweredOff = true; return nil }
func (s *fakeSystem) ReleaseTerminal() error {
	s.released = true
	return nil
}

func bootWith(t *testing.T, s *fakeSystem) (console, logs string) {
	t.Helper()
	var c, l bytes.Buffer
	if err := boot(context.Background(), log.New(&l, "", 0), &c, s); err != nil {
		t.Fatal(err)
	}
	return c.String(), l.String()
}

func TestPlan(t *testing.T) {
	none := func(string) bool { return false }
	bp, err := plan("console=ttyAMA0", none)
	if err != nil || bp.Config != "" || len(bp.AgentArgs) != 0 {
		t.Errorf("no parameters, no file: %+v, %v", bp, err)
	}
	image := func(p string) bool { return p == DefaultConfig }
	bp, err = plan("dpu.node=4", image)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--config", DefaultConfig, "--node", "4"}; !reflect.DeepEqual(bp.AgentArgs, want) {
		t.Errorf("AgentArgs = %q, want %q", bp.AgentArgs, want)
	}
	if _, err := plan("dpu.conf=/etc/dpu/other.conf", image); err == nil {
		t.Error("a missing dpu.conf file was accepted")
	}
	both := func(string) bool { return true }
	bp, err = plan("dpu.conf=/etc/dpu/other.conf", both)
	if err != nil || bp.Config != "/etc/dpu/other.conf" {
		t.Errorf("dpu.conf: %+v, %v", bp, err)
	}
}

func TestBootStartsAgentOnLinks(t *testing.T) {
	s := newFakeSystem("console=ttyAMA0 dpu.node=2 dpu.links=eth0=10.0.0.1/30,eth1 dpu.peers=10.0.0.2,10.0.0.6")
	s.appearsAt["eth0"] = 3 // the driver is still probing for a while
	s.appearsAt["eth1"] = 0
	_, err := plan(s.cmdline, s.FileExists)
	if err == nil {
		t.Fatal("a peer on a link without an address was accepted")
	}
	s.cmdline = "console=ttyAMA0 dpu.node=2 dpu.links=eth0=10.0.0.1/30,eth1"
	_, logs := bootWith(t, s)
	if !reflect.DeepEqual(s.up, []string{"lo", "eth0", "eth1"}) {
		t.Errorf("up = %q", s.up)
	}
	if s.addrs["eth0"] != netip.MustParsePrefix("10.0.0.1/30") {
		t.Errorf("addrs = %v", s.addrs)
	}
	want := []string{"--node", "2", "--port", "p0 xdp eth0", "--port", "p1 xdp eth1"}
	if !s.started || !reflect.DeepEqual(s.agentArgs, want) {
		t.Errorf("agent args %q, want %q", s.agentArgs, want)
	}
	if s.poweredOff {
		t.Error("powered off outside test mode")
	}
	if !s.released {
		t.Error("the console was not released for the shell")
	}
	if !strings.Contains(logs, "carries none") || !strings.Contains(logs, `"p0 xdp eth0"`) {
		t.Errorf("logs:\n%s", logs)
	}
}

func TestBootCreatesSoftRoCE(t *testing.T) {
	s := newFakeSystem("console=ttyS0 dpu.node=1 dpu.rxe=eth0=169.254.77.2/30 dpu.ports=p0,rdma,rxe0,169.254.77.2:7700,169.254.77.1:7700")
	s.appearsAt["eth0"] = 0
	bootWith(t, s)
	if !reflect.DeepEqual(s.up, []string{"lo", "eth0"}) || s.addrs["eth0"] != netip.MustParsePrefix("169.254.77.2/30") {
		t.Errorf("up %q addrs %v", s.up, s.addrs)
	}
	if !reflect.DeepEqual(s.rxe, []string{"rxe0@eth0"}) {
		t.Errorf("soft-RoCE devices %q", s.rxe)
	}
	want := []string{"--node", "1", "--port", "p0 rdma rxe0 169.254.77.2:7700 169.254.77.1:7700"}
	if !reflect.DeepEqual(s.agentArgs, want) {
		t.Errorf("agent args %q, want %q", s.agentArgs, want)
	}
}

func TestBootRefusesBadParameters(t *testing.T) {
	s := newFakeSystem("dpu.node=x dpu.links=eth0")
	console, logs := bootWith(t, s)
	if s.started || s.poweredOff || console != "" {
		t.Errorf("started %v, powered off %v, console %q", s.started, s.poweredOff, console)
	}
	if !strings.Contains(logs, "not starting dpu-agent") || !strings.Contains(logs, "dpu.node") {
		t.Errorf("logs:\n%s", logs)
	}

	s = newFakeSystem("dpu.node=x dpu.test=1")
	console, _ = bootWith(t, s)
	if s.started || !s.poweredOff || !strings.Contains(console, "DPU-TEST DONE fail: boot parameters") {
		t.Errorf("test mode: started %v, powered off %v, console %q", s.started, s.poweredOff, console)
	}
}

func TestBringUpGivesUp(t *testing.T) {
	s := newFakeSystem("")
	var l bytes.Buffer
	err := bringUp(context.Background(), log.New(&l, "", 0), s, []bootparam.Link{{Dev: "eth9"}}, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "eth9") {
		t.Errorf("err = %v", err)
	}
}

func TestSelftestPasses(t *testing.T) {
	s := newFakeSystem("dpu.node=0 dpu.links=eth0 dpu.test=1 dpu.test.peers=1 dpu.test.timeout=10s dpu.test.linger=50ms")
	s.appearsAt["eth0"] = 0
	s.dpuctl = func(call int, args []string) ([]byte, error) {
		switch {
		case call <= 2: // the agent is still starting
			return nil, errors.New("dial /run/dpu/ctl.sock: no such file")
		case strings.Join(args, " ") == "-j route show" && call < 5:
			return []byte(`[{"dst":0,"hops":0}]`), nil
		case strings.Join(args, " ") == "-j route show":
			return []byte("[\n  {\"dst\": 0, \"hops\": 0},\n  {\"dst\": 1, \"port\": \"p0\", \"hops\": 1}\n]\n"), nil
		case args[0] == "route":
			return []byte("0 local\n1 via p0 hops 1\n"), nil
		}
		return []byte("ok\n"), nil
	}
	// Node 1 (the peer) swaps node 0's value through its own node.
	dial := hostFabric(t, 0, 1)
	s.mem = dial[0]
	peer := make(chan error, 1)
	go func() {
		_, err := crossCAS(context.Background(), dial[1], 1, []uint32{0})
		peer <- err
	}()
	console, logs := bootWith(t, s)
	if err := <-peer; err != nil {
		t.Errorf("peer: %v", err)
	}
	if !strings.Contains(logs, "staying up 50ms") {
		t.Errorf("no linger:\n%s", logs)
	}
	for _, want := range []string{
		"DPU-TEST START node=0 peers=[1]\n",
		`DPU-TEST OUT route-json: [{"dst":0,"hops":0},{"dst":1,"port":"p0","hops":1}]` + "\n",
		"DPU-TEST READY uptime=3.00s\n",
		"DPU-TEST ROUTES uptime=3.00s\n",
		"DPU-TEST OUT route-show: 1 via p0 hops 1\n",
		"DPU-TEST END route-show ok\n",
		"DPU-TEST END stats ok\n",
		"DPU-TEST OUT cas: owner gva:00000000000000000000100000001000 value 6840346601316155434 then 6840346601316155435 after ",
		"DPU-TEST END cas ok\n",
		"DPU-TEST DONE ok\n",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	if !s.poweredOff {
		t.Error("test mode did not power off")
	}
}

func TestSelftestFailsWithoutRoute(t *testing.T) {
	s := newFakeSystem("dpu.test=1 dpu.test.peers=7 dpu.test.timeout=600ms")
	console, _ := bootWith(t, s)
	if !strings.Contains(console, "DPU-TEST DONE fail: no route to node(s) [7]") {
		t.Errorf("console:\n%s", console)
	}
	// The checks still run, for the diagnosis.
	if !strings.Contains(console, "DPU-TEST END stats ok") {
		t.Errorf("checks did not run:\n%s", console)
	}
}

func TestSelftestFailsWhenAgentNeverServes(t *testing.T) {
	s := newFakeSystem("dpu.test=1 dpu.test.timeout=500ms")
	s.dpuctl = func(int, []string) ([]byte, error) { return nil, errors.New("connection refused") }
	console, _ := bootWith(t, s)
	if !strings.Contains(console, "DPU-TEST DONE fail: agent not serving") || !strings.Contains(console, "connection refused") {
		t.Errorf("console:\n%s", console)
	}
}

func TestSelftestFailsOnCheckError(t *testing.T) {
	s := newFakeSystem("dpu.test=1 dpu.test.timeout=5s")
	s.dpuctl = func(_ int, args []string) ([]byte, error) {
		if args[0] == "neigh" {
			return []byte("partial\n"), errors.New("exit status 1: no neighbours\nsecond line")
		}
		return []byte("x\n"), nil
	}
	console, _ := bootWith(t, s)
	for _, want := range []string{
		"DPU-TEST OUT neigh-show: partial\n",
		"DPU-TEST END neigh-show error: exit status 1: no neighbours; second line\n",
		"DPU-TEST DONE fail: neigh-show: exit status 1: no neighbours\n",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
}

func TestMissingRoutes(t *testing.T) {
	tests := []struct {
		table string
		want  []uint32
	}{
		{`[{"dst":0},{"dst":1},{"dst":2}]`, nil},
		{`[{"dst":0},{"dst":2}]`, []uint32{1}},
		{`{"routes":[{"dst":1},{"dst":2}]}`, nil},
		{`[{"dst":1.5},{"dst":-2}]`, []uint32{1, 2}},
		{`not json`, []uint32{1, 2}},
	}
	for _, tt := range tests {
		if got := missingRoutes([]byte(tt.table), []uint32{1, 2, 1}); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("missingRoutes(%s) = %v, want %v", tt.table, got, tt.want)
		}
	}
}

func TestRestartAgentWaitsForTheNewAgent(t *testing.T) {
	s := newFakeSystem("")
	s.dpuctl = func(call int, args []string) ([]byte, error) {
		switch {
		case call <= 2: // the old agent is gone, the new one not yet up
			return nil, errors.New("dial /run/dpu/ctl.sock: connection refused")
		case call <= 4: // up, not yet routing
			return []byte(`[{"dst":0,"hops":0}]`), nil
		}
		return []byte(`[{"dst":0,"hops":0},{"dst":1,"hops":1}]`), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	line, err := restartAgent(ctx, s, []uint32{1})
	if err != nil || s.kills != 1 || !strings.Contains(line, "routes to [1]") {
		t.Fatalf("line %q, err %v, kills %d", line, err, s.kills)
	}
	// An agent that never comes back fails within the bound.
	s.dpuctl = func(int, []string) ([]byte, error) { return nil, errors.New("refused") }
	ctx2, cancel2 := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel2()
	if _, err := restartAgent(ctx2, s, []uint32{1}); err == nil {
		t.Fatal("restart passed with no agent")
	}
}
