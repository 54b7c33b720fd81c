package main

import (
	"strings"
	"testing"
	"time"
)

// A console as a passing guest prints it: kernel lines, u-root's init,
// uinit and the agent interleaved with the self-test's markers.
const passingConsole = `[    0.000000] Booting Linux on physical CPU 0x0000000000 [0x410fd083]
[    2.100000] Run /init as init process
2026/11/22 06:00:00 Welcome to u-root!
dpu-boot: modules: loaded 6, already present 0 (kernel 6.1.0-56-arm64)
dpu-boot: link lo up
dpu-boot: link eth0 up
dpu-boot: starting dpu-agent --node 1 --port "p0 xdp eth0"
time=2026-11-22T06:00:03Z level=INFO msg="dpu-agent ready" node=1 run_dir=/run/dpu ports=[p0] poll=false
DPU-TEST START node=1 peers=[0]
DPU-TEST READY uptime=7.10s
DPU-TEST ROUTES uptime=9.20s
DPU-TEST OUT route-show: 0 via p0 hops 1
DPU-TEST OUT route-show: 1 local
DPU-TEST END route-show ok
DPU-TEST OUT stats: frames_rx 10
DPU-TEST END stats ok
DPU-TEST OUT neigh-show:
DPU-TEST END neigh-show error: exit status 1
DPU-TEST OUT route-json: [{"dst":0,"port":"p0","hops":1},
DPU-TEST OUT route-json:  {"dst":1,"port":"","hops":0}]
DPU-TEST END route-json ok
DPU-TEST OUT link-json: [{"index":0,"name":"p0","kind":"xdp","state":"up","counters":[{"name":"passed","value":0},{"name":"redirected","value":16}]},{"name":"p1","kind":"afpacket"}]
DPU-TEST END link-json ok
DPU-TEST DONE ok
`

func feed(c *console, start time.Time, text string) {
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		c.Line(start.Add(time.Duration(i+1)*time.Second), line+"\r")
	}
}

func TestConsoleReadsMarkers(t *testing.T) {
	start := time.Now()
	c := newConsole(start)
	feed(c, start, passingConsole)
	readyAt, guestReady, doneAt := c.timings()
	if readyAt != 8*time.Second || guestReady != "7.10s" || doneAt != 24*time.Second {
		t.Errorf("timings %v %q %v", readyAt, guestReady, doneAt)
	}
	if c.modulesLine() != "loaded 6, already present 0 (kernel 6.1.0-56-arm64)" {
		t.Errorf("modules %q", c.modulesLine())
	}
	if out, res := c.Check("route-show"); res != "ok" || len(out) != 2 || out[0] != "0 via p0 hops 1" {
		t.Errorf("route-show %q %q", out, res)
	}
	if out, res := c.Check("neigh-show"); res != "error: exit status 1" || len(out) != 1 || out[0] != "" {
		t.Errorf("neigh-show %q %q", out, res)
	}
	if err := c.verdict(1, []string{"route-show", "stats", "route-json"}, []string{"route-show"}); err != nil {
		t.Errorf("verdict: %v", err)
	}
	if err := c.verdict(0, nil, nil); err == nil || !strings.Contains(err.Error(), "node 1, want 0") {
		t.Errorf("wrong node: %v", err)
	}
	if err := c.verdict(1, []string{"neigh-show"}, nil); err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("failed check: %v", err)
	}
	if err := c.verdict(1, nil, []string{"pathcache-show"}); err == nil || !strings.Contains(err.Error(), "no result") {
		t.Errorf("missing check: %v", err)
	}
	lines, _ := c.Check("route-json")
	dsts, err := routeDsts(lines)
	if err != nil || !dsts[0] || !dsts[1] || len(dsts) != 2 {
		t.Errorf("routeDsts = %v, %v", dsts, err)
	}
	lines, _ = c.Check("link-json")
	kinds, err := linkKinds(lines)
	if err != nil || kinds["p0"] != "xdp (up, 16 frames redirected by XDP)" || kinds["p1"] != "afpacket" {
		t.Errorf("linkKinds = %v, %v", kinds, err)
	}
	if !strings.HasPrefix(c.Text(), "[    0.000000] Booting") || strings.Contains(c.Text(), "\r") {
		t.Errorf("Text keeps the raw log without carriage returns")
	}
}

func TestConsoleVerdictFailures(t *testing.T) {
	start := time.Now()
	c := newConsole(start)
	if err := c.verdict(0, nil, nil); err == nil || !strings.Contains(err.Error(), readyLine) {
		t.Errorf("no ready line: %v", err)
	}
	feed(c, start, `msg="dpu-agent ready" node=0`)
	if err := c.verdict(0, nil, nil); err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Errorf("unfinished: %v", err)
	}
	feed(c, start, "DPU-TEST DONE fail: no route to node(s) [1]")
	if err := c.verdict(0, nil, nil); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Errorf("failed: %v", err)
	}
	feed(c, start, "DPU-TEST END stats ok")
	c.done = "ok"
	if err := c.verdict(0, []string{"stats"}, nil); err != nil {
		t.Errorf("empty output allowed: %v", err)
	}
	if err := c.verdict(0, nil, []string{"stats"}); err == nil || !strings.Contains(err.Error(), "no output") {
		t.Errorf("empty output: %v", err)
	}
}

func TestConsoleWakesWaiters(t *testing.T) {
	c := newConsole(time.Now())
	done, changed := c.Done()
	if done != "" {
		t.Fatal(done)
	}
	c.Line(time.Now(), "DPU-TEST DONE ok")
	select {
	case <-changed:
	case <-time.After(time.Second):
		t.Fatal("no wake-up")
	}
	if done, _ := c.Done(); done != "ok" {
		t.Errorf("done = %q", done)
	}
}

func TestListening(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F91 0100007F:D2C4 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`
	if !listening(table, 8080) {
		t.Error("8080 listens")
	}
	if listening(table, 8081) {
		t.Error("8081 is an established connection, not a listener")
	}
	if listening(table, 80) {
		t.Error("80 is absent")
	}
}

func TestQemuArgs(t *testing.T) {
	q := qemuConfig{Qemu: "qemu-system-aarch64", Kernel: "k", Initrd: "i.cpio.gz", MemMiB: 1024}
	single := strings.Join(q.args(guestSpec{Append: []string{"dpu.test=1"}}), " ")
	for _, want := range []string{"-M virt", "-cpu cortex-a72", "-m 1024", "-nographic", "-no-reboot", "-kernel k", "-initrd i.cpio.gz", "console=ttyAMA0 panic=-1 dpu.test=1", "-nic none"} {
		if !strings.Contains(single, want) {
			t.Errorf("%q lacks %q", single, want)
		}
	}
	pair := strings.Join(q.args(guestSpec{Netdev: "socket,id=n0,listen=127.0.0.1:5555", MAC: "52:54:00:d9:00:01"}), " ")
	for _, want := range []string{"-netdev socket,id=n0,listen=127.0.0.1:5555", "-device virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:d9:00:01"} {
		if !strings.Contains(pair, want) {
			t.Errorf("%q lacks %q", pair, want)
		}
	}
}

func TestPairScenarioParameters(t *testing.T) {
	sc := pairScenario()
	if len(sc.Guests) != 2 {
		t.Fatal(len(sc.Guests))
	}
	a, b := strings.Join(sc.Guests[0].Append, " "), strings.Join(sc.Guests[1].Append, " ")
	if !strings.Contains(a, "dpu.node=0") || !strings.Contains(a, "dpu.test.peers=1") || !strings.Contains(b, "dpu.node=1") || !strings.Contains(b, "dpu.test.peers=0") {
		t.Errorf("parameters %q / %q", a, b)
	}
	if sc.Guests[0].MAC == sc.Guests[1].MAC {
		t.Error("both guests have one MAC")
	}
}

func TestConsoleMarkersOnlyAtLineStart(t *testing.T) {
	c := newConsole(time.Now())
	for _, line := range []string{
		"$ echo DPU-TEST DONE ok",           // the echo of a typed command
		"echo DPU-TEST OUT shell: $((6*7))", // typed ahead, echoed before the prompt
		"$ $ DPU-TEST OUT shell: 42",        // output after type-ahead prompts
	} {
		c.Line(time.Now(), line)
	}
	if done, _ := c.Done(); done != "" {
		t.Errorf("a typed command counted as the verdict %q", done)
	}
	if out, _ := c.Check("shell"); len(out) != 1 || out[0] != "42" {
		t.Errorf("shell output %q", out)
	}
	select {
	case <-c.Ready():
		t.Fatal("ready before the agent's line")
	default:
	}
	c.Line(time.Now(), `time=x level=INFO msg="dpu-agent ready" node=2`)
	select {
	case <-c.Ready():
	default:
		t.Fatal("Ready not closed by the agent's line")
	}
}

func TestShellScenario(t *testing.T) {
	sc := shellScenario()
	g := sc.Guests[0]
	if strings.Contains(strings.Join(g.Append, " "), "dpu.test") {
		t.Error("the shell scenario must boot without the self-test")
	}
	if g.Shell[len(g.Shell)-1] != "shutdown" {
		t.Error("the shell scenario must power the guest off")
	}
}
