package remote_test

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Libraries find driver entry points two ways, and the client must answer
// both as it did on the GPU run:
//   - by name with dlsym (cuBLAS's library resolves its driver table so and
//     fails to start when one is missing): every name a CUDA 13 runtime and
//     cuBLAS 13 hold (test/names.txt) is exported;
//   - through cuGetProcAddress with a version (the CUDA runtime, and so
//     PyTorch): every lookup that was served on the GPU run
//     (test/lookups.txt) is still served.
func TestEntryPointsExported(t *testing.T) {
	bin := build(t)
	f, err := elf.Open(filepath.Join(bin, "remote", "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			have[s.Name] = true
		}
	}
	names := lines(t, "test/names.txt")
	if len(names) < 400 {
		t.Fatalf("test/names.txt holds %d names", len(names))
	}
	for _, n := range names {
		if !have[n] {
			t.Errorf("%s is not exported", n)
		}
	}
}

func TestEntryPointsServed(t *testing.T) {
	bin := build(t)
	recorded := lines(t, "test/lookups.txt")
	cmd := exec.Command(filepath.Join(bin, "procs"), filepath.Join(bin, "remote", "libcuda.so.1"))
	cmd.Stdin = strings.NewReader(strings.Join(recorded, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("procs: %v", err)
	}
	now := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			now[f[0]+" "+f[1]] = f[2]
		}
	}
	served := 0
	for _, l := range recorded {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("test/lookups.txt: %q", l)
		}
		key := f[0] + " " + f[1]
		if f[2] == "served" {
			served++
			if now[key] != "served" {
				t.Errorf("%s was served on the GPU run and is %q now", key, now[key])
			}
		}
	}
	if served < 150 {
		t.Fatalf("test/lookups.txt records %d served lookups", served)
	}
}

// lines reads a file's lines that are not empty or comments.
func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
