package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/ctl/ctltest"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc/topo"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// dpuctl runs the command line args and returns its stdout and stderr.
func dpuctl(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, strings.NewReader(""), &out, &errOut, args)
	return out.String(), errOut.String(), err
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

func TestGoldenOutput(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	cases := []struct {
		golden string
		args   []string
	}{
		{"route", []string{"route", "show"}},
		{"route.json", []string{"-j", "route", "show"}},
		{"link", []string{"link", "show"}},
		{"link.json", []string{"-j", "link", "show"}},
		{"neigh", []string{"neigh", "show"}},
		{"neigh.json", []string{"-j", "neigh"}},
		{"stats", []string{"stats"}},
		{"stats.json", []string{"-j", "stats"}},
		{"topo", []string{"topo", "show"}},
		{"topo.dot", []string{"topo", "show", "--dot"}},
		{"topo.json", []string{"-j", "topo", "show"}},
		{"pathcache", []string{"pathcache", "show"}},
		{"pathcache.json", []string{"-j", "pathcache", "show"}},
		{"owner", []string{"owner", "show"}},
		{"owner.json", []string{"-j", "owner", "show"}},
		{"clock", []string{"clock", "show"}},
		{"clock.json", []string{"-j", "clock", "show"}},
		{"gpu", []string{"gpu", "show"}},
		{"gpu.json", []string{"-j", "gpu", "show"}},
		{"quota", []string{"quota", "show"}},
		{"quota.json", []string{"-j", "quota", "show"}},
		{"numa", []string{"numa", "show"}},
		{"numa.json", []string{"-j", "numa", "show"}},
		{"page", []string{"page", "show", gva.New(0, 0x7, 0, 0).String()}},
		{"page.json", []string{"page", "show", "-j", gva.New(0, 0x7, 0, 0).String()}},
		// Abbreviations, a default command, and -j after the command.
		{"route", []string{"r", "s"}},
		{"route", []string{"ro"}},
		{"route.json", []string{"route", "show", "-j"}},
		{"link", []string{"l"}},
		{"neigh", []string{"n", "list"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			out, errOut, err := dpuctl(t, append([]string{"-s", sock}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %q", errOut)
			}
			golden(t, tc.golden, out)
		})
	}
}

// The JSON field names are an interface: scripts read them.
func TestJSONFieldNames(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	out, _, err := dpuctl(t, "-s", sock, "-j", "route", "show")
	if err != nil {
		t.Fatal(err)
	}
	var routes []map[string]any
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		t.Fatal(err)
	}
	if len(routes) != 4 {
		t.Fatalf("%d routes", len(routes))
	}
	for _, r := range routes {
		for field, kind := range map[string]string{"dst": "number", "port": "string", "next_hop": "number", "hops": "number", "port_index": "number"} {
			v, ok := r[field]
			got := "missing"
			switch v.(type) {
			case float64:
				got = "number"
			case string:
				got = "string"
			}
			if !ok || got != kind {
				t.Errorf("route %v: %q is %s, want %s", r, field, got, kind)
			}
		}
	}
	if r := routes[2]; r["dst"] != 2.0 || r["port"] != "p0" || r["next_hop"] != 1.0 || r["hops"] != 2.0 {
		t.Errorf("route to 2: %v", r)
	}

	out, _, err = dpuctl(t, "-s", sock, "-j", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	var links []map[string]any
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"index", "name", "kind", "state", "mtu", "peer", "session", "tx_datagrams", "tx_bytes",
		"rx_datagrams", "rx_bytes", "tx_messages", "rx_messages", "retransmits", "crc_errors", "duplicates", "rtt_ns", "counters", "channels"} {
		if _, ok := links[0][f]; !ok {
			t.Errorf("link JSON lacks %q", f)
		}
	}
	if links[0]["state"] != "up" || links[1]["state"] != "down" {
		t.Errorf("link states %v %v", links[0]["state"], links[1]["state"])
	}
	if c, ok := links[0]["counters"].([]any); !ok || len(c) != 0 {
		t.Errorf("a link without counters has %#v, want []", links[0]["counters"])
	}
	if c, ok := links[1]["channels"].([]any); !ok || len(c) != 0 {
		t.Errorf("a one-channel link has channels %#v, want []", links[1]["channels"])
	}
	chans, _ := links[0]["channels"].([]any)
	if len(chans) != 2 {
		t.Fatalf("link p0 lists %d channels, want 2", len(chans))
	}
	for _, f := range []string{"index", "name", "state", "counters"} {
		if _, ok := chans[0].(map[string]any)[f]; !ok {
			t.Errorf("channel JSON lacks %q", f)
		}
	}
}

func TestEmptyListsAreEmptyJSONArrays(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Snapshot{}))
	for _, obj := range []string{"route", "link", "neigh", "pathcache", "owner", "gpu"} {
		out, _, err := dpuctl(t, "-s", sock, "-j", obj, "show")
		if err != nil {
			t.Fatal(err)
		}
		if out != "[]\n" {
			t.Errorf("%s: %q, want []", obj, out)
		}
		out, _, err = dpuctl(t, "-s", sock, obj, "show")
		if obj == "link" {
			if err != nil || out != "" {
				t.Errorf("%s text: %q %v, want nothing", obj, out, err)
			}
			continue
		}
		// An empty table still has its header: the person sees it is empty.
		if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); err != nil || len(lines) != 1 || lines[0] != strings.ToUpper(lines[0]) || lines[0] == "" {
			t.Errorf("%s text: %q %v, want the header alone", obj, out, err)
		}
	}
}

func TestTopoPlan(t *testing.T) {
	want, err := topo.Plan(16, 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	var text, dot bytes.Buffer
	want.WriteText(&text)
	want.Graph.WriteDot(&dot)

	// Computed locally: no socket is needed.
	out, _, err := dpuctl(t, "-s", "/nonexistent/ctl.sock", "topo", "plan", "--nodes", "16", "--ports", "3", "--seed", "7")
	if err != nil || out != text.String() {
		t.Fatalf("text plan: %v\n%s", err, out)
	}
	out, _, err = dpuctl(t, "topo", "plan", "-nodes", "16", "-ports", "3", "-seed", "7", "--dot")
	if err != nil || out != dot.String() {
		t.Fatalf("dot plan: %v\n%s", err, out)
	}
	out, _, err = dpuctl(t, "-j", "topo", "plan", "--nodes", "16", "--ports", "3", "--seed", "7")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Nodes, Ports, Diameter int
		Links                  []map[string]int
		Record                 struct{ Ports, Diameter, Nodes int }
		RecordGap              int `json:"record_gap"`
		LiftEvaluations        int `json:"lift_evaluations"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Nodes != 16 || p.Ports != 3 || p.Diameter != want.Diameter || len(p.Links) != len(want.Links) {
		t.Fatalf("json plan %+v", p)
	}
	// the largest known cubic graph of diameter 3 has 20 nodes
	if p.Record.Ports != 3 || p.Record.Diameter != 3 || p.Record.Nodes != 20 || p.RecordGap != p.Diameter-3 ||
		p.LiftEvaluations != want.LiftEvaluations || p.LiftEvaluations == 0 {
		t.Fatalf("json plan record %+v gap %d, %d lift evaluations", p.Record, p.RecordGap, p.LiftEvaluations)
	}

	for _, args := range [][]string{
		{"topo", "plan"},
		{"topo", "plan", "--nodes", "4"},
		{"topo", "plan", "--nodes", "x", "--ports", "3"},
	} {
		if _, _, err := dpuctl(t, args...); !isUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if _, _, err := dpuctl(t, "topo", "plan", "--nodes", "10", "--ports", "1"); !errors.Is(err, topo.ErrImpossible) {
		t.Errorf("impossible plan: %v", err)
	}
}

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

func TestCommandLineErrors(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"route", "frobnicate"},
		{"route", "show", "extra"},
		{"-x", "route"},
		{"gpu", "set"},
		{"gpu", "set", "mem", "1G"},
		{"gpu", "set", "pid"},
		{"gpu", "set", "pid", "12", "color", "red"},
		{"gpu", "set", "pid", "12", "quota", "150"},
		{"gpu", "set", "pid", "12", "mem", "lots"},
		{"gpu", "set", "pid", "12", "device", "64", "mem", "1G"},
		{"quota", "set"},
		{"quota", "set", "uid", "7"},
		{"quota", "set", "pages", "7"},
		{"quota", "set", "uid", "x", "pages", "7"},
		{"quota", "set", "uid", "7", "pages"},
		{"quota", "set", "uid", "7", "bytes", "lots"},
		{"quota", "set", "uid", "7", "files", "3"},
	} {
		out, _, err := dpuctl(t, append([]string{"-s", sock}, args...)...)
		if !isUsage(err) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
		if out != "" {
			t.Errorf("%q wrote %q to stdout", args, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, err := dpuctl(t, "--version")
	if err != nil || !strings.HasPrefix(out, "dpuctl ") {
		t.Errorf("--version: %v %q", err, out)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"h"}} {
		out, _, err := dpuctl(t, args...)
		if err != nil || !strings.HasPrefix(out, "Usage: dpuctl") {
			t.Errorf("%v: %v %q", args, err, out)
		}
	}
}

func TestAgentErrors(t *testing.T) {
	out, _, err := dpuctl(t, "-s", filepath.Join(t.TempDir(), "ctl.sock"), "route", "show")
	if err == nil || !strings.Contains(err.Error(), "is dpu-agent running") || out != "" {
		t.Errorf("no agent: %v, stdout %q", err, out)
	}
	_, sock := ctltest.Serve(t, ctltest.Base(ctltest.NewSource(ctltest.Sample())))
	out, _, err = dpuctl(t, "-s", sock, "pathcache", "show")
	if !errors.Is(err, syscall.EOPNOTSUPP) || out != "" {
		t.Errorf("pathcache from an agent without it: %v, stdout %q", err, out)
	}
}

func TestDefaultSocketFromRunDir(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	t.Setenv("DPU_RUN_DIR", filepath.Dir(sock))
	out, _, err := dpuctl(t, "route", "show")
	if err != nil || !strings.Contains(out, "2    1      p0   2") {
		t.Fatalf("%v %q", err, out)
	}
	t.Setenv("DPU_RUN_DIR", "")
	if got := defaultSocket(); got != "/run/dpu/ctl.sock" {
		t.Errorf("default socket %q", got)
	}
}

func TestGPUSet(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	if out, _, err := dpuctl(t, "-s", sock, "gpu", "limits"); err != nil || out != "TARGET  DEVICE  MEM-LIMIT  QUOTA\n" {
		t.Fatalf("gpu limits with none set: %q %v, want the header alone", out, err)
	}
	for _, bad := range [][]string{{"mem", "lots"}, {"quota", "lots"}, {"quota", "101%"}, {"device", "x", "mem", "1G"}} {
		_, _, err := dpuctl(t, append([]string{"-s", sock, "gpu", "set", "pid", "4242"}, bad...)...)
		if err == nil || strings.Contains(err.Error(), "strconv") || !strings.Contains(err.Error(), "want ") {
			t.Errorf("gpu set pid 4242 %v: %v, want what it wants without strconv's words", bad, err)
		}
	}
	if _, _, err := dpuctl(t, "-s", sock, "gpu", "set", "pid", "4242", "mem", "2G", "quota", "20%"); err != nil {
		t.Fatal(err)
	}
	out, _, err := dpuctl(t, "-s", sock, "-j", "gpu")
	if err != nil {
		t.Fatal(err)
	}
	var procs []gpuctl.Process
	if err := json.Unmarshal([]byte(out), &procs); err != nil {
		t.Fatal(err)
	}
	if procs[0].MemoryLimit != 2<<30 || procs[0].KernelQuota != 20 {
		t.Fatalf("after gpu set: %+v", procs[0])
	}
	if _, _, err := dpuctl(t, "-s", sock, "gpu", "set", "pid", "1"); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("unknown pid: %v", err)
	}
	if _, _, err := dpuctl(t, "-s", sock, "gpu", "set", "cgroup", "/kubepods/pod1", "device", "0", "mem", "1G"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dpuctl(t, "-s", sock, "gpu", "set", "cgroup", "/a", "pid", "4242"); err == nil {
		t.Fatal("two targets accepted")
	}
	out, _, err = dpuctl(t, "gpu", "limits", "-s", sock)
	if err != nil {
		t.Fatal(err)
	}
	if want := "TARGET                 DEVICE        MEM-LIMIT  QUOTA\n" +
		"cgroup /kubepods/pod1  device 0      1.0GiB     unlimited\n" +
		"pid 4242               every device  2.0GiB     20%\n"; out != want {
		t.Fatalf("gpu limits:\n%s", out)
	}
}

// lockedBuffer is written by the monitor and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestMonitor(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 250000000, time.UTC)
	events := []ctl.Event{
		{Kind: ctl.EventLinkDown, Time: at, Node: 1, Port: "p0", Reason: "no heartbeat for 300ms"},
		{Kind: ctl.EventRouteChange, Time: at, Node: 2, Port: "p1", NextHop: 3, Hops: 2},
		{Kind: ctl.EventRouteChange, Time: at, Node: 1, Hops: -1},
		{Kind: ctl.EventHostFault, Time: at, Node: 0, Page: ctltest.Sample().OwnedPages[0].Key, Reason: "pin held past its bound; revoked"},
		{Kind: ctl.EventLinkUp, Time: at, Node: 1, Port: "p0"},
		{Kind: 99, Name: "page-migrated", Time: at, Node: 4},
		{Kind: ctl.EventLinkUp, Time: at, Node: 5, Port: "p1", Cluster: &ctl.ClusterTime{Time: 7384*time.Second + 5, Error: 31 * time.Microsecond, Ref: 0}},
	}
	for _, tc := range []struct {
		golden string
		flags  []string
	}{{"monitor", nil}, {"monitor.json", []string{"-j"}}} {
		t.Run(tc.golden, func(t *testing.T) {
			srv, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errOut lockedBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, strings.NewReader(""), &out, &errOut, append(append([]string{"-s", sock}, tc.flags...), "monitor"))
			}()
			waitFor(t, func() bool { return srv.Subscribers() == 1 })
			for _, ev := range events {
				srv.Publish(ev)
			}
			waitFor(t, func() bool { return strings.Count(out.String(), "\n") == len(events) })
			cancel() // an interrupt ends a monitor normally
			if err := <-done; err != nil {
				t.Fatalf("monitor: %v", err)
			}
			golden(t, tc.golden, out.String())
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestQuotaSet: quota set sends the uid's limits (a size for bytes), and
// quota show lists them.
func TestQuotaSet(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	if _, errOut, err := dpuctl(t, "-s", sock, "quota", "set", "uid", "1001", "pages", "100", "bytes", "1G"); err != nil {
		t.Fatalf("%v %s", err, errOut)
	}
	if _, errOut, err := dpuctl(t, "-s", sock, "q", "set", "uid", "4242", "pages", "5"); err != nil {
		t.Fatalf("%v %s", err, errOut)
	}
	out, _, err := dpuctl(t, "-s", sock, "-j", "quota", "show")
	if err != nil {
		t.Fatal(err)
	}
	var qs []ctl.Quota
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatal(err)
	}
	got := map[uint32]ctl.Quota{}
	for _, q := range qs {
		if !q.Default {
			got[q.UID] = q
		}
	}
	if q := got[1001]; q.PagesLimit != 100 || q.BytesLimit != 1<<30 || q.PagesUsed != 64 {
		t.Errorf("uid 1001: %+v", q)
	}
	if q := got[4242]; q.PagesLimit != 5 || q.BytesLimit != 2048*4096 {
		t.Errorf("uid 4242 (bytes from the default): %+v", q)
	}
}

// page show names the page; one the node holds no record of is an error
// that says so.
func TestPageShowErrors(t *testing.T) {
	_, sock := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	if _, _, err := dpuctl(t, "-s", sock, "page", "show"); !isUsage(err) {
		t.Errorf("page show without a GVA: %v", err)
	}
	if _, _, err := dpuctl(t, "-s", sock, "page", "show", "gva:xyz"); !isUsage(err) {
		t.Errorf("page show gva:xyz: %v", err)
	}
	_, _, err := dpuctl(t, "-s", sock, "page", "show", gva.New(0, 0x99, 0, 0).String())
	if err == nil || !strings.Contains(err.Error(), "no record") || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("page show of an unknown page: %v", err)
	}
}
