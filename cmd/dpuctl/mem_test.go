package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

// memHosts serves two hosts of one fabric of real node cores (machines 1
// and 2; a pin outlives its bound in a second) and returns their dpu0.sock
// paths.
func memHosts(t *testing.T) (*hostiftest.Fabric, string, string) {
	t.Helper()
	fab := hostiftest.Start(t, hostiftest.Config{PinBound: time.Second})
	var paths [2]string
	for i := range paths {
		be := fab.Node(gva.MachineIndex(i + 1))
		paths[i] = hostiftest.StartServer(t, be, hostif.Options{})
	}
	return fab, paths[0], paths[1]
}

// dpuctlIn runs dpuctl with stdin.
func dpuctlIn(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, strings.NewReader(stdin), &out, &errOut, args)
	return out.String(), errOut.String(), err
}

// transcript runs mem command lines against host sockets (-d is added:
// "@2" as the first word picks the second host) and records them with
// their input ("< "), output, standard error ("2> ") and failure, as a
// person at a shell would see them.
type transcript struct {
	t      *testing.T
	hosts  []string
	b      strings.Builder
	prefix []string
}

func (tr *transcript) run(stdin string, line ...string) {
	tr.t.Helper()
	host, name := tr.hosts[0], "$HOST1"
	if len(line) > 0 && line[0] == "@2" {
		host, name = tr.hosts[1], "$HOST2"
		line = line[1:]
	}
	args := append(append([]string{"-d", host}, tr.prefix...), line...)
	out, errOut, err := dpuctlIn(tr.t, stdin, args...)
	shown := append([]string{}, tr.prefix...)
	for _, a := range line {
		if strings.ContainsAny(a, " $") {
			a = "'" + a + "'"
		}
		shown = append(shown, a)
	}
	fmt.Fprintf(&tr.b, "$ dpuctl -d %s %s\n", name, strings.Join(shown, " "))
	if stdin != "" {
		for _, l := range strings.Split(strings.TrimSuffix(stdin, "\n"), "\n") {
			fmt.Fprintf(&tr.b, "< %s\n", l)
		}
	}
	tr.b.WriteString(out)
	for _, l := range strings.Split(strings.TrimSuffix(errOut, "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(&tr.b, "2> %s\n", l)
		}
	}
	if err != nil {
		var st exitStatus
		switch {
		case errors.As(err, &st):
			fmt.Fprintf(&tr.b, "[exit %d]\n", st.code)
		case isUsage(err):
			fmt.Fprintf(&tr.b, "[usage] %v\n", err)
		default:
			fmt.Fprintf(&tr.b, "[error] %v\n", err)
		}
	}
}

func TestMemGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		prefix []string
	}{{"mem", nil}, {"mem.json", []string{"-j"}}} {
		t.Run(tc.golden, func(t *testing.T) {
			_, h1, h2 := memHosts(t)
			tr := &transcript{t: t, hosts: []string{h1, h2}, prefix: tc.prefix}
			const g = "gva:00000000000000010000100000001000" // machine 1's first page
			tr.run("", "mem", "alloc", "8K", "--mode", "0640")
			tr.run("", "mem", "alloc")
			tr.run("", "mem", "write", g, "--u64", "41")
			tr.run("", "mem", "add", g, "1")
			tr.run("", "@2", "mem", "add", g, "-2")
			tr.run("", "mem", "cas", g, "40", "100")
			tr.run("", "@2", "mem", "cas", g, "40", "7")
			tr.run("", "mem", "write", g+"+8", "48656c6c6f2c20646575782100")
			tr.run("", "@2", "mem", "read", g, "24")
			tr.run("", "mem", "read", g, "--u64")
			tr.run("", "mem", "read", g+"+4090", "12") // across a page boundary
			tr.run("", "mem", "where", g)
			tr.run("", "@2", "mem", "where", g+"+8")
			tr.run("", "mem", "lock", g, "--timeout", "1s", "--", "sh", "-c", "echo holding $DPU_LOCKED_GVA")
			tr.run("", "mem", "lock", g, "--", "sh", "-c", "exit 3")
			tr.run("lock "+g+"\nread "+g+" --u64\nadd "+g+" 1 # under the lock\n\nunlock "+g+"\nlock "+g+"\n",
				"mem", "batch")
			tr.run("", "@2", "mem", "where", g)
			tr.run("", "mem", "free", g)
			tr.run("", "mem", "read", g)
			golden(t, tc.golden, tr.b.String())
		})
	}
}

func TestMemCommandLineErrors(t *testing.T) {
	_, h1, _ := memHosts(t)
	const g = "gva:00000000000000010000100000001000"
	for _, args := range [][]string{
		{"mem"},
		{"mem", "frob"},
		{"mem", "alloc", "0"},
		{"mem", "alloc", "lots"},
		{"mem", "alloc", "--mode", "999"},
		{"mem", "alloc", "--color", "red"},
		{"mem", "read"},
		{"mem", "read", "0x1000"},
		{"mem", "read", "gva:123"},
		{"mem", "read", g, "16", "--u64"},
		{"mem", "read", g, "0"},
		{"mem", "write", g},
		{"mem", "write", g, "abc"},
		{"mem", "write", g, "--u64", "x"},
		{"mem", "cas", g, "1"},
		{"mem", "add", g, "one"},
		{"mem", "where", g, "extra"},
		{"mem", "lock", g},
		{"mem", "lock", g, "--timeout", "soon", "--", "true"},
		{"mem", "unlock", g},
		{"mem", "free", g, "--", "true"},
		{"mem", "where", g, "--timeout"},
	} {
		out, _, err := dpuctlIn(t, "", append([]string{"-d", h1}, args...)...)
		if !isUsage(err) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
		if out != "" {
			t.Errorf("%q wrote %q to stdout", args, out)
		}
	}
	// A batch stops at its first bad line and names it.
	out, _, err := dpuctlIn(t, "alloc\nbogus\nalloc\n", "-d", h1, "mem", "batch")
	if !isUsage(err) || !strings.Contains(err.Error(), "line 2") || strings.Count(out, "gva:") != 1 {
		t.Errorf("batch with a bad line: %v, stdout %q", err, out)
	}
	if _, _, err := dpuctlIn(t, "batch\n", "-d", h1, "mem", "batch"); !isUsage(err) {
		t.Errorf("batch in batch: %v", err)
	}
}

func TestMemAgentErrors(t *testing.T) {
	_, h1, h2 := memHosts(t)
	out, _, err := dpuctlIn(t, "", "-d", filepath.Join(t.TempDir(), "dpu0.sock"), "mem", "alloc")
	if err == nil || isUsage(err) || !strings.Contains(err.Error(), "is dpu-agent running") || out != "" {
		t.Errorf("no agent: %v, stdout %q", err, out)
	}
	if _, _, err := dpuctlIn(t, "", "-d", h1, "mem", "read", "gva:00000000000000010000100000009000"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("read of an unallocated page: %v, want ENOENT", err)
	}

	// A lock held elsewhere makes mem lock wait its timeout, and the
	// command does not run.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, h2, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Lock(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	out, _, err = dpuctlIn(t, "", "-d", h1, "mem", "lock", g.String(), "--timeout", "100ms", "--", "echo", "ran")
	if !errors.Is(err, syscall.ETIMEDOUT) || out != "" {
		t.Errorf("lock held elsewhere: %v, stdout %q", err, out)
	}
	// A pin revoked while the command runs is reported, not hidden.
	if err := c.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	var st exitStatus
	_, _, err = dpuctlIn(t, "", "-d", h1, "mem", "lock", g.String(), "--",
		"sh", "-c", "sleep 0.2; exit 4")
	if !errors.As(err, &st) || st.code != 4 {
		t.Fatalf("command status: %v", err)
	}
	// the command outlives the fabric's pin bound: the core revokes the lock
	_, _, err = dpuctlIn(t, "", "-d", h1, "mem", "lock", g.String(), "--", "sleep", "3")
	if !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("revoked lock: %v", err)
	}
}

func TestMemDefaultSocket(t *testing.T) {
	_, h1, h2 := memHosts(t)
	t.Setenv("DPU_SOCKET", "")
	t.Setenv("DPU_RUN_DIR", filepath.Dir(h2))
	out, _, err := dpuctlIn(t, "", "mem", "alloc")
	if err != nil || out != "gva:00000000000000020000100000001000\n" {
		t.Fatalf("alloc through $DPU_RUN_DIR: %v %q", err, out)
	}
	t.Setenv("DPU_SOCKET", h1)
	out, _, err = dpuctlIn(t, "", "mem", "alloc")
	if err != nil || out != "gva:00000000000000010000100000001000\n" {
		t.Fatalf("alloc through $DPU_SOCKET: %v %q", err, out)
	}
	out, _, err = dpuctlIn(t, "", "-d", h2, "mem", "alloc")
	if err != nil || out != "gva:00000000000000020000100000002000\n" { // node 2's second page
		t.Fatalf("alloc through -d: %v %q", err, out)
	}
}
