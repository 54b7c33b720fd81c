package hook_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/ledger"
)

const granule = 2 * mib // the fake driver's allocation granularity

// TestNVMLUnderLimit: under a memory limit, every NVML view (memory info
// v1 and v2, the running processes v1 and v3) agrees with cuMemGetInfo and
// with the agent's account, however the program reaches NVML (linked or
// dlsym); devices without a limit are NVML's.
func TestNVMLUnderLimit(t *testing.T) {
	const limit = 64 * mib
	a := startAgent(t, tempSocket(t), ledger.Config{Devices: map[string]ledger.Limit{"0": {Memory: limit}}})
	for _, mode := range []string{"link", "dlsym", "proc"} {
		t.Run(mode, func(t *testing.T) {
			p := startProbe(t, a.sock, true, nil, "-m", mode)
			p.ok("init 0")
			p.ok("alloc " + strconv.Itoa(3*mib)) // two chunks
			p.ok("alloc 100")                    // a third, shared by small allocations
			waitFor(t, "the charge", memoryIs(a, p.pid, 0, 6*mib))
			ac, _ := a.account(p.pid, 0)
			nv := p.ok("nvml-mem 0")
			total, free, used := atoi(t, nv[0]), atoi(t, nv[1]), atoi(t, nv[2])
			if total != limit || used != ac.Memory || free != limit-ac.Memory {
				t.Fatalf("nvml memory %v, account %d under a %d limit", nv, ac.Memory, limit)
			}
			mi := p.ok("meminfo")
			if atoi(t, mi[0]) != free || atoi(t, mi[1]) != total {
				t.Fatalf("cuMemGetInfo %v, NVML %v", mi, nv)
			}
			v2 := p.ok("nvml-mem2 0")
			if atoi(t, v2[0]) != total || atoi(t, v2[1]) != 0 || atoi(t, v2[2]) != free || atoi(t, v2[3]) != used {
				t.Fatalf("nvml memory v2 %v, v1 %v", v2, nv)
			}
			want := []string{"1", strconv.Itoa(p.pid) + ":" + strconv.FormatUint(ac.Memory, 10)}
			for _, q := range []string{"nvml-procs 0", "nvml-procs1 0"} {
				if got := p.ok(q); strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("%s: %v, want %v", q, got, want)
				}
			}
			// Device 1 has no limit: NVML's own figures (the fake's use,
			// and its 1 MiB driver reservation in v2).
			if v := p.ok("nvml-mem2 1"); atoi(t, v[0]) != 16<<30 || atoi(t, v[1]) != mib {
				t.Fatalf("device 1 without a limit: %v", v)
			}
			if got := p.ok("nvml-count"); got[0] != "2" {
				t.Fatalf("count %v", got)
			}
		})
	}
}

// TestNVMLVisibleDevices: NVML counts and numbers devices as CUDA does
// under CUDA_VISIBLE_DEVICES, by ordinal or UUID prefix, and answers for
// the right device.
func TestNVMLVisibleDevices(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Devices: map[string]ledger.Limit{"0": {Memory: 32 * mib}}})
	for _, vis := range []string{"1", "GPU-face0000-0000-0000-0000-00000000000", "1,7", "1,0"} {
		p := startProbe(t, a.sock, true, []string{"CUDA_VISIBLE_DEVICES=" + vis}, "-m", "dlsym")
		count := p.ok("nvml-count")[0]
		wantCount := map[string]string{"1": "1", "1,7": "1", "1,0": "2"}[vis]
		if vis[0] == 'G' {
			wantCount = "1" // the prefix names device 0 and 1's UUIDs differ in the last digit
		}
		if count != wantCount {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%s: count %s, want %s", vis, count, wantCount)
		}
		if idx := p.ok("nvml-index 0")[0]; idx != "0" {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%s: index of handle 0 is %s", vis, idx)
		}
		// NVML index 0 is CUDA ordinal 0: the agent's device-0 limit
		// applies to it whichever physical device it is.
		if total := p.ok("nvml-mem 0")[0]; total != strconv.Itoa(32*mib) {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%s: device 0 total %s", vis, total)
		}
		if vis == "1,0" {
			if total := p.ok("nvml-mem 1")[0]; total != strconv.Itoa(16<<30) {
				t.Fatalf("second visible device total %s", total)
			}
		}
	}
}

// TestChargeWhatTheDriverTakes runs the patterns where requested bytes
// and the driver's use part: allocations just over a chunk, and many
// tiny ones packed together. The charge follows the chunks; the device's
// use stays within the limit plus one granule; frees give it all back.
func TestChargeWhatTheDriverTakes(t *testing.T) {
	const limit = 64 * mib
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: limit}})
	p := startProbe(t, a.sock, true, nil, "-m", "proc")
	p.ok("init 0")
	// 63 x (1 MiB + 1): each takes a 2 MiB chunk of its own.
	got := p.ok("many 63 " + strconv.Itoa(mib+1))
	if got[0] != "32" || got[1] != "31" {
		t.Fatalf("63 x (1 MiB+1) under 64 MiB: %v allocated/refused, want 32/31", got)
	}
	if phys := p.uint("phys 0", 0); phys > limit+granule {
		t.Fatalf("device use %d over the %d limit", phys, limit)
	}
	waitFor(t, "64 MiB charged", memoryIs(a, p.pid, 0, limit))
	p.ok("freemany")
	waitFor(t, "all released", memoryIs(a, p.pid, 0, 0))
	// 16384 x 1 byte: 512 bytes each, 4096 to a chunk.
	got = p.ok("many 16384 1")
	if got[0] != "16384" || got[1] != "0" {
		t.Fatalf("16384 x 1 byte: %v", got)
	}
	phys := p.uint("phys 0", 0)
	waitFor(t, "the chunks charged", memoryIs(a, p.pid, 0, phys))
	if phys != 8*mib {
		t.Fatalf("16384 x 1 byte take %d on the fake device, want 8 MiB", phys)
	}
	p.ok("freemany")
	waitFor(t, "all released", memoryIs(a, p.pid, 0, 0))
	if phys := p.uint("phys 0", 0); phys != 0 {
		t.Fatalf("device use %d after freeing everything", phys)
	}
	// Small allocations past the limit are refused before the device
	// holds more than the limit and one granule.
	small := startProbe(t, a.sock, true, nil)
	small.ok("init 0")
	got = small.ok("many 65536 4000") // 4 KiB each: 512 to a chunk, 128 MiB asked
	if phys := small.uint("phys 0", 0); phys > limit+granule || got[1] == "0" {
		t.Fatalf("65536 x 4000 B: %v allocated/refused, device use %d under a %d limit", got, phys, limit)
	}
}

// TestContextMemory: a context's own memory is charged once, measured
// through NVML, and released with it; the primary context's with its last
// release.
func TestContextMemory(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{})
	ctx := []string{"FAKECUDA_CTX_MEM=48M"}
	p := startProbe(t, a.sock, true, ctx, "-m", "proc")
	p.ok("init 0")
	waitFor(t, "the context charged", memoryIs(a, p.pid, 0, 48*mib))
	p.ok("alloc 100")
	waitFor(t, "the allocation too", memoryIs(a, p.pid, 0, 48*mib+granule))
	p.ok("ctxdestroy 0")
	waitFor(t, "the context released", memoryIs(a, p.pid, 0, granule))
	p.ok("primary 1")
	p.ok("primary 1") // a second retain costs nothing
	waitFor(t, "the primary context charged once", memoryIs(a, p.pid, 1, 48*mib))
	p.ok("unprimary 1")
	if ac, _ := a.account(p.pid, 1); ac.Memory != 48*mib {
		t.Fatalf("released once of twice: %d", ac.Memory)
	}
	p.ok("unprimary 1")
	waitFor(t, "the primary context released", memoryIs(a, p.pid, 1, 0))
	// An override replaces the measurement.
	q := startProbe(t, a.sock, true, append(ctx, "DPU_CUDA_CONTEXT_BYTES=1000000"))
	q.ok("init 0")
	waitFor(t, "the configured context charge", memoryIs(a, q.pid, 0, 1000000))
}

// TestCgroupLimitShared: a cgroup's limit is shared by its processes: one
// process's use leaves the other less, in admission and in what cuMemGetInfo
// and NVML show.
func TestCgroupLimitShared(t *testing.T) {
	const limit = 16 * mib
	a := startAgent(t, tempSocket(t), ledger.Config{})
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc/self/cgroup")
	}
	cg := ledger.CgroupOf(string(b)) // the probes are in the test's cgroup
	if err := a.acc.SetLimit(gpuctl.Limit{Cgroup: cg, Device: gpuctl.AnyDevice, MemoryLimit: limit}); err != nil {
		t.Fatal(err)
	}
	p1 := startProbe(t, a.sock, true, nil)
	p2 := startProbe(t, a.sock, true, nil, "-m", "dlsym")
	p1.ok("init 0")
	p2.ok("init 0")
	p1.ok("alloc " + strconv.Itoa(10*mib))
	waitFor(t, "p1's charge", memoryIs(a, p1.pid, 0, 10*mib))
	if got := p2.do("alloc " + strconv.Itoa(8*mib)); got != cudaOutOfMemory {
		t.Fatalf("p2 past the shared limit: %q", got)
	}
	p2.ok("alloc " + strconv.Itoa(6*mib))
	if mi := p2.ok("meminfo"); atoi(t, mi[0]) != 0 || atoi(t, mi[1]) != limit {
		t.Fatalf("p2 cuMemGetInfo %v under a full shared limit", mi)
	}
	if nv := p1.ok("nvml-mem 0"); atoi(t, nv[2]) != limit || atoi(t, nv[1]) != 0 {
		t.Fatalf("p1 NVML %v under a full shared limit", nv)
	}
	// NVML's process table is the group's: it adds up to the memory shown used.
	for _, c := range []struct {
		p          *probe
		self, peer int
		own, other int
	}{{p1, p1.pid, p2.pid, 10 * mib, 6 * mib}, {p2, p2.pid, p1.pid, 6 * mib, 10 * mib}} {
		want := fmt.Sprintf("2 %d:%d %d:%d", c.self, c.own, c.peer, c.other)
		for _, q := range []string{"nvml-procs 0", "nvml-procs1 0"} {
			if got := strings.Join(c.p.ok(q), " "); got != want {
				t.Fatalf("%d %s: %s, want %s", c.self, q, got, want)
			}
		}
	}
	// A process with nothing in use under the limit (a monitor) sees the
	// group's table and use, and itself not in it.
	mon := startProbe(t, a.sock, true, nil)
	mon.ok("init 0")
	mon.ok("ctxdestroy 0")
	if got, want := strings.Join(mon.ok("nvml-procs 0"), " "), fmt.Sprintf("2 %d:%d %d:%d", p1.pid, 10*mib, p2.pid, 6*mib); got != want {
		t.Fatalf("monitor's table %s, want %s", got, want)
	}
	if nv := mon.ok("nvml-mem 0"); atoi(t, nv[2]) != limit || atoi(t, nv[0]) != limit {
		t.Fatalf("monitor NVML %v under a full shared limit", nv)
	}
	procs := a.acc.Processes()
	for _, pr := range procs {
		if pr.MemoryLimit != limit || pr.Others+pr.MemoryUsed != limit || pr.LimitOf != "cgroup "+cg {
			t.Fatalf("dpuctl gpu show: %+v", pr)
		}
	}
}

// TestGraphLaunchThrottled: graph launches take quota tokens as kernel
// launches do.
func TestGraphLaunchThrottled(t *testing.T) {
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Quota: 20}, Window: 50 * time.Millisecond})
	p := startProbe(t, a.sock, true, nil, "-m", "proc")
	p.ok("init")
	p.ok("kernel 2000")
	p.ok("graph 4") // 8 ms a launch
	p.ok("graphlaunch 2")
	p.ok("sync")
	launch := p.uint("graphlaunch 10", 0) // 80 ms of kernel time at 20%
	sync := p.uint("sync", 0)
	if elapsed := time.Duration(launch + sync); elapsed < 250*time.Millisecond {
		t.Fatalf("10 graph launches of 8 ms at 20%% ran in %v: not throttled", elapsed)
	}
	if ac, _ := a.account(p.pid, 0); ac.Grants < 3 || ac.Deferred == 0 {
		t.Fatalf("account %+v", ac)
	}
}

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTrueUsage: memory the driver takes outside the allocation entry
// points (a module's image, here) is charged from the driver's per-process
// figure: dpuctl gpu show reports what the device holds for the process, the
// allocation that would take the device past the limit is the one refused,
// and the charge falls when the driver gives the memory back.
func TestTrueUsage(t *testing.T) {
	const limit, module, ctx = 64 * mib, 10 * mib, 8 * mib
	a := startAgent(t, tempSocket(t), ledger.Config{Default: ledger.Limit{Memory: limit}})
	for _, c := range []struct {
		mode string
		bg   bool // the background thread reads the figure before the allocations
	}{{"link", true}, {"proc", true}, {"proc", false}} {
		t.Run(c.mode+"/bg="+strconv.FormatBool(c.bg), func(t *testing.T) {
			env := []string{"FAKECUDA_MODULE_MEM=10M", "FAKECUDA_CTX_MEM=8M"}
			if !c.bg {
				env = append(env, "DPU_CUDA_REFRESH_MS=600000") // only admissions read it
			}
			p := startProbe(t, a.sock, true, env, "-m", c.mode)
			p.ok("init 0")
			waitFor(t, "the context charged", memoryIs(a, p.pid, 0, ctx))
			p.ok("kernel 0") // loads the module: 10 MiB the hook never saw allocated
			if phys := p.uint("phys 0", 0); phys != ctx+module {
				t.Fatalf("the fake device holds %d, want context and module %d", phys, ctx+module)
			}
			if c.bg {
				waitFor(t, "the module charged (background reading)", memoryIs(a, p.pid, 0, ctx+module))
			}
			// 2 MiB + 1 each takes two chunks: (64 - 18) MiB leave room for 11.
			got := p.ok("many 40 " + strconv.Itoa(2*mib+1))
			phys := p.uint("phys 0", 0)
			if got[0] != "11" || phys > limit {
				t.Fatalf("under %d with %d of driver memory: %v allocated/refused, the device holds %d",
					limit, ctx+module, got, phys)
			}
			waitFor(t, "the charge = what the device holds", memoryIs(a, p.pid, 0, phys))
			if nv := p.ok("nvml-mem 0"); atoi(t, nv[2]) != phys || atoi(t, nv[0]) != limit {
				t.Fatalf("NVML %v, the device holds %d", nv, phys)
			}
			p.ok("freemany")
			p.ok("unload")
			if c.bg {
				waitFor(t, "the module's charge given back", memoryIs(a, p.pid, 0, ctx))
			}
			// With the room back, the same allocations fit again, more of them.
			if got := p.ok("many 40 " + strconv.Itoa(2*mib+1)); got[0] != "14" {
				t.Fatalf("after the unload: %v allocated/refused, want 14", got)
			}
		})
	}
}
