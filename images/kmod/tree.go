package kmod

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// ErrNotFound is returned for a module that is neither in the tree nor
// built into the kernel.
var ErrNotFound = errors.New("kmod: module not found")

// ErrCycle is returned when modules depend on each other in a cycle.
var ErrCycle = errors.New("kmod: dependency cycle")

// maxModuleSize bounds a module read from the tree (uncompressed).
const maxModuleSize = 64 << 20

// Tree is a kernel's module directory on the build host
// (lib/modules/RELEASE of an unpacked kernel package).
type Tree struct {
	dir     string
	release string
	files   map[string]string // module name → slash path relative to dir
	builtin map[string]bool
}

// Module is one module of a resolved set.
type Module struct {
	Name    string
	Path    string // relative to the tree, uncompressed name ("kernel/…/x.ko")
	Depends []string
	src     string // relative path of the file in the tree (maybe compressed)
}

// OpenTree indexes the module tree at dir. Its base name is taken as the
// kernel release.
func OpenTree(dir string) (*Tree, error) {
	t := &Tree{
		dir:     dir,
		release: filepath.Base(filepath.Clean(dir)),
		files:   map[string]string{},
		builtin: map[string]bool{},
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		name, ok := moduleName(d.Name())
		if !ok {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		t.files[name] = filepath.ToSlash(rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kmod: index %s: %w", dir, err)
	}
	if err := t.readBuiltin(); err != nil {
		return nil, err
	}
	return t, nil
}

// Release is the kernel release of the tree.
func (t *Tree) Release() string { return t.release }

// Builtin says whether the kernel has the module built in.
func (t *Tree) Builtin(name string) bool { return t.builtin[Normalize(name)] }

// readBuiltin reads modules.builtin (one path a line) if the tree has one.
func (t *Tree) readBuiltin() error {
	f, err := os.Open(filepath.Join(t.dir, "modules.builtin"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kmod: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, ok := moduleName(path.Base(strings.TrimSpace(sc.Text()))); ok {
			t.builtin[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("kmod: modules.builtin: %w", err)
	}
	return nil
}

// Resolve returns the wanted modules and everything they depend on, each
// once, dependencies before their dependents. Built-in modules are left
// out. The order is deterministic: it follows wanted, then each module's
// depends list.
func (t *Tree) Resolve(wanted []string) ([]Module, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var out []Module
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		name = Normalize(name)
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("%w: %s", ErrCycle, strings.Join(append(chain, name), " -> "))
		}
		src, ok := t.files[name]
		if !ok {
			if t.builtin[name] {
				state[name] = done
				return nil
			}
			return fmt.Errorf("%w: %s (release %s)", ErrNotFound, name, t.release)
		}
		state[name] = visiting
		mi, err := t.modinfo(src)
		if err != nil {
			return err
		}
		for _, dep := range mi.Depends {
			if err := visit(dep, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = done
		out = append(out, Module{Name: name, Path: uncompressedPath(src), Depends: mi.Depends, src: src})
		return nil
	}
	for _, w := range wanted {
		if err := visit(w, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t *Tree) modinfo(rel string) (Modinfo, error) {
	b, err := t.read(rel)
	if err != nil {
		return Modinfo{}, err
	}
	mi, err := ReadModinfo(bytes.NewReader(b))
	if err != nil {
		return Modinfo{}, fmt.Errorf("%s: %w", rel, err)
	}
	return mi, nil
}

// read returns the uncompressed contents of the module file at rel.
func (t *Tree) read(rel string) ([]byte, error) {
	f, err := os.Open(filepath.Join(t.dir, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("kmod: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(rel, ".ko.xz"):
		xr, err := xz.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("kmod: %s: %w", rel, err)
		}
		r = xr
	case strings.HasSuffix(rel, ".ko.zst"):
		zr, err := zstd.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("kmod: %s: %w", rel, err)
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(rel, ".ko.gz"):
		gr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("kmod: %s: %w", rel, err)
		}
		defer gr.Close()
		r = gr
	}
	b, err := io.ReadAll(io.LimitReader(r, maxModuleSize+1))
	if err != nil {
		return nil, fmt.Errorf("kmod: %s: %w", rel, err)
	}
	if len(b) > maxModuleSize {
		return nil, fmt.Errorf("kmod: %s: larger than %d bytes", rel, maxModuleSize)
	}
	return b, nil
}

// Stage writes mods (as Resolve returned them) under dst as the image will
// carry them: dst/lib/modules/RELEASE/ with each module uncompressed at its
// tree path, a modules.dep for them, and the load list LoadListName. It
// returns the load list's guest path.
func (t *Tree) Stage(dst string, mods []Module) (string, error) {
	guestDir := path.Join("/lib/modules", t.release)
	hostDir := filepath.Join(dst, filepath.FromSlash(guestDir))
	byName := map[string]Module{}
	for _, m := range mods {
		byName[m.Name] = m
	}
	var dep, list bytes.Buffer
	fmt.Fprintf(&list, "# Modules the boot image loads for kernel %s, in order.\n", t.release)
	for _, m := range mods {
		b, err := t.read(m.src)
		if err != nil {
			return "", err
		}
		out := filepath.Join(hostDir, filepath.FromSlash(m.Path))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return "", fmt.Errorf("kmod: %w", err)
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return "", fmt.Errorf("kmod: %w", err)
		}
		fmt.Fprintf(&dep, "%s:", m.Path)
		for _, d := range transitive(m, byName) {
			fmt.Fprintf(&dep, " %s", d)
		}
		dep.WriteString("\n")
		fmt.Fprintf(&list, "%s\n", path.Join(guestDir, m.Path))
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return "", fmt.Errorf("kmod: %w", err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "modules.dep"), dep.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("kmod: %w", err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, LoadListName), list.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("kmod: %w", err)
	}
	return path.Join(guestDir, LoadListName), nil
}

// transitive lists m's dependencies (direct and indirect, built-ins left
// out) as modules.dep does: a module before the ones it depends on.
func transitive(m Module, byName map[string]Module) []string {
	seen := map[string]bool{}
	var order []string
	var walk func(name string)
	walk = func(name string) {
		d, ok := byName[name]
		if !ok || seen[name] {
			return
		}
		seen[name] = true
		for _, dd := range d.Depends {
			walk(dd)
		}
		order = append(order, d.Path)
	}
	for _, d := range m.Depends {
		walk(d)
	}
	// walk appended dependencies first; modules.dep wants them last.
	for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
		order[i], order[j] = order[j], order[i]
	}
	return order
}

// moduleName returns the module name of a module file name.
func moduleName(file string) (string, bool) {
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if base, ok := strings.CutSuffix(file, ext); ok && base != "" {
			return Normalize(base), true
		}
	}
	return "", false
}

func uncompressedPath(rel string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if base, ok := strings.CutSuffix(rel, ext); ok {
			return base
		}
	}
	return rel
}
