package remote_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

var buildOnce sync.Once
var buildErr error
var buildOut []byte

func build(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	buildOnce.Do(func() {
		buildOut, buildErr = exec.Command("make", "-s", "-C", dir).CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("make: %v\n%s", buildErr, buildOut)
	}
	return filepath.Join(dir, "build")
}

// probe runs rprobe with env and returns its key=value lines.
func probe(t *testing.T, ctx context.Context, bin string, env []string, args ...string) map[string]string {
	t.Helper()
	return probeModule(t, ctx, bin, env, "fake/module.fake", args...)
}

func probeModule(t *testing.T, ctx context.Context, bin string, env []string, module string, args ...string) map[string]string {
	t.Helper()
	return runProbe(t, ctx, filepath.Join(bin, "rprobe"), env, append([]string{module}, args...)...)
}

// runProbe runs one of the test programs (rprobe, copyprobe) with env
// added to the test's and returns the key=value lines it printed; it
// fails the test unless the program exits 0 having printed done=1.
func runProbe(t *testing.T, ctx context.Context, prog string, env []string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	kv := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	if err != nil || kv["done"] != "1" {
		t.Fatalf("%s %v (env %v): %v\n%s\nstderr:\n%s", filepath.Base(prog), args, env, err, out, stderr.String())
	}
	return kv
}

// twoNodes serves two nodes of one fabric of node cores (hostiftest) and returns their sockets.
func twoNodes(t *testing.T) (client, gpu string) {
	fab := hostiftest.NewFabric()
	n1, n2 := fab.Node(1), fab.Node(2)
	t.Cleanup(n1.Close)
	t.Cleanup(n2.Close)
	return hostiftest.StartServer(t, n1, hostif.Options{}), hostiftest.StartServer(t, n2, hostif.Options{})
}

type launcher struct {
	door string
	cmd  *exec.Cmd
	log  *syncBuffer
}

// syncBuffer is the launcher's stderr, read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startLauncher(t *testing.T, bin, sock string, args ...string) *launcher {
	t.Helper()
	return startLauncherEnv(t, bin, sock, nil, args...)
}

func startLauncherEnv(t *testing.T, bin, sock string, env []string, args ...string) *launcher {
	t.Helper()
	door := filepath.Join(t.TempDir(), "door")
	l := &launcher{door: door, log: &syncBuffer{}}
	l.cmd = exec.Command(filepath.Join(bin, "dpu-cuda-launcher"),
		append([]string{"-s", sock, "-door-file", door, "-slots", "2", "-staging", "64", "-dead-ms", "1500"}, args...)...)
	l.cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(bin, "fake")), env...)
	l.cmd.Stderr = l.log
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("launcher log:\n%s", l.log)
		}
		l.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { l.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			l.cmd.Process.Kill()
			<-done
			t.Errorf("launcher did not stop on SIGINT\n%s", l.log)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(door); err == nil && strings.HasPrefix(string(b), "gva:") {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher wrote no door\n%s", l.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func remoteEnv(bin, sock, door string) []string {
	return []string{"LD_LIBRARY_PATH=" + filepath.Join(bin, "remote"), "DPU_SOCKET=" + sock, "DPU_CUDA_REMOTE=" + door,
		"DPU_CUDA_REMOTE_TIMEOUT_S=60"}
}

var same = []string{"device", "vecadd_wrong", "vecadd_sum", "matmul_wrong", "matmul_sum", "streams_wrong",
	"streams_sum", "streams_elapsed_ok", "memset_dtod_wrong", "bw_roundtrip_ok", "launch_ex_wrong", "clusters_ok",
	"tensor_map_ok", "tensor_map_rank6_refused"}

// An unmodified driver API program gives the same results through the
// fabric (client and launcher on different nodes) as on the local driver,
// and the launcher's slots are reused and served side by side.
func TestRemoteMatchesLocal(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"-n", "20000", "-m", "48", "-launches", "50", "-bw", "600000"}
	local := probe(t, ctx, bin, []string{"LD_LIBRARY_PATH=" + filepath.Join(bin, "fake")}, args...)
	if local["vecadd_wrong"] != "0" || local["matmul_wrong"] != "0" || local["streams_wrong"] != "0" ||
		local["launch_ex_wrong"] != "0" {
		t.Fatalf("local run is wrong: %v", local)
	}
	cs, gs := twoNodes(t)
	l := startLauncher(t, bin, gs)
	check := func(kv map[string]string) {
		for _, k := range same {
			if kv[k] != local[k] {
				t.Errorf("%s: remote %q, local %q", k, kv[k], local[k])
			}
		}

	}
	check(probe(t, ctx, bin, remoteEnv(bin, cs, l.door), args...))
	// Again (the slot was released), then two at once.
	check(probe(t, ctx, bin, remoteEnv(bin, cs, l.door), args...))
	var wg sync.WaitGroup
	res := make([]map[string]string, 2)
	for i := range res {
		wg.Go(func() { res[i] = probe(t, ctx, bin, remoteEnv(bin, cs, l.door), args...) })
	}
	wg.Wait()
	for _, kv := range res {
		check(kv)
	}
	// A module image larger than the staging area goes in parts, whole.
	big := filepath.Join(t.TempDir(), "big.fake")
	filler := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	if err := os.WriteFile(big, []byte("fakegpu module\n"+filler+"\nfakegpu-end\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(probeModule(t, ctx, bin, remoteEnv(bin, cs, l.door), big, args...))
	if !strings.Contains(l.log.String(), "released after") {
		t.Errorf("launcher log shows no release:\n%s", l.log)
	}
}

// A client killed in the middle of its session is reaped when its
// heartbeat stops; its slot serves the next client.
func TestKilledClientReaped(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, gs := twoNodes(t)
	l := startLauncher(t, bin, gs, "-slots", "1")
	// A probe with a long bandwidth phase, killed once its session has
	// started (the launcher logged it) and is busy.
	cmd := exec.Command(filepath.Join(bin, "rprobe"), "fake/module.fake", "-n", "1000", "-bw", "200000000")
	cmd.Env = append(os.Environ(), remoteEnv(bin, cs, l.door)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !strings.Contains(l.log.String(), "session of pid"); {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no session:\n%s", l.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(l.log.String(), "heartbeat stopped") {
		if time.Now().After(deadline) {
			t.Fatalf("the killed client's session was not ended:\n%s", l.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	kv := probe(t, ctx, bin, remoteEnv(bin, cs, l.door), "-n", "1000", "-m", "16", "-launches", "10", "-bw", "100000")
	if kv["vecadd_wrong"] != "0" {
		t.Fatalf("next client after the reap: %v", kv)
	}
}

// Without a reachable launcher the library says so: cuInit fails with
// CUDA_ERROR_NO_DEVICE (100) rather than hanging.
func TestNoLauncher(t *testing.T) {
	bin := build(t)
	cs, _ := twoNodes(t)
	cmd := exec.Command(filepath.Join(bin, "rprobe"), "fake/module.fake")
	cmd.Env = append(os.Environ(), remoteEnv(bin, cs, "gva:00000000000000020000000000001000")...)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "cuInit(0) -> 100") {
		t.Fatalf("want cuInit -> 100 (no device):\n%s", out)
	}
}

// The launcher's request decoder against random requests (see
// test/dispatchfuzz.c), plain and under AddressSanitizer.
func TestDispatchFuzz(t *testing.T) {
	bin := build(t)
	drv := filepath.Join(bin, "fake", "libcuda.so.1")
	if out, err := exec.Command(filepath.Join(bin, "dispatchfuzz"), drv, "100000", "1").CombinedOutput(); err != nil {
		t.Fatalf("dispatchfuzz: %v\n%s", err, out)
	}
	dir, _ := filepath.Abs(".")
	if out, err := exec.Command("make", "-s", "-C", dir, "asan").CombinedOutput(); err != nil {
		t.Skipf("no sanitizer build here: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(bin, "asan", "dispatchfuzz"), drv, "30000", "2")
	cmd.Env = append(os.Environ(), "ASAN_OPTIONS=detect_leaks=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dispatchfuzz (asan): %v\n%s", err, out)
	}
}

// Asynchronous work returns at once and keeps its order and errors: 2,000
// launches on a stream all return before the launcher's driver has run one
// (the fake's spin(-1) waits for a file the probe makes only after the last
// launch returned; a client that waited for each launch would wait for it
// in vain), work on two streams gives the in-order result, a launch the
// driver refuses returns success and its error comes back at the next
// synchronisation once, a block too large is refused at the call, and a
// fault is sticky; a host function and a stream callback return at once and
// run after the work before them, seeing the copies it brought back (see
// test/asyncprobe.c).
func TestAsyncSemantics(t *testing.T) {
	bin := build(t)
	// With no gated launches the rest stands on its own (order, errors).
	// A launcher each: the fake's fault is sticky for its process.
	for _, launches := range []string{"0", "2000"} {
		t.Run("launches="+launches, func(t *testing.T) {
			cs, gs := twoNodes(t)
			gate := filepath.Join(t.TempDir(), "gate")
			l := startLauncherEnv(t, bin, gs, []string{"FAKEGPU_GATE=" + gate})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "asyncprobe"), "fake/module.fake", gate, "-launches", launches)
			cmd.Env = append(os.Environ(), remoteEnv(bin, cs, l.door)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			kv := map[string]string{}
			for _, line := range strings.Split(string(out), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					kv[k] = v
				}
			}
			if err != nil || kv["done"] != "1" {
				t.Fatalf("asyncprobe: %v\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			want := map[string]string{
				"gated_launches_returned": "1", "gated_sync": "0",
				"order_wrong": "0", "query": "0", "query_copy_ok": "1",
				"good_launches": "0", "refused_launch": "0", "first_sync": "1", "second_sync": "0",
				"after_refused_ok": "1", "oversized_block": "1",
				"hostfn_returned": "0", "callback_returned": "0", "hostfn_ran": "1", "callback_status": "0",
				"hostfn_saw_copy": "1", "big_copy_returned": "0", "big_copy_ok": "1",
				"pageable_copy_done": "1",
				"fault_launch":       "0", "fault_sync": "700", "after_fault_launch": "700", "after_fault_query": "700",
			}
			if launches != "0" {
				want["hostfn_ran_before_gate"] = "0"
				want["query_before_gate"] = "600"
			}
			for k, v := range want {
				if kv[k] != v {
					t.Errorf("%s = %q, want %q", k, kv[k], v)
				}
			}
			if t.Failed() {
				t.Logf("asyncprobe:\n%s\nstderr:\n%s", out, stderr.String())
			}
		})
	}
}
