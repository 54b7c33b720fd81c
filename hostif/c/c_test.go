package libdpu_test

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/fabrictest"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/ring/ringtest"
)

// needCC skips when there is no C toolchain, unless DPU_PRIV_TESTS=require
// (CI), which makes it a failure.
func needCC(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"cc", "make", "ar"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("DPU_PRIV_TESTS") == "require" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
}

func build(t testing.TB, targets ...string) {
	t.Helper()
	if prebuilt(targets) {
		if _, err := exec.LookPath("make"); err != nil {
			t.Logf("no make: using the prebuilt %v", targets)
			return
		}
	}
	needCC(t)
	cmd := exec.Command("make", append([]string{"-s"}, targets...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %v: %v\n%s", targets, err, out)
	}
}

// prebuilt reports whether every target is a file that exists already.
func prebuilt(targets []string) bool {
	for _, t := range targets {
		if _, err := os.Stat(t); err != nil {
			return false
		}
	}
	return true
}

// hosts starts two host interface servers sharing one fabric of node cores
// (machines 1 and 2) and returns their socket paths.
func hosts(t testing.TB) (string, string) {
	fab := hostiftest.NewFabric()
	var paths [2]string
	for i := range paths {
		be := fab.Node(gva.MachineIndex(i + 1))
		t.Cleanup(be.Close)
		paths[i] = hostiftest.StartServer(t, be, hostif.Options{})
	}
	return paths[0], paths[1]
}

func runC(t *testing.T, bin string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return string(out)
}

// TestCLibrary runs the C test program, statically and dynamically linked,
// against two live hosts.
func TestCLibrary(t *testing.T) {
	build(t, "all")
	for _, bin := range []string{"build/dpu_test", "build/dpu_test_shared"} {
		t.Run(bin, func(t *testing.T) {
			h1, h2 := hosts(t)
			out := runC(t, bin, "DPU_SOCKET="+h1, "DPU_TEST_PEER_SOCKET="+h2)
			if !strings.HasPrefix(out, "ok ") {
				t.Fatalf("%s printed %q", bin, out)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}

// TestMmap runs the dpu_mmap test program against two live hosts, with the
// userfaultfd this process may open, with the user-mode-only kind that
// vm.unprivileged_userfaultfd=0 leaves to unprivileged processes, and with
// faults served in the faulting thread (DPU_MMAP_FAULTS=signal).
func TestMmap(t *testing.T) {
	build(t, "build/mmap_test", "build/asan/mmap_test")
	for _, mode := range []string{"full", "user", "signal", "asan"} {
		t.Run(mode, func(t *testing.T) {
			h1, h2 := hosts(t)
			bin, env := "build/mmap_test", []string{"DPU_UFFD=" + mode}
			if mode == "signal" {
				env = []string{"DPU_MMAP_FAULTS=signal"}
			}
			if mode == "asan" {
				bin, env = "build/asan/mmap_test", []string{"ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_segv=0:handle_sigbus=0", "UBSAN_OPTIONS=halt_on_error=1"}
			}
			out := runC(t, bin, append(env, "DPU_SOCKET="+h1, "DPU_TEST_PEER_SOCKET="+h2)...)
			if !strings.Contains(out, "ok ") {
				t.Fatalf("mmap_test printed %q", out)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}

// startMmapTest starts build/mmap_test MODE with env added to this
// process's, its stdin and stdout piped to the test and its stderr kept.
func startMmapTest(t *testing.T, ctx context.Context, mode string, env ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "build/mmap_test", mode)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout, stderr
}

// TestMmapNodeStalls: a fault the node never answers (a read that needs a
// fetch, a write that needs ownership) ends in SIGBUS with a logged reason
// within the connection's timeout (1 s here), not a hang.
func TestMmapNodeStalls(t *testing.T) {
	build(t, "build/mmap_test")
	for _, name := range []string{"stall-read", "stall-write", "stall-read/signal", "stall-write/signal"} {
		t.Run(name, func(t *testing.T) {
			mode, faults, _ := strings.Cut(name, "/")
			fab := hostiftest.Start(t, hostiftest.Config{})
			sock := hostiftest.StartServer(t, fab.Node(1), hostif.Options{})
			peer := hostiftest.StartServer(t, fab.Node(2), hostif.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// the pages are node 2's, and node 2 is cut off once they are mapped
			cmd, stdin, stdout, stderr := startMmapTest(t, ctx, mode, "DPU_SOCKET="+sock, "DPU_TEST_PEER_SOCKET="+peer,
				"DPU_MMAP_FAULTS="+faults)
			var word, text string
			if _, err := fmt.Fscanln(stdout, &word, &text); err != nil || word != "ready" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("mmap_test %s: %q, %v\n%s", mode, word, err, stderr.String())
			}
			if mode == "stall-read" {
				// node 1's replica of the second page is made invalid
				// first: a valid one is read without its owner
				g, err := gva.Parse(text)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := fab.Node(2).Store(ctx, g.PageAt(1), make([]byte, 4096)); err != nil {
					t.Fatal(err)
				}
				// the owner does not wait for its invalidation to
				// arrive: wait for it here, before the cut
				for fab.ReplicaValid(g.PageAt(1), 1) {
					if ctx.Err() != nil {
						t.Fatal("node 1's replica of the second page is still valid after the owner's write")
					}
					time.Sleep(time.Millisecond)
				}
			}
			fab.Partition(2, true)
			defer fab.Partition(2, false)
			start := time.Now()
			fmt.Fprintln(stdin, "go")
			rest, _ := io.ReadAll(stdout)
			err := cmd.Wait()
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGBUS {
				t.Fatalf("mmap_test %s ended with %v after %v, want SIGBUS\n%s%s", mode, err, took, rest, stderr.String())
			}
			if !strings.Contains(stderr.String(), "dpu_mmap: SIGBUS to thread") || took > 10*time.Second {
				t.Fatalf("SIGBUS after %v; logged:\n%s", took, stderr.String())
			}
			t.Logf("SIGBUS after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
		})
	}
}

// TestMmapOwnerLost: on a 2-node fabric of real agents, a process on node
// 0 maps pages of node 1 and reads one; node 1's agent is killed; a write
// (which needs the page's ownership from the dead owner) ends in SIGBUS
// with a logged reason within the bound of its request, not a hang.
func TestMmapOwnerLost(t *testing.T) {
	build(t, "build/mmap_test")
	st := fabrictest.Up(t, fabric.Spec{Nodes: 2, Topo: "line", Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond})
	sock := func(i int) string { return fabrictest.Sock(st, i) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stdin, stdout, stderr := startMmapTest(t, ctx, "stall-write", "DPU_SOCKET="+sock(0), "DPU_TEST_PEER_SOCKET="+sock(1), "DPU_TEST_TIMEOUT_MS=15000")
	var word, text string
	if _, err := fmt.Fscanln(stdout, &word, &text); err != nil || word != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mmap_test: %q, %v\n%s", word, err, stderr.String())
	}
	if err := st.Kill(1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fmt.Fprintln(stdin, "go")
	rest, _ := io.ReadAll(stdout)
	err := cmd.Wait()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGBUS {
		t.Fatalf("mmap_test ended with %v after %v, want SIGBUS\n%s%s", err, took, rest, stderr.String())
	}
	if !strings.Contains(stderr.String(), "dpu_mmap: SIGBUS to thread") || took > 30*time.Second {
		t.Fatalf("SIGBUS after %v; logged:\n%s", took, stderr.String())
	}
	t.Logf("SIGBUS after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
}

// TestMmapFork: children forked next to a mapping map the same pages on
// connections of their own; one exits without unmapping (its writes reach
// the node, and closing the handle it inherited leaves the parent's
// connection alone), one is killed. Afterwards the node holds exactly the
// parent's refs, and after the parent's dpu_munmap none, and no
// acquisition (no stale owner).
func TestMmapFork(t *testing.T) {
	build(t, "build/mmap_test")
	fab := hostiftest.NewFabric()
	var paths [2]string
	for i := range paths {
		be := fab.Node(gva.MachineIndex(i + 1))
		t.Cleanup(be.Close)
		paths[i] = hostiftest.StartServer(t, be, hostif.Options{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stdin, stdout, stderr := startMmapTest(t, ctx, "fork", "DPU_SOCKET="+paths[0], "DPU_TEST_PEER_SOCKET="+paths[1])
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var word, text string
	if _, err := fmt.Fscanln(stdout, &word, &text); err != nil || word != "mapped" {
		t.Fatalf("mmap_test fork: %q, %v\n%s", word, err, stderr.String())
	}
	g, err := gva.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	pages := []gva.GVA{g, {Hi: g.Hi, Lo: g.Lo + gva.PageSize}}
	// refs waits until node 1 holds want refs of the two pages (a closed
	// connection's refs go once the server has seen it close; an
	// acquisition holds a ref of its own besides the mapping's).
	refs := func(when string, want ...int) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got := []int{fab.Refs(pages[0], 1), fab.Refs(pages[1], 1)}
			if got[0] == want[0] && got[1] == want[1] {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("%s: node 1 holds %v refs of the two pages, want %v", when, got, want)
			}
		}
	}
	step := func(want string) {
		t.Helper()
		fmt.Fprintln(stdin, "go")
		if _, err := fmt.Fscanln(stdout, &word); err != nil || word != want {
			t.Fatalf("mmap_test fork: %q (want %q), %v\n%s", word, want, err, stderr.String())
		}
	}
	refs("mapped", 2, 1) // the first page written: mapped and acquired
	if !fab.Acquired(pages[0], 1) {
		t.Fatal("the parent's write took no acquisition")
	}
	step("children")
	refs("after the children", 2, 1)
	step("unmapped")
	refs("after dpu_munmap", 0, 0)
	for _, pg := range pages {
		if fab.Acquired(pg, 1) {
			t.Errorf("page %v still acquired by node 1 with nothing mapped", pg)
		}
	}
	fmt.Fprintln(stdin, "go")
	rest, _ := io.ReadAll(stdout)
	if err := cmd.Wait(); err != nil || !strings.HasPrefix(string(rest), "ok ") {
		t.Fatalf("mmap_test fork: %v, %q\n%s", err, rest, stderr.String())
	}
	t.Log(strings.TrimSpace(string(rest)))
}

// TestMmapReadOnlyUser: a user who may read a page but not write it maps
// it PROT_READ; after an acquire point the read's fence (a compare-and-swap
// at the owner) is refused, and the read still succeeds, unfenced, with a
// warning. Root's fenced read of the same page gives no warning.
func TestMmapReadOnlyUser(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("DPU_PRIV_TESTS") == "require" {
			t.Fatal("needs root (DPU_PRIV_TESTS=require)")
		}
		t.Skip("needs root to run a process as another user")
	}
	build(t, "build/mmap_test")
	const nobody, nogroup = 65534, 65534
	dir, err := os.MkdirTemp("", "libdpu-ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("build/mmap_test")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mmap_test")
	if err := os.WriteFile(bin, prog, 0o755); err != nil {
		t.Fatal(err)
	}
	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	t.Cleanup(be.Close)
	srv, err := hostif.NewServer(be, hostif.Options{SocketGroup: fmt.Sprint(nogroup)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, hostif.SocketName)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	t.Cleanup(func() { cancel(); <-done })
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no socket")
		}
	}
	c, err := client.Dial(ctx, path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.Alloc(ctx, gva.PageSize, 0o604)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store64(ctx, g, 4321); err != nil {
		t.Fatal(err)
	}
	for _, cred := range []*syscall.Credential{{Uid: nobody, Gid: nogroup}, nil} {
		cmd := exec.CommandContext(ctx, bin, "readonly", g.String())
		cmd.Env = append(os.Environ(), "DPU_SOCKET="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || strings.TrimSpace(stdout.String()) != "read 4321" {
			t.Fatalf("as %v: %v, %q\n%s", cred, err, stdout.String(), stderr.String())
		}
		warned := strings.Contains(stderr.String(), "cannot be fenced")
		if warned != (cred != nil) {
			t.Errorf("as %v: warned %v:\n%s", cred, warned, stderr.String())
		}
	}
}

// TestMmapCrossPageOrder: release/acquire order across two pages on a
// 5-node ring of real agents, where the data page's updates reach the
// reader by a longer path than the flag. The data page is made on node 3
// and the flag page on node 1; the writer runs on node 0, the reader on
// node 1. Both map the data page first (node 1 below node 3 by node 2,
// node 0 by node 4); the writer's first write makes node 0 its owner, so
// the page's updates go 0-4-3-2-1 while the flag's store goes 0-1. After
// the acquire the reader must see each round's block all the same.
func TestMmapCrossPageOrder(t *testing.T) {
	build(t, "build/mmap_test")
	st := fabrictest.Up(t, fabric.Spec{Nodes: 5, Topo: "ring"})
	sock := func(i int) string { return fabrictest.Sock(st, i) }
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	alloc := func(node int) gva.GVA {
		c, err := client.Dial(ctx, sock(node), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g, err := c.Alloc(ctx, gva.PageSize, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	data, flag := alloc(3), alloc(1)
	rounds := "100"
	type result struct {
		who string
		out string
		err error
	}
	results := make(chan result, 2)
	for _, p := range []struct {
		who  string
		node int
	}{{"pass-write", 0}, {"pass-read", 1}} {
		cmd := exec.CommandContext(ctx, "build/mmap_test", p.who, data.String(), flag.String(), rounds)
		cmd.Env = append(os.Environ(), "DPU_SOCKET="+sock(p.node))
		go func() {
			out, err := cmd.CombinedOutput()
			results <- result{p.who, string(out), err}
		}()
	}
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Errorf("mmap_test %s: %v\n%s", r.who, r.err, r.out)
			continue
		}
		t.Logf("%s: %s", r.who, strings.TrimSpace(r.out))
	}
}

// TestMmapReport: a process's dpu_mmap areas and their fault counts reach
// the agent (what dpuctl mem maps shows) and go when it unmaps.
func TestMmapReport(t *testing.T) {
	build(t, "build/mmap_test")
	h1, _ := hosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdin, stdout, stderr := startMmapTest(t, ctx, "hold", "DPU_SOCKET="+h1)
	defer cmd.Wait()
	defer stdin.Close()
	var addr, gvaText string
	if _, err := fmt.Fscanf(stdout, "mapped %s %s\n", &addr, &gvaText); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("reading what mmap_test hold mapped: %v\n%s", err, stderr.String())
	}
	c, err := client.Dial(ctx, h1, client.Options{Name: "watcher"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		_, entries, err := c.Maps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 1 && entries[0].ReadFaults >= 1 && entries[0].WriteFaults >= 1 {
			e := entries[0]
			if fmt.Sprintf("%#x", e.LVA) != addr || e.GVA.String() != gvaText || e.Bytes != 2*4096 || e.Prot != 3 ||
				int(e.PID) != cmd.Process.Pid {
				t.Fatalf("reported %+v, want %s %s of pid %d", e, addr, gvaText, cmd.Process.Pid)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no report with the faults: %+v", entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for {
		total, _, err := c.Maps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if total == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the areas outlived the process")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCLibraryUnderASan runs the same program built with AddressSanitizer
// and UndefinedBehaviorSanitizer (library included).
func TestCLibraryUnderASan(t *testing.T) {
	build(t, "asan")
	h1, h2 := hosts(t)
	out := runC(t, "build/asan/dpu_test", "DPU_SOCKET="+h1, "DPU_TEST_PEER_SOCKET="+h2,
		"ASAN_OPTIONS=detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS=halt_on_error=1")
	if !strings.HasPrefix(out, "ok ") {
		t.Fatalf("asan run printed %q", out)
	}
}

// TestExportsAndPkgConfig: the shared library exports only the API, and
// dpu.pc gives the flags to build against an installed copy.
func TestExportsAndPkgConfig(t *testing.T) {
	build(t, "all")
	names, err := exports("build/libdpu.so")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.HasPrefix(name, "dpu_") && name != "atomic_cas_remote" {
			t.Errorf("libdpu.so exports %s", name)
		}
	}
	for _, want := range []string{"dpu_open", "dpu_map", "dpu_cas64", "atomic_cas_remote", "dpu_gva_parse"} {
		if !slices.Contains(names, want) {
			t.Errorf("libdpu.so does not export %s", want)
		}
	}
	build(t, "build/install/dpu.pc") // what make install installs
	pc, err := os.ReadFile("build/install/dpu.pc")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Libs: -L${libdir} -ldpu", "Cflags: -I${includedir}", "prefix=/usr/local"} {
		if !strings.Contains(string(pc), want) {
			t.Errorf("dpu.pc lacks %q:\n%s", want, pc)
		}
	}
	if _, err := exec.LookPath("pkg-config"); err != nil {
		if os.Getenv("DPU_PRIV_TESTS") == "require" {
			t.Fatalf("pkg-config: %v", err)
		}
		t.Logf("no pkg-config: dpu.pc not tried (%v)", err)
		return
	}
	out, err := exec.Command("pkg-config", "--cflags", "--libs", "build/dpu.pc").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-ldpu") {
		t.Errorf("pkg-config: %v %s", err, out)
	}
}

// exports lists the symbols a shared library defines for others to link
// against (nm -D --defined-only, read with debug/elf so that no binutils
// is needed): global or weak, of default or protected visibility.
func exports(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, s := range syms {
		bind, vis := elf.ST_BIND(s.Info), elf.ST_VISIBILITY(s.Other)
		if s.Section == elf.SHN_UNDEF || s.Name == "" || (bind != elf.STB_GLOBAL && bind != elf.STB_WEAK) ||
			(vis != elf.STV_DEFAULT && vis != elf.STV_PROTECTED) {
			continue
		}
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s defines no dynamic symbol", path)
	}
	return names, nil
}

// BenchmarkCLibrary runs the C benchmark program (its own timing loops) and
// reports its numbers: a consistent read of a valid mapped replica
// (dpu_read64), a raw load of the same word, and the median round trip of
// dpu_cas64 (on an unmapped and on a mapped page) next to a bare
// SOCK_SEQPACKET echo measured in the same run.
func BenchmarkCLibrary(b *testing.B) {
	build(b, "build/dpu_bench")
	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	b.Cleanup(be.Close)
	path := hostiftest.StartServer(b, be, hostif.Options{})
	echo := hostiftest.StartEcho(b)
	pair := regexp.MustCompile(`(\w+)=([0-9.]+)`)
	metrics := map[string]float64{}
	for range b.N {
		cmd := exec.Command("build/dpu_bench")
		cmd.Env = append(os.Environ(), "DPU_SOCKET="+path, "DPU_BENCH_ECHO="+echo)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("dpu_bench: %v\n%s", err, out)
		}
		for _, m := range pair.FindAllStringSubmatch(string(out), -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			metrics[m[1]] = v
		}
	}
	for _, name := range []string{"read64_ns", "raw_ns", "cas_p50_ns", "cas_mapped_p50_ns", "echo_p50_ns"} {
		b.ReportMetric(metrics[name], name)
	}
	if metrics["echo_p50_ns"] > 0 {
		b.ReportMetric(metrics["cas_p50_ns"]/metrics["echo_p50_ns"], "cas/echo")
	}
	b.ReportMetric(0, "ns/op")
}

// TestCLibraryRings runs test/ring_test.c against the stand-in agent of
// hostif/ring/ringtest: over the ring pair (with a spinning and with a
// sleeping agent, under AddressSanitizer and ThreadSanitizer), and with
// DPU_RINGS=0 and
// against an agent without rings over the socket, checking which way the
// requests came.
func TestCLibraryRings(t *testing.T) {
	build(t, "build/ring_test", "asan")
	for _, tc := range []struct {
		name  string
		bin   string
		opts  ringtest.Options
		env   []string
		rings bool
	}{
		{"spinning agent", "build/ring_test", ringtest.Options{Spin: 1 << 30}, nil, true},
		{"sleeping agent", "build/ring_test", ringtest.Options{}, nil, true},
		{"sleeping both", "build/ring_test", ringtest.Options{}, []string{"DPU_RING_SPIN_US=0"}, true},
		{"asan", "build/asan/ring_test", ringtest.Options{Spin: 1000}, []string{"ASAN_OPTIONS=detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS=halt_on_error=1"}, true},
		{"tsan", "build/tsan/ring_test", ringtest.Options{}, []string{"DPU_RING_SPIN_US=20", "TSAN_OPTIONS=halt_on_error=1"}, true},
		{"DPU_RINGS=0", "build/ring_test", ringtest.Options{}, []string{"DPU_RINGS=0"}, false},
		{"agent without rings", "build/ring_test", ringtest.Options{NoRings: true}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := ringtest.Start(t, tc.opts)
			out := runC(t, tc.bin, append([]string{"DPU_SOCKET=" + a.Path}, tc.env...)...)
			if !strings.HasPrefix(out, "ok ") {
				t.Fatalf("%s printed %q", tc.bin, out)
			}
			ring, sock := a.OnRing.Load(), a.OnSocket.Load()
			if tc.rings && (sock != 0 || ring < 4000) || !tc.rings && (ring != 0 || sock < 4000) {
				t.Fatalf("%d requests on the ring, %d on the socket", ring, sock)
			}
		})
	}
}

// BenchmarkCLibraryRings times dpu_cas64 round trips from C through
// libdpu to the stand-in agent (hostif/ring/ringtest, which serves the CAS
// from a map: the transport's cost, not the engine's): over the ring with
// a polling agent, over the ring with a sleeping agent, and over the
// socket, beside a bare SOCK_SEQPACKET echo in the same run.
func BenchmarkCLibraryRings(b *testing.B) {
	build(b, "build/ring_test", "build/dpu_bench")
	pair := regexp.MustCompile(`(\w+)=([0-9.]+)`)
	run := func(opts ringtest.Options, env ...string) map[string]float64 {
		a := ringtest.Start(b, opts)
		cmd := exec.Command("build/ring_test")
		cmd.Env = append(append(os.Environ(), "DPU_SOCKET="+a.Path, "DPU_RING_TEST_BENCH=20000"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("ring_test: %v\n%s", err, out)
		}
		m := map[string]float64{}
		for _, kv := range pair.FindAllStringSubmatch(string(out), -1) {
			v, _ := strconv.ParseFloat(kv[2], 64)
			m[kv[1]] = v
		}
		return m
	}
	for range b.N {
		poll := run(ringtest.Options{Spin: 1 << 30})
		sleep := run(ringtest.Options{}, "DPU_RING_SPIN_US=0")
		sock := run(ringtest.Options{}, "DPU_RINGS=0")
		b.ReportMetric(poll["cas_p50_ns"], "ring-poll-p50-ns")
		b.ReportMetric(poll["cas_p99_ns"], "ring-poll-p99-ns")
		b.ReportMetric(sleep["cas_p50_ns"], "ring-sleep-p50-ns")
		b.ReportMetric(sock["cas_p50_ns"], "socket-p50-ns")
		if sock["cas_p50_ns"] > 0 {
			b.ReportMetric(poll["cas_p50_ns"]/sock["cas_p50_ns"], "ring-poll/socket")
		}
	}
	b.ReportMetric(0, "ns/op")
}
