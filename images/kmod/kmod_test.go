package kmod

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

const release = "6.1.0-test-arm64"

func TestParseModinfo(t *testing.T) {
	mi, err := ParseModinfo([]byte("alias=x\x00depends=net_failover,virtio-ring,\x00name=virtio-net\x00vermagic=6.1.0-56-arm64 SMP mod_unload aarch64\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	want := Modinfo{Name: "virtio_net", Depends: []string{"net_failover", "virtio_ring"}, Vermagic: "6.1.0-56-arm64 SMP mod_unload aarch64"}
	if !reflect.DeepEqual(mi, want) {
		t.Errorf("got %+v\nwant %+v", mi, want)
	}
	if mi.Release() != "6.1.0-56-arm64" {
		t.Errorf("Release = %q", mi.Release())
	}
	if _, err := ParseModinfo([]byte("depends=\x00")); !errors.Is(err, ErrModule) {
		t.Errorf("no name: err = %v", err)
	}
}

func TestReadModinfo(t *testing.T) {
	mi, err := ReadModinfo(bytes.NewReader(fakeModule("failover", nil, release+" SMP")))
	if err != nil {
		t.Fatal(err)
	}
	if mi.Name != "failover" || len(mi.Depends) != 0 || mi.Release() != release {
		t.Errorf("got %+v", mi)
	}
	if _, err := ReadModinfo(strings.NewReader("not an elf file at all, really")); !errors.Is(err, ErrModule) {
		t.Errorf("non-ELF: err = %v", err)
	}
	if _, err := ReadModinfo(bytes.NewReader(fakeELF(".text", []byte{1, 2, 3}))); !errors.Is(err, ErrModule) {
		t.Errorf("no .modinfo: err = %v", err)
	}
}

// writeTree writes a module tree like a Debian kernel package's: a mix of
// plain and compressed modules and a modules.builtin.
func writeTree(t *testing.T, mods map[string][]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "lib", "modules", release)
	for file, deps := range mods {
		name, _ := moduleName(filepath.Base(file))
		b := fakeModule(name, deps, release+" SMP mod_unload aarch64")
		var out bytes.Buffer
		switch {
		case strings.HasSuffix(file, ".xz"):
			w, err := xz.NewWriter(&out)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(b)
			w.Close()
		case strings.HasSuffix(file, ".zst"):
			w, err := zstd.NewWriter(&out)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(b)
			w.Close()
		default:
			out.Write(b)
		}
		p := filepath.Join(dir, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	builtin := "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(builtin), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var virtioTree = map[string][]string{
	"kernel/drivers/net/virtio_net.ko":               {"net_failover", "virtio_ring"},
	"kernel/drivers/net/net_failover.ko.xz":          {"failover"},
	"kernel/net/core/failover.ko.zst":                nil,
	"kernel/drivers/virtio/virtio_pci.ko":            {"virtio_pci_modern_dev", "virtio_pci_legacy_dev"},
	"kernel/drivers/virtio/virtio_pci_modern_dev.ko": nil,
	"kernel/drivers/virtio/virtio_pci_legacy_dev.ko": nil,
	"kernel/drivers/net/dummy.ko":                    nil,
}

func names(mods []Module) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Name)
	}
	return out
}

func TestResolve(t *testing.T) {
	tree, err := OpenTree(writeTree(t, virtioTree))
	if err != nil {
		t.Fatal(err)
	}
	if tree.Release() != release || !tree.Builtin("virtio-ring") {
		t.Errorf("Release %q, builtin virtio_ring %v", tree.Release(), tree.Builtin("virtio_ring"))
	}
	mods, err := tree.Resolve([]string{"virtio-net", "virtio_pci", "failover"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"failover", "net_failover", "virtio_net", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"}
	if got := names(mods); !reflect.DeepEqual(got, want) {
		t.Errorf("Resolve = %q\nwant %q", got, want)
	}
	if mods[1].Path != "kernel/drivers/net/net_failover.ko" {
		t.Errorf("net_failover staged as %q", mods[1].Path)
	}
	mods, err = tree.Resolve([]string{"virtio_ring"})
	if err != nil || len(mods) != 0 {
		t.Errorf("built-in only: %q, %v", names(mods), err)
	}
}

func TestResolveErrors(t *testing.T) {
	tree, err := OpenTree(writeTree(t, map[string][]string{
		"kernel/a.ko": {"b"},
		"kernel/b.ko": {"c"},
		"kernel/c.ko": {"a"},
		"kernel/d.ko": {"missing"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Resolve([]string{"a"}); !errors.Is(err, ErrCycle) || !strings.Contains(err.Error(), "a -> b -> c -> a") {
		t.Errorf("cycle: err = %v", err)
	}
	if _, err := tree.Resolve([]string{"d"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing dependency: err = %v", err)
	}
	if _, err := tree.Resolve([]string{"nosuch"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing module: err = %v", err)
	}
}

// memKernel is the in-memory twin of the kernel's module loader: it reads
// each module's .modinfo and refuses one whose dependencies are not loaded.
type memKernel struct {
	loaded map[string]bool
	order  []string
}

func (k *memKernel) Load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	mi, err := ReadModinfo(f)
	if err != nil {
		return err
	}
	if k.loaded[mi.Name] {
		return fmt.Errorf("%s: %w", path, ErrLoaded)
	}
	for _, d := range mi.Depends {
		if !k.loaded[d] && d != "virtio_ring" {
			return fmt.Errorf("%s: unknown symbol from %s", mi.Name, d)
		}
	}
	k.loaded[mi.Name] = true
	k.order = append(k.order, mi.Name)
	return nil
}

func TestStageAndLoad(t *testing.T) {
	tree, err := OpenTree(writeTree(t, virtioTree))
	if err != nil {
		t.Fatal(err)
	}
	mods, err := tree.Resolve([]string{"virtio_net", "virtio_pci"})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	list, err := tree.Stage(dst, mods)
	if err != nil {
		t.Fatal(err)
	}
	if list != ListPath(release) {
		t.Errorf("load list at %q, want %q", list, ListPath(release))
	}
	staged := filepath.Join(dst, "lib", "modules", release)
	dep, err := os.ReadFile(filepath.Join(staged, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	wantDep := "kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n"
	if !strings.Contains(string(dep), wantDep) {
		t.Errorf("modules.dep:\n%s\nwant a line %q", dep, wantDep)
	}

	// The list names guest paths; load it from the staging directory.
	b, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(list)))
	if err != nil {
		t.Fatal(err)
	}
	rooted := strings.ReplaceAll(string(b), "\n/lib/", "\n"+dst+"/lib/")
	k := &memKernel{loaded: map[string]bool{"failover": false}}
	res, err := LoadList(strings.NewReader(rooted), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Loaded) != 6 || len(res.Present) != 0 {
		t.Errorf("Result = %+v", res)
	}
	// Loading again finds every module present and fails nothing.
	res, err = LoadList(strings.NewReader(rooted), k)
	if err != nil || len(res.Present) != 6 || len(res.Loaded) != 0 {
		t.Errorf("second load: %+v, %v", res, err)
	}
}

func TestLoadListReportsEveryFailure(t *testing.T) {
	list := "# comment\n\n/nonexistent/a.ko\n/nonexistent/b.ko\n"
	res, err := LoadList(strings.NewReader(list), &memKernel{loaded: map[string]bool{}})
	if err == nil || !strings.Contains(err.Error(), "a.ko") || !strings.Contains(err.Error(), "b.ko") {
		t.Errorf("err = %v, want both files", err)
	}
	if len(res.Loaded) != 0 {
		t.Errorf("Loaded = %q", res.Loaded)
	}
}
