package dpurt_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

// dpuCC builds libdpu, libdpurt and dpu-cc, and returns dpu-cc's path and
// the environment it needs.
func dpuCC(t testing.TB) (string, []string) {
	t.Helper()
	for _, tool := range []string{"cc", "make", "ar", "nm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("DPU_PRIV_TESTS") == "require" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
	for _, dir := range []string{"../hostif/c", "."} {
		if out, err := exec.Command("make", "-s", "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("make -C %s: %v\n%s", dir, err, out)
		}
	}
	bin := filepath.Join(t.TempDir(), "dpu-cc")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/aitherion/dpu/cmd/dpu-cc").CombinedOutput(); err != nil {
		t.Fatalf("go build dpu-cc: %v\n%s", err, out)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return bin, append(os.Environ(), "DPU_CC_ROOT="+root)
}

func dpuCCBench(b *testing.B) (string, []string) { return dpuCC(b) }

// compilers are the C compilers here that dpu-cc drives.
func compilers(t *testing.T) []string {
	var ccs []string
	for _, cc := range []string{"gcc", "clang"} {
		if _, err := exec.LookPath(cc); err == nil {
			ccs = append(ccs, cc)
		}
	}
	if len(ccs) == 0 {
		t.Skip("neither gcc nor clang")
	}
	return ccs
}

// TestRuntime builds test/rt_test.c with dpu-cc on each compiler and runs
// it against two hosts sharing memory: every C11 atomic of every size on a
// dpu_mmap page must give what it gives on private memory, and leave the
// same bytes at the owner.
func TestRuntime(t *testing.T) {
	bin, env := dpuCC(t)
	var variants [][2]string // compiler, extra dpu-cc flag
	for _, cc := range compilers(t) {
		variants = append(variants, [2]string{cc, ""})
		if cc == "clang" {
			variants = append(variants, [2]string{cc, "-dpu-access-hooks"})
		}
	}
	for _, v := range variants {
		t.Run(v[0]+v[1], func(t *testing.T) {
			prog := filepath.Join(t.TempDir(), "rt_test")
			args := []string{"-O2", "-g", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", prog, "test/rt_test.c"}
			if v[1] != "" {
				args = append([]string{v[1]}, args...)
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append(env, "DPU_CC_COMPILER="+v[0])
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("dpu-cc: %v\n%s", err, out)
			}
			if out, _ := exec.Command("ldd", prog).Output(); strings.Contains(string(out), "tsan") {
				t.Fatalf("%s links the TSan runtime:\n%s", prog, out)
			}
			fab := hostiftest.NewFabric()
			var socks [2]string
			for i := range socks {
				be := fab.Node(gva.MachineIndex(i + 1))
				t.Cleanup(be.Close)
				socks[i] = hostiftest.StartServer(t, be, hostif.Options{})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, prog)
			run.Env = append(os.Environ(), "DPU_SOCKET="+socks[0], "DPU_TEST_PEER_SOCKET="+socks[1])
			out, err := run.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "ok ") {
				t.Fatalf("rt_test: %v\n%s", err, out)
			}
			t.Log(strings.TrimSpace(string(out)))
		})
	}
}

// TestMissingEntryPoint: an object that needs a __tsan_ symbol the
// runtime does not define is refused before the link, by name.
func TestMissingEntryPoint(t *testing.T) {
	bin, env := dpuCC(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "odd.c")
	if err := os.WriteFile(src, []byte("void __tsan_made_up(void);\nint main(void) { __tsan_made_up(); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-o", filepath.Join(dir, "odd"), src)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "__tsan_made_up, which libdpurt does not provide") {
		t.Fatalf("dpu-cc linked an object needing __tsan_made_up: %v\n%s", err, out)
	}
}
