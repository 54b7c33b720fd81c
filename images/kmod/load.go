package kmod

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// LoadListName is the name of the load list in a staged module directory.
const LoadListName = "dpu.load"

// ListPath is the guest path of the load list for a kernel release.
func ListPath(release string) string {
	return path.Join("/lib/modules", release, LoadListName)
}

// ErrLoaded is returned by a Loader for a module the kernel already has.
var ErrLoaded = errors.New("kmod: already loaded")

// Loader puts one module file into the running kernel.
type Loader interface {
	Load(path string) error
}

// KernelLoader loads modules with finit_module(2).
type KernelLoader struct{}

// Load loads the module file at path. A module the kernel already has
// yields ErrLoaded.
func (KernelLoader) Load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("kmod: %w", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: %w", path, ErrLoaded)
		}
		return fmt.Errorf("kmod: finit_module %s: %w", path, err)
	}
	return nil
}

// Result is the outcome of loading a load list.
type Result struct {
	Loaded  []string // newly loaded
	Present []string // already in the kernel
}

// LoadList loads every module a load list names (one path a line; blank
// lines and '#' comments are skipped), in order. It goes on past a failure
// and returns every failure joined.
func LoadList(r io.Reader, l Loader) (Result, error) {
	var (
		res  Result
		errs []error
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		switch err := l.Load(p); {
		case err == nil:
			res.Loaded = append(res.Loaded, p)
		case errors.Is(err, ErrLoaded):
			res.Present = append(res.Present, p)
		default:
			errs = append(errs, err)
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("kmod: load list: %w", err))
	}
	return res, errors.Join(errs...)
}
