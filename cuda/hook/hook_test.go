package hook_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/cuda/ledger"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

const (
	cudaOutOfMemory = "err 2"
	mib             = 1 << 20
)

var (
	buildOnce sync.Once
	buildErr  error
	buildDir  string
)

// build runs the Makefile once per test binary. It reads every C source
// first so that the Go test cache keys on them.
func build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := filepath.Abs(".")
		if err != nil {
			buildErr = err
			return
		}
		for _, pattern := range []string{"src/*", "fake/*.c", "test/*.c", "Makefile", "../../hostif/c/src/*.c", "../../hostif/c/include/*.h"} {
			files, _ := filepath.Glob(filepath.Join(dir, pattern))
			for _, f := range files {
				if _, err := os.ReadFile(f); err != nil {
					buildErr = err
					return
				}
			}
		}
		if _, err := exec.LookPath("make"); err != nil {
			buildErr = fmt.Errorf("make: %w", err)
			return
		}
		out, err := exec.Command("make", "-C", dir).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("make: %v\n%s", err, out)
			return
		}
		buildDir = filepath.Join(dir, "build")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// agent is a host interface server with GPU accounting on a socket.
type agent struct {
	acc    *ledger.Accountant
	sock   string
	cancel context.CancelFunc
	done   chan error
}

func startAgent(t testing.TB, sock string, cfg ledger.Config) *agent {
	t.Helper()
	acc, err := ledger.New(cfg, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := hostiftest.NewFabric().Node(1)
	t.Cleanup(be.Close)
	srv, err := hostif.NewServer(be, hostif.Options{GPU: acc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{acc: acc, sock: sock, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- srv.ListenAndServe(ctx, sock) }()
	t.Cleanup(func() { a.stop(t) })
	waitFor(t, "the agent's socket", func() bool {
		c, err := net.Dial("unixpacket", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return a
}

func (a *agent) stop(t testing.TB) {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("agent: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("agent did not stop")
	}
}

// account returns pid's account on device dev.
func (a *agent) account(pid int, dev uint32) (ledger.Account, bool) {
	for _, ac := range a.acc.Accounts() {
		if ac.PID == int32(pid) && ac.Device == dev {
			return ac, true
		}
	}
	return ledger.Account{}, false
}

func tempSocket(t testing.TB) string {
	dir, err := os.MkdirTemp("", "cudahook")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, hostif.SocketName)
}

// probe is a running cudaprobe.
type probe struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
	pid    int
}

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

// startProbe runs cudaprobe with args; hooked puts libdpucuda in front of
// the fake driver.
func startProbe(t testing.TB, sock string, hooked bool, env []string, args ...string) *probe {
	t.Helper()
	return startProbeBin(t, filepath.Join(build(t), "cudaprobe"), sock, hooked, env, args...)
}

func startProbeBin(t testing.TB, bin, sock string, hooked bool, env []string, args ...string) *probe {
	t.Helper()
	dir := build(t)
	cmd := exec.Command(bin, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "LD_PRELOAD=") && !strings.HasPrefix(e, "DPU_") && !strings.HasPrefix(e, "FAKECUDA_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(dir, "fake"), "DPU_SOCKET="+sock,
		"DPU_CUDA_LOG=info", "DPU_CUDA_REFRESH_MS=100", "DPU_CUDA_BACKOFF_MS=100", "FAKECUDA_DEVICES=2")
	if hooked {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+filepath.Join(dir, "libdpucuda.so"))
	}
	cmd.Env = append(cmd.Env, env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &probe{t: t, cmd: cmd, in: in, lines: make(chan string, 16), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("cudaprobe %v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// do sends one command and returns the answer line.
func (p *probe) do(line string) string {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		p.t.Fatalf("%s: %v", line, err)
	}
	select {
	case ans, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("%s: cudaprobe ended; stderr:\n%s", line, p.stderr.String())
		}
		return ans
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s: no answer in 60s", line)
	}
	return ""
}

// ok sends a command that must succeed and returns its values.
func (p *probe) ok(line string) []string {
	p.t.Helper()
	ans := p.do(line)
	f := strings.Fields(ans)
	if len(f) == 0 || f[0] != "ok" {
		p.t.Fatalf("%s: %q", line, ans)
	}
	return f[1:]
}

func (p *probe) uint(line string, i int) uint64 {
	p.t.Helper()
	v := p.ok(line)
	if len(v) <= i {
		p.t.Fatalf("%s: %v", line, v)
	}
	n, err := strconv.ParseUint(v[i], 0, 64)
	if err != nil {
		p.t.Fatalf("%s: %v", line, err)
	}
	return n
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func memoryIs(a *agent, pid int, dev uint32, bytes uint64) func() bool {
	return func() bool {
		ac, ok := a.account(pid, dev)
		return ok && ac.Memory == bytes
	}
}

// TestResolution runs the same scenario however the program reaches the
// driver: linked symbols, dlsym, cuGetProcAddress_v2 (CUDA 12) and
// cuGetProcAddress (CUDA 11), with and without per-thread streams.
func TestResolution(t *testing.T) {
	build(t)
	for _, args := range [][]string{{"-m", "link"}, {"-m", "dlsym"}, {"-m", "proc"}, {"-m", "proc11"}, {"-m", "proc", "-ptsz"}} {
		t.Run(strings.Join(args, ""), func(t *testing.T) {
			a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 64 * mib}})
			p := startProbe(t, a.sock, true, nil, args...)
			p.ok("init")
			ptr := p.ok(fmt.Sprint("alloc ", 40*mib))[0]
			if ac, ok := a.account(p.pid, 0); !ok || ac.Memory != 40*mib || ac.Command != "cudaprobe" ||
				ac.UUID != (hookwire.UUID{0xfa, 0xce, 15: 0}) || ac.Allocs != 1 {
				t.Fatalf("after alloc: %+v %v", ac, ok)
			}
			if ans := p.do(fmt.Sprint("alloc ", 30*mib)); ans != cudaOutOfMemory {
				t.Fatalf("alloc past the limit: %q", ans)
			}
			if free, total := p.uint("meminfo", 0), p.uint("meminfo", 1); free != 24*mib || total != 64*mib {
				t.Fatalf("meminfo %d %d, want the limit's view", free, total)
			}
			if total := p.uint("totalmem 0", 0); total != 64*mib {
				t.Fatalf("cuDeviceTotalMem %d", total)
			}
			p.ok("free " + ptr)
			if ac, _ := a.account(p.pid, 0); ac.Memory != 0 || ac.Frees != 1 {
				t.Fatalf("after free: %+v", ac)
			}
			// The legacy 32-bit forms go through the hook too.
			ptr1 := p.ok(fmt.Sprint("alloc1 ", 2*mib))[0]
			if ac, _ := a.account(p.pid, 0); ac.Memory != 2*mib {
				t.Fatalf("after alloc1: %+v", ac)
			}
			if free := p.uint("meminfo1", 0); free != 62*mib {
				t.Fatalf("meminfo (v1) free %d", free)
			}
			p.ok("free1 " + ptr1)
			if ac, _ := a.account(p.pid, 0); ac.Memory != 0 {
				t.Fatalf("after free1: %+v", ac)
			}
			if v := p.ok("next"); strings.Join(v, " ") != "dpucuda 1.0" {
				t.Fatalf("dlsym(RTLD_NEXT) from the program: %v", v)
			}
		})
	}
}

// TestUnknownVariant: when the driver maps a caller's version to a variant
// the hook does not know (the fake maps CUDA 13.0 callers of cuMemGetInfo
// to one), the caller gets the driver's function; what the hook knows is
// still intercepted.
func TestUnknownVariant(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 64 * mib}})
	p := startProbe(t, a.sock, true, nil, "-m", "proc", "-v", "13000")
	p.ok("init")
	if ans := p.do(fmt.Sprint("alloc ", 100*mib)); ans != cudaOutOfMemory {
		t.Fatalf("cuMemAlloc of a CUDA 13.0 caller: %q", ans)
	}
	if total := p.uint("meminfo", 1); total != 16<<30 {
		t.Fatalf("cuMemGetInfo through the unknown variant: total %d, want the card's", total)
	}
	if !strings.Contains(p.stderr.String(), "cuGetProcAddress cuMemGetInfo (13000): the driver has a variant newer than cuMemGetInfo_v2") {
		t.Fatalf("hook log:\n%s", p.stderr.String())
	}
}

// TestWithoutHook is the control: the same program on the fake driver
// without the hook allocates past the limit and reports nothing.
func TestWithoutHook(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 64 * mib}})
	p := startProbe(t, a.sock, false, nil, "-m", "proc")
	p.ok("init")
	p.ok(fmt.Sprint("alloc ", 100*mib))
	if total := p.uint("meminfo", 1); total != 16<<30 {
		t.Fatalf("meminfo total %d, want the fake card's", total)
	}
	if accts := a.acc.Accounts(); len(accts) != 0 {
		t.Fatalf("accounts without the hook: %+v", accts)
	}
	if ans := p.do("next"); ans != "err 500" {
		t.Fatalf("dpucuda_version without the hook: %q", ans)
	}
}

// TestAllocationKinds checks what each allocation entry point charges and
// that each free releases it, per device.
func TestAllocationKinds(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 256 * mib}})
	p := startProbe(t, a.sock, true, nil, "-m", "proc")
	p.ok("init")
	check := func(what string, dev uint32, want uint64) {
		t.Helper()
		if ac, ok := a.account(p.pid, dev); !ok || ac.Memory != want {
			t.Fatalf("%s: device %d account %+v, want %d bytes", what, dev, ac, want)
		}
	}
	// Charges follow the fake driver's layout (as the real one's): 2 MiB
	// chunks; device pointers by the chunks they touch, small ones packed;
	// managed memory and arrays as estimated (granule or 512 B rounding).
	m := p.ok(fmt.Sprint("managed ", 3*mib))[0]
	check("managed", 0, 4*mib)
	pv := p.ok("pitch 1000 100") // pitch rounded up to 512: 1024 * 100, in a new chunk
	if pv[1] != "1024" {
		t.Fatalf("pitch %v", pv)
	}
	check("pitch", 0, 6*mib)
	as := p.ok(fmt.Sprint("async ", mib))[0] // packed beside the pitched one
	check("async", 0, 6*mib)
	po := p.ok(fmt.Sprint("pool ", mib))[0] // does not fit that chunk: a new one
	check("async and pool", 0, 8*mib)
	h := p.ok(fmt.Sprint("create ", 8*mib, " 1"))[0] // cuMemCreate on device 1
	check("cuMemCreate", 1, 8*mib)
	arr := p.ok("array 256 128")[0] // float x4: 16 bytes an element
	check("array", 0, 8*mib+256*128*16)
	a3 := p.ok("array3d 64 64 64")[0] // uint8 x1
	check("array3d", 0, 8*mib+256*128*16+64*64*64)
	mm := p.ok("mipmap 64 64 0 3")[0] // half x2: 4 bytes; 64x64 + 32x32 + 16x16
	peak := uint64(8*mib + 256*128*16 + 64*64*64 + 4*(64*64+32*32+16*16))
	check("mipmap", 0, peak)

	p.ok("mipmapdestroy " + mm)
	p.ok("arraydestroy " + a3)
	p.ok("arraydestroy " + arr)
	check("arrays destroyed", 0, 8*mib)
	p.ok("release " + h)
	check("cuMemRelease", 1, 0)
	p.ok("freeasync " + as) // its chunk still holds the pitched allocation
	check("async freed", 0, 8*mib)
	p.ok("freeasync " + po)
	check("pool freed", 0, 6*mib)
	p.ok("free " + pv[0])
	p.ok("free " + m)
	check("all freed", 0, 0)
	// A free the driver refuses releases nothing.
	if ans := p.do("free 0x1234"); ans == "ok" {
		t.Fatalf("free of an unknown pointer: %q", ans)
	}
	ac, _ := a.account(p.pid, 0)
	if ac.Allocs != 7 || ac.Frees != 7 || ac.Peak != peak {
		t.Fatalf("counters %+v", ac)
	}
}

// TestSetLimitReachesProcess: a limit set with dpuctl gpu set applies to
// the next allocation and to what cuMemGetInfo shows.
func TestSetLimitReachesProcess(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{})
	p := startProbe(t, a.sock, true, nil)
	p.ok("init")
	p.ok(fmt.Sprint("alloc ", 10*mib))
	procs := a.acc.Processes()
	if len(procs) != 1 || procs[0].PID != uint32(p.pid) || procs[0].MemoryUsed != 10*mib || procs[0].MemoryLimit != 0 {
		t.Fatalf("gpu show: %+v", procs)
	}
	if err := a.acc.SetLimit(gpuctl.Limit{PID: uint32(p.pid), Device: 0, MemoryLimit: 12 * mib}); err != nil {
		t.Fatal(err)
	}
	if ans := p.do(fmt.Sprint("alloc ", 4*mib)); ans != cudaOutOfMemory {
		t.Fatalf("alloc past the new limit: %q", ans)
	}
	p.ok(fmt.Sprint("alloc ", 2*mib))
	if free, total := p.uint("meminfo", 0), p.uint("meminfo", 1); free != 0 || total != 12*mib {
		t.Fatalf("meminfo %d %d", free, total)
	}
	// Device 1 is untouched by device 0's limit.
	p.ok("ctx 1")
	p.ok(fmt.Sprint("alloc ", 100*mib))
	if ac, _ := a.account(p.pid, 1); ac.Memory != 100*mib || ac.UUID != (hookwire.UUID{0xfa, 0xce, 15: 1}) {
		t.Fatalf("device 1: %+v", ac)
	}
}

// TestProcessDeathReleases: kill -9 closes the process's socket; the agent
// releases its usage.
func TestProcessDeathReleases(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 64 * mib}})
	p := startProbe(t, a.sock, true, nil)
	other := startProbe(t, a.sock, true, nil)
	p.ok("init")
	other.ok("init")
	p.ok(fmt.Sprint("alloc ", 20*mib))
	other.ok(fmt.Sprint("alloc ", 30*mib))
	waitFor(t, "both accounted", func() bool { return len(a.acc.Accounts()) == 2 })
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed process's release", func() bool {
		_, ok := a.account(p.pid, 0)
		return !ok
	})
	if ac, ok := a.account(other.pid, 0); !ok || ac.Memory != 30*mib {
		t.Fatalf("the other process: %+v %v", ac, ok)
	}
	if err := a.acc.SetLimit(gpuctl.Limit{PID: uint32(p.pid)}); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("gpu set on the dead process: %v", err)
	}
}

// TestAgentRestart: the program keeps running while the agent is away,
// counts locally on the last limit it heard, and re-reports its totals to
// the restarted agent.
func TestAgentRestart(t *testing.T) {
	sock := tempSocket(t)
	cfg := ledger.Config{Default: ledger.Limit{Memory: 64 * mib}}
	a := startAgent(t, sock, cfg)
	p := startProbe(t, sock, true, nil)
	p.ok("init")
	p.ok(fmt.Sprint("alloc ", 8*mib))
	p.ok("ctx 1")
	p.ok(fmt.Sprint("alloc ", mib))
	p.ok("ctx 0")
	a.stop(t)

	ptr := p.ok(fmt.Sprint("alloc ", 4*mib))[0] // the agent is away
	if ans := p.do(fmt.Sprint("alloc ", 60*mib)); ans != cudaOutOfMemory {
		t.Fatalf("the last limit heard should hold while the agent is away: %q", ans)
	}
	if free := p.uint("meminfo", 0); free != 52*mib {
		t.Fatalf("meminfo while away: free %d", free)
	}

	b := startAgent(t, sock, cfg)
	waitFor(t, "the re-report to the restarted agent", memoryIs(b, p.pid, 0, 12*mib))
	waitFor(t, "device 1's re-report", memoryIs(b, p.pid, 1, 2*mib)) // 1 MiB takes a chunk
	if ac, _ := b.account(p.pid, 0); ac.Syncs != 1 {
		t.Fatalf("after restart: %+v", ac)
	}
	p.ok("free " + ptr)
	if ac, _ := b.account(p.pid, 0); ac.Memory != 8*mib {
		t.Fatalf("free after restart: %+v", ac)
	}
	if !strings.Contains(p.stderr.String(), "re-reported 2 device(s)") {
		t.Fatalf("hook log:\n%s", p.stderr.String())
	}
}

// TestNoAgent: with nothing on the socket the program runs unlimited.
func TestNoAgent(t *testing.T) {
	p := startProbe(t, tempSocket(t), true, nil)
	p.ok("init")
	ptr := p.ok(fmt.Sprint("alloc ", 100*mib))[0]
	if total := p.uint("meminfo", 1); total != 16<<30 {
		t.Fatalf("meminfo total %d", total)
	}
	p.ok("kernel 0")
	p.ok("launch 1000")
	p.ok("free " + ptr)
}

// TestQuota: under a kernel-time quota launches wait for tokens; the
// measured overuse reaches the agent.
func TestQuota(t *testing.T) {
	window := 50 * time.Millisecond
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Quota: 20}, Window: window})
	for _, kind := range []string{"plain", "ex", "coop"} {
		t.Run(kind, func(t *testing.T) {
			p := startProbe(t, a.sock, true, nil, "-m", "proc", "-ptsz")
			p.ok("init")
			p.ok("kernel 2000") // 2 ms kernels
			// The first token learns how long a launch runs.
			p.ok("launch 5 " + kind)
			p.ok("sync")
			// 40 launches = 80 ms of kernel time; at 20% with a 10 ms
			// bucket that takes at least (80-10)/0.2 = 350 ms.
			launch := p.uint("launch 40 "+kind, 0)
			sync := p.uint("sync", 0)
			elapsed := time.Duration(launch + sync)
			if elapsed < 250*time.Millisecond {
				t.Errorf("40 x 2 ms at 20%% ran in %v: not throttled", elapsed)
			}
			ac, ok := a.account(p.pid, 0)
			t.Logf("40 x 2 ms at 20%%: %v; grants %d, deferred %d, kernel time %v, overuse %v",
				elapsed, ac.Grants, ac.Deferred, ac.Kernel, ac.Overuse)
			if !ok || ac.Grants < 4 || ac.Deferred == 0 || ac.Kernel < 40*time.Millisecond {
				t.Fatalf("account %+v", ac)
			}
		})
	}
	t.Run("overuse", func(t *testing.T) {
		p := startProbe(t, a.sock, true, nil)
		p.ok("init")
		p.ok("kernel 30000") // 30 ms kernels against a 10 ms bucket
		p.ok("launch 3")
		p.ok("sync")
		p.ok("launch 1") // renewing measures the previous token
		waitFor(t, "overuse reported", func() bool {
			ac, _ := a.account(p.pid, 0)
			return ac.Overuse >= 20*time.Millisecond
		})
	})
	t.Run("unlimited", func(t *testing.T) {
		if err := a.acc.SetLimit(gpuctl.Limit{PID: 1}); !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
		p := startProbe(t, a.sock, true, nil)
		p.ok("init")
		p.ok("kernel 2000")
		p.ok("launch 1")
		if err := a.acc.SetLimit(gpuctl.Limit{PID: uint32(p.pid), KernelQuota: 0}); err != nil {
			t.Fatal(err)
		}
		// The next token request (or refresh) tells the hook; after it,
		// launches no longer ask.
		waitFor(t, "the lifted quota to reach the hook", func() bool {
			return strings.Contains(p.stderr.String(), "kernel quota 0%")
		})
		before, _ := a.account(p.pid, 0)
		p.ok("launch 40")
		after, _ := a.account(p.pid, 0)
		if after.Grants != before.Grants || after.Deferred != before.Deferred {
			t.Fatalf("tokens asked without a quota: %+v -> %+v", before, after)
		}
	})
}

// TestExports: the hook exports the entry points it interposes, dlsym and
// its version, and nothing else (libdpu stays inside).
func TestExports(t *testing.T) {
	f, err := elf.Open(filepath.Join(build(t), "libdpucuda.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			got = append(got, s.Name)
		}
	}
	sort.Strings(got)
	want := []string{"cuArray3DCreate", "cuArray3DCreate_v2", "cuArrayCreate", "cuArrayCreate_v2", "cuArrayDestroy",
		"cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4", "cuCtxDestroy_v2", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2",
		"cuDevicePrimaryCtxRetain", "cuDeviceTotalMem", "cuDeviceTotalMem_v2", "cuGetProcAddress", "cuGetProcAddress_v2",
		"cuGraphLaunch", "cuGraphLaunch_ptsz", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuLaunchKernel", "cuLaunchKernelEx",
		"cuLaunchKernelEx_ptsz", "cuLaunchKernel_ptsz", "cuMemAlloc", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
		"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocHost", "cuMemAllocHost_v2",
		"cuMemAllocManaged", "cuMemAllocPitch",
		"cuMemAllocPitch_v2", "cuMemAlloc_v2", "cuMemCreate", "cuMemFree", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
		"cuMemFreeHost", "cuMemFree_v2", "cuMemGetInfo", "cuMemGetInfo_v2", "cuMemHostAlloc", "cuMemHostRegister",
		"cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemRelease", "cuMipmappedArrayCreate",
		"cuMipmappedArrayDestroy", "dlsym", "dpucuda_version",
		"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2",
		"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
		"nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2",
		"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2",
		"nvmlDeviceGetIndex", "nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2",
		"nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
		"nvmlDeviceGetRunningProcessDetailList", "nvmlDeviceGetUtilizationRates"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("exports:\n got %v\nwant %v", got, want)
	}
}

// TestConcurrentAllocations: threads allocating at once never take the
// process past its limit together, and everything freed is released.
func TestConcurrentAllocations(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 10 * mib}})
	p := startProbe(t, a.sock, true, nil)
	p.ok("init")
	v := p.ok(fmt.Sprint("threads 8 200 ", 3*mib))
	ok, _ := strconv.Atoi(v[0])
	refused, _ := strconv.Atoi(v[1])
	if ok+refused != 1600 || ok == 0 {
		t.Fatalf("threads: %v", v)
	}
	ac, _ := a.account(p.pid, 0)
	if ac.Memory != 0 || ac.Peak > 10*mib || ac.Over != 0 || ac.Allocs != uint64(ok) || ac.Frees != uint64(ok) {
		t.Fatalf("after the churn (%d allocated, %d refused): %+v", ok, refused, ac)
	}
	t.Logf("%d allocations, %d refused, peak %d MiB of 10", ok, refused, ac.Peak/mib)
}

// TestFork: a child of a hooked process gets its own connection and
// account; the parent's connection (shared by the fork) is left intact.
func TestFork(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 64 * mib}})
	p := startProbe(t, a.sock, true, nil)
	p.ok("init")
	p.ok(fmt.Sprint("alloc ", 10*mib))
	child, err := strconv.Atoi(p.ok(fmt.Sprint("fork ", mib))[0])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child's account", memoryIs(a, child, 0, 2*mib)) // 1 MiB takes a chunk
	p.ok("wait " + strconv.Itoa(child))
	waitFor(t, "the child's release", func() bool {
		_, ok := a.account(child, 0)
		return !ok
	})
	p.ok(fmt.Sprint("alloc ", 2*mib))
	if ac, ok := a.account(p.pid, 0); !ok || ac.Memory != 12*mib || ac.Syncs != 0 {
		t.Fatalf("the parent after the fork: %+v %v", ac, ok)
	}
}

// TestSanitizers runs the hook (linked into the probe) under
// ThreadSanitizer and AddressSanitizer+UBSan through allocations from many
// threads, frees, arrays, quota tokens and overuse tracking.
func TestSanitizers(t *testing.T) {
	dir := build(t)
	if out, err := exec.Command("make", "-C", filepath.Dir(dir), "sanitize").CombinedOutput(); err != nil {
		t.Fatalf("make sanitize: %v\n%s", err, out)
	}
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: 10 * mib, Quota: 30}, Window: 20 * time.Millisecond})
	for _, san := range []string{"tsan", "asan"} {
		t.Run(san, func(t *testing.T) {
			p := startProbeBin(t, filepath.Join(dir, san, "cudaprobe"), a.sock, false,
				[]string{"TSAN_OPTIONS=halt_on_error=1 exitcode=66", "ASAN_OPTIONS=halt_on_error=1 exitcode=66"})
			p.ok("init")
			p.ok(fmt.Sprint("threads 8 50 ", 3*mib))
			arr := p.ok("array 64 64")[0]
			p.ok("arraydestroy " + arr)
			p.ok("kernel 1000")
			p.ok("launch 5")
			p.ok("sync")
			p.ok("launch 20 ex")
			p.ok("sync")
			p.ok("meminfo")
			ac, ok := a.account(p.pid, 0)
			if !ok || ac.Grants == 0 || ac.Allocs == 0 || ac.Memory != 0 || ac.Peak > 10*mib {
				t.Fatalf("account %+v %v", ac, ok)
			}
			p.ok("exit")
			if err := p.cmd.Wait(); err != nil {
				t.Fatalf("%s probe: %v\n%s", san, err, p.stderr.String())
			}
			if strings.Contains(p.stderr.String(), "Sanitizer") {
				t.Fatalf("%s report:\n%s", san, p.stderr.String())
			}
		})
	}
}

// TestPinnedHostMemory: pinned host memory (cuMemHostAlloc, cuMemAllocHost,
// cuMemHostRegister) is charged to the process's host account by the pages
// it pins, refused past a host limit, released by cuMemFreeHost and
// cuMemHostUnregister; a GPU limit (the default, every device) does not
// cover it, and a host limit set at run time applies to the next one.
func TestPinnedHostMemory(t *testing.T) {
	for _, mode := range []string{"link", "dlsym", "proc"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, tempSocket(t), ledger.Config{
				Default: ledger.Limit{Memory: mib}, // a GPU limit: not the host's
				Devices: map[string]ledger.Limit{"host": {Memory: 8 * mib}},
			})
			p := startProbe(t, a.sock, true, nil, "-m", mode)
			p.ok("init")
			host := func(what string, want uint64) {
				t.Helper()
				if ac, ok := a.account(p.pid, hookwire.HostDevice); !ok || ac.Memory != want || ac.Limit.Memory != 8*mib {
					t.Fatalf("%s: host account %+v, want %d bytes under 8 MiB", what, ac, want)
				}
			}
			h1 := p.ok(fmt.Sprint("hostalloc ", 4*mib))[0]
			host("cuMemHostAlloc", 4*mib)
			h2 := p.ok(fmt.Sprint("allochost ", 3*mib+1))[0] // pins whole pages
			host("cuMemAllocHost", 7*mib+4096)
			if ans := p.do(fmt.Sprint("hostalloc ", mib)); ans != cudaOutOfMemory {
				t.Fatalf("past the host limit: %q", ans)
			}
			r := p.ok(fmt.Sprint("hostregister ", mib-4096))[0]
			host("cuMemHostRegister", 8*mib)
			p.ok("freehost " + h1)
			host("cuMemFreeHost", 4*mib)
			p.ok("hostunregister " + r)
			host("cuMemHostUnregister", 3*mib+4096)
			p.ok("freehost " + h2)
			host("all freed", 0)
			// An unregister the driver refuses releases nothing.
			if ans := p.do("hostunregister 0x1000"); ans == "ok" {
				t.Fatalf("unregister of memory never registered: %q", ans)
			}
			// The GPU limit is untouched by host memory, and the other way round.
			p.ok(fmt.Sprint("alloc ", mib/2))
			if ans := p.do(fmt.Sprint("alloc ", mib)); ans != cudaOutOfMemory {
				t.Fatalf("past the GPU limit: %q", ans)
			}
			// A host limit set at run time (dpuctl gpu set pid P device host mem 2M).
			if err := a.acc.SetLimit(gpuctl.Limit{PID: uint32(p.pid), Device: gpuctl.HostDevice, MemoryLimit: 2 * mib}); err != nil {
				t.Fatal(err)
			}
			if ans := p.do(fmt.Sprint("hostalloc ", 3*mib)); ans != cudaOutOfMemory {
				t.Fatalf("past the run-time host limit: %q", ans)
			}
			p.ok(fmt.Sprint("hostalloc ", 2*mib))
			if ac, _ := a.account(p.pid, hookwire.HostDevice); ac.Memory != 2*mib || ac.Limit.Memory != 2*mib {
				t.Fatalf("after the run-time limit: %+v", ac)
			}
		})
	}
}

// TestContextCreateV3V4: contexts made with cuCtxCreate_v3 and _v4 are
// charged as _v2's and released when destroyed.
func TestContextCreateV3V4(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{})
	p := startProbe(t, a.sock, true, []string{"FAKECUDA_CTX_MEM=48M"}, "-m", "proc", "-v", "12080")
	p.ok("init 0") // a _v2 context, charged and released first
	waitFor(t, "the _v2 context charged", memoryIs(a, p.pid, 0, 48*mib))
	p.ok("ctxdestroy 0")
	waitFor(t, "the _v2 context released", memoryIs(a, p.pid, 0, 0))
	p.ok("ctx3 0")
	waitFor(t, "the _v3 context charged", memoryIs(a, p.pid, 0, 48*mib))
	p.ok("ctx4 1")
	waitFor(t, "the _v4 context charged", memoryIs(a, p.pid, 1, 48*mib))
	p.ok("ctxdestroy 0")
	waitFor(t, "the _v3 context released", memoryIs(a, p.pid, 0, 0))
	p.ok("ctxdestroy 1")
	waitFor(t, "the _v4 context released", memoryIs(a, p.pid, 1, 0))
}
