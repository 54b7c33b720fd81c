package libdpu_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPkgConfigBuildTree: pkg-config on build/dpu.pc (as the README says)
// names this tree's header and library, so a C program builds and runs
// against it before anything is installed.
func TestPkgConfigBuildTree(t *testing.T) {
	if _, err := exec.LookPath("pkg-config"); err != nil {
		if os.Getenv("DPU_PRIV_TESTS") == "require" {
			t.Fatal("pkg-config not found")
		}
		t.Skip("pkg-config not found")
	}
	build(t, "build/libdpu.so", "build/dpu.pc")
	flags, err := exec.Command("pkg-config", "--cflags", "--libs", "build/dpu.pc").Output()
	if err != nil {
		t.Fatalf("pkg-config: %v", err)
	}
	src := filepath.Join(t.TempDir(), "p.c")
	bin := filepath.Join(filepath.Dir(src), "p")
	prog := "#include <dpu.h>\n#include <stdio.h>\nint main(void) { printf(\"%p\\n\", (void *)atomic_cas_remote); return 0; }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-o", bin, src}, strings.Fields(string(flags))...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if out, err := exec.Command(bin).CombinedOutput(); err != nil {
		t.Fatalf("the program does not run (library not found?): %v\n%s", err, out)
	}
}
