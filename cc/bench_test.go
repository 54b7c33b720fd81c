package dpurt_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/fabrictest"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

var pair = regexp.MustCompile(`(\w+)=([0-9.]+)`)

func metrics(b *testing.B, prog string, env ...string) map[string]float64 {
	b.Helper()
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v\n%s", prog, err, out)
	}
	m := map[string]float64{}
	for _, kv := range pair.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseFloat(kv[2], 64)
		m[kv[1]] = v
	}
	return m
}

// BenchmarkPrivateLoop runs one memory-bound loop on private memory
// (bench/private_loop.c) built plain, with dpu-cc on gcc (access hooks,
// which gcc cannot leave out), on clang (no access hooks, the default) and
// on clang with -dpu-access-hooks, and with the real ThreadSanitizer; the
// builds take turns b.N times and the best time of each is reported as a
// ratio to the plain build.
func BenchmarkPrivateLoop(b *testing.B) {
	bin, env := dpuCCBench(b)
	dir := b.TempDir()
	type build struct {
		name string
		cmd  []string
		env  []string
	}
	builds := []build{
		{"plain", []string{"cc", "-O2"}, nil},
		{"dpucc_gcc", []string{bin, "-O2"}, []string{"DPU_CC_COMPILER=gcc"}},
		{"dpucc_clang", []string{bin, "-O2"}, []string{"DPU_CC_COMPILER=clang"}},
		{"dpucc_clang_hooks", []string{bin, "-dpu-access-hooks", "-O2"}, []string{"DPU_CC_COMPILER=clang"}},
		{"tsan_gcc", []string{"gcc", "-O2", "-fsanitize=thread"}, nil},
	}
	for _, bd := range builds {
		cmd := exec.Command(bd.cmd[0], append(bd.cmd[1:], "-o", filepath.Join(dir, bd.name), "bench/private_loop.c")...)
		cmd.Env = append(env, bd.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("building %s: %v\n%s", bd.name, err, out)
		}
	}
	best := map[string]float64{}
	for range b.N {
		for _, bd := range builds {
			v := metrics(b, filepath.Join(dir, bd.name))["ns_per_element"]
			if old, ok := best[bd.name]; !ok || v < old {
				best[bd.name] = v
			}
		}
	}
	b.ReportMetric(best["plain"], "plain_ns/elem")
	for _, bd := range builds[1:] {
		b.ReportMetric(best[bd.name]/best["plain"], bd.name+"/plain")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkShared runs bench/shared_bench.c, built with dpu-cc, on host 1
// of two hosts of a test fabric, on pages host 2 allocates: an atomic_fetch_add
// through dpu_mmap next to dpu_fetch_add64, a first-touch fault next to
// dpu_load64, and reads of a resident page next to reads of malloc'd
// memory, all measured in the same run (medians; best of b.N runs).
func BenchmarkShared(b *testing.B) {
	prog := buildSharedBench(b)
	fab := hostiftest.NewFabric()
	var socks [2]string
	for i := range socks {
		be := fab.Node(gva.MachineIndex(i + 1))
		b.Cleanup(be.Close)
		socks[i] = hostiftest.StartServer(b, be, hostif.Options{})
	}
	runSharedBench(b, prog, socks[0], socks[1])
}

// BenchmarkSharedFabric is BenchmarkShared on a 2-node fabric of real
// agents linked over UDP: the pages live on node 1, the program runs on
// node 0, one hop away, so dpu_load64 and the first touch of a page cross
// the link.
func BenchmarkSharedFabric(b *testing.B) {
	prog := buildSharedBench(b)
	st := fabrictest.Up(b, fabric.Spec{Nodes: 2, Topo: "line"})
	runSharedBench(b, prog, fabrictest.Sock(st, 0), fabrictest.Sock(st, 1))
}

func buildSharedBench(b *testing.B) string {
	bin, env := dpuCCBench(b)
	prog := filepath.Join(b.TempDir(), "shared_bench")
	cmd := exec.Command(bin, "-O2", "-o", prog, "bench/shared_bench.c")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("dpu-cc: %v\n%s", err, out)
	}
	return prog
}

// runSharedBench runs prog b.N times on node sock with the pages on node
// owner and reports the run with the fastest fetch-add. Each time it also
// runs prog with DPU_MMAP_FAULTS=signal (faults served in the faulting
// thread) and reports the first touch of the signal run chosen the same
// way, against that run's own dpu_load64.
func runSharedBench(b *testing.B, prog, sock, owner string) {
	var m, sig map[string]float64
	for range b.N {
		r := metrics(b, prog, "DPU_SOCKET="+sock, "DPU_BENCH_OWNER_SOCKET="+owner)
		if m == nil || r["cc_fetch_add_ns"] < m["cc_fetch_add_ns"] {
			m = r
		}
		r = metrics(b, prog, "DPU_SOCKET="+sock, "DPU_BENCH_OWNER_SOCKET="+owner, "DPU_MMAP_FAULTS=signal")
		if sig == nil || r["cc_fetch_add_ns"] < sig["cc_fetch_add_ns"] { // chosen as m is
			sig = r
		}
	}
	b.ReportMetric(sig["first_touch_ns"], "signal_first_touch_ns")
	b.ReportMetric(sig["first_touch_ns"]/sig["load64_ns"], "signal_first_touch/load64")
	b.ReportMetric(sig["first_touch_ns"]/sig["touch_load64_ns"], "signal_first_touch/touch_load64")
	for _, k := range []string{"direct_fetch_add_ns", "cc_fetch_add_ns", "load64_ns", "load_page_ns", "first_touch_ns", "touch_load64_ns", "hook_touch_ns", "resident_read_ns", "private_read_ns"} {
		b.ReportMetric(m[k], k)
	}
	b.ReportMetric(m["cc_fetch_add_ns"]/m["direct_fetch_add_ns"], "cc/direct_fetch_add")
	b.ReportMetric(m["first_touch_ns"]/m["load64_ns"], "first_touch/load64")
	b.ReportMetric(m["first_touch_ns"]/m["touch_load64_ns"], "first_touch/touch_load64")
	b.ReportMetric(m["first_touch_ns"]/m["load_page_ns"], "first_touch/load_page")
	b.ReportMetric(m["hook_touch_ns"]/m["load64_ns"], "hook_touch/load64")
	b.ReportMetric(m["resident_read_ns"]/m["private_read_ns"], "resident/private_read")
	b.ReportMetric(0, "ns/op")
}
