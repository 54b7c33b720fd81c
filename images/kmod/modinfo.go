package kmod

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrModule is wrapped by every error about a module file.
var ErrModule = errors.New("kmod")

// Modinfo is what a module says about itself in its .modinfo section.
type Modinfo struct {
	Name     string   // module name ("virtio_net")
	Depends  []string // modules it needs loaded first
	Vermagic string   // kernel release and flags it was built for
}

// ReadModinfo reads the .modinfo section of an (uncompressed) module.
func ReadModinfo(r io.ReaderAt) (Modinfo, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return Modinfo{}, fmt.Errorf("%w: not an ELF module: %w", ErrModule, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return Modinfo{}, fmt.Errorf("%w: no .modinfo section", ErrModule)
	}
	if sec.Type == elf.SHT_NOBITS || sec.Size > 1<<20 {
		return Modinfo{}, fmt.Errorf("%w: bad .modinfo section", ErrModule)
	}
	b, err := sec.Data()
	if err != nil {
		return Modinfo{}, fmt.Errorf("%w: .modinfo: %w", ErrModule, err)
	}
	return ParseModinfo(b)
}

// ParseModinfo parses the contents of a .modinfo section: NUL-separated
// "key=value" strings.
func ParseModinfo(b []byte) (Modinfo, error) {
	var mi Modinfo
	for _, entry := range bytes.Split(b, []byte{0}) {
		key, val, ok := strings.Cut(string(entry), "=")
		if !ok {
			continue // padding, or a key without a value
		}
		switch key {
		case "name":
			mi.Name = val
		case "depends":
			for _, d := range strings.Split(val, ",") {
				if d = strings.TrimSpace(d); d != "" {
					mi.Depends = append(mi.Depends, Normalize(d))
				}
			}
		case "vermagic":
			mi.Vermagic = val
		}
	}
	if mi.Name == "" {
		return Modinfo{}, fmt.Errorf("%w: .modinfo has no name", ErrModule)
	}
	mi.Name = Normalize(mi.Name)
	return mi, nil
}

// Release is the kernel release a module was built for: the first word of
// its vermagic.
func (mi Modinfo) Release() string {
	release, _, _ := strings.Cut(mi.Vermagic, " ")
	return release
}

// Normalize returns the canonical form of a module name: the kernel treats
// '-' and '_' in module names alike.
func Normalize(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}
