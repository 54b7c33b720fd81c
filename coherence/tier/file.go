package tier

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// File is the storage a disk tier writes through: positioned reads and
// writes and a sync that makes what was written durable. OSFile is a file
// or block device; MemFile is its in-memory twin for tests, which keeps
// what was synced apart from what was only written and crashes on demand.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	// Size is the usable length of the file in bytes.
	Size() int64
	// Name names the file in errors and logs.
	Name() string
	Close() error
}

// OSFile is a tier file on a file system or a block device, held under an
// exclusive flock for as long as it is open (two agents never share one).
type OSFile struct {
	f    *os.File
	size int64
}

// OpenFile opens the tier file at path for a tier of size bytes. A
// regular file is extended to size (its blocks reserved with fallocate, so
// that a full disk is found now and not mid-spill); a block device must be
// at least size bytes. Every failure names the file and says what to do.
func OpenFile(path string, size int64) (*OSFile, error) {
	if size < minSize {
		return nil, fmt.Errorf("tier file %s: size %d bytes is below the minimum of %d (a header and one slot): give a larger SIZE", path, size, minSize)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("tier file %s does not exist: create it (touch %s, or name a block device) or fix the path: %w", path, path, err)
	case err != nil:
		return nil, fmt.Errorf("tier file %s: %w", path, err)
	case st.IsDir():
		return nil, fmt.Errorf("tier file %s is a directory: name a file (e.g. %s) or a block device", path, filepath.Join(path, "fast.tier"))
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return nil, fmt.Errorf("tier file %s is not writable by this agent: fix its owner or mode, or name another file: %w", path, err)
		}
		return nil, fmt.Errorf("tier file %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("tier file %s is in use by another agent (flock held): give each agent its own tier file: %w", path, err)
		}
		return nil, fmt.Errorf("tier file %s: flock: %w", path, err)
	}
	o := &OSFile{f: f, size: size}
	if st.Mode()&os.ModeDevice != 0 {
		end, err := f.Seek(0, 2)
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("tier file %s: size of the device: %w", path, err)
		}
		if end < size {
			o.Close()
			return nil, fmt.Errorf("tier file %s: the device holds %d bytes, fewer than the tier's SIZE of %d: lower SIZE or name a larger device", path, end, size)
		}
		return o, nil
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		o.Close()
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return nil, fmt.Errorf("tier file %s: cannot reserve %d bytes, the disk is full: free space there, lower SIZE, or name a file on another disk: %w", path, size, err)
		}
		if !errors.Is(err, syscall.EOPNOTSUPP) {
			return nil, fmt.Errorf("tier file %s: reserving %d bytes: %w", path, size, err)
		}
		// a file system without fallocate: size it, find a full disk
		// when the first spill is refused
		if st.Size() < size {
			if err := f.Truncate(size); err != nil {
				return nil, fmt.Errorf("tier file %s: extending to %d bytes: %w", path, size, err)
			}
		}
	}
	return o, nil
}

// ReadAt implements File.
func (o *OSFile) ReadAt(p []byte, off int64) (int, error) { return o.f.ReadAt(p, off) }

// WriteAt implements File.
func (o *OSFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }

// Sync implements File (fdatasync: the file's size never changes).
func (o *OSFile) Sync() error {
	if err := unix.Fdatasync(int(o.f.Fd())); err != nil {
		return fmt.Errorf("tier file %s: fdatasync: %w", o.f.Name(), err)
	}
	return nil
}

// Size implements File.
func (o *OSFile) Size() int64 { return o.size }

// Name implements File.
func (o *OSFile) Name() string { return o.f.Name() }

// Close implements File (and drops the flock).
func (o *OSFile) Close() error { return o.f.Close() }

// ErrInjected is the error a MemFile's injected failure returns.
var ErrInjected = errors.New("tier: injected disk failure")

// MemFile is an in-memory File: the tests' twin of OSFile. Written bytes
// stay pending until Sync; Crash keeps a seeded subset of the pending
// writes, the last kept one possibly torn, as a power cut would.
type MemFile struct {
	name    string
	synced  []byte
	pending []memWrite
	rng     *rand.Rand
	// FailReads, FailWrites and FailSyncs, while set, make ReadAt,
	// WriteAt and Sync fail with them (a full or failing disk).
	FailReads, FailWrites, FailSyncs error
	// CrashAtSync, if positive, makes the CrashAtSync-th Sync from now
	// a power cut in the middle of the sync: Crash, then ErrInjected.
	CrashAtSync int
	// Reads, Writes and Syncs count the calls.
	Reads, Writes, Syncs int
}

type memWrite struct {
	off int64
	p   []byte
}

// NewMemFile returns a zeroed MemFile of size bytes whose crashes draw
// from seed.
func NewMemFile(name string, size int64, seed uint64) *MemFile {
	return &MemFile{name: name, synced: make([]byte, size), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// ReadAt implements File: what was written, synced or not.
func (m *MemFile) ReadAt(p []byte, off int64) (int, error) {
	m.Reads++
	if m.FailReads != nil {
		return 0, m.FailReads
	}
	if off < 0 || off+int64(len(p)) > int64(len(m.synced)) {
		return 0, fmt.Errorf("tier: read of %d bytes at %d past the end of %s", len(p), off, m.name)
	}
	copy(p, m.synced[off:])
	for _, w := range m.pending {
		lo, hi := max(off, w.off), min(off+int64(len(p)), w.off+int64(len(w.p)))
		if lo < hi {
			copy(p[lo-off:hi-off], w.p[lo-w.off:hi-w.off])
		}
	}
	return len(p), nil
}

// WriteAt implements File.
func (m *MemFile) WriteAt(p []byte, off int64) (int, error) {
	m.Writes++
	if m.FailWrites != nil {
		return 0, m.FailWrites
	}
	if off < 0 || off+int64(len(p)) > int64(len(m.synced)) {
		return 0, fmt.Errorf("tier: write of %d bytes at %d past the end of %s", len(p), off, m.name)
	}
	m.pending = append(m.pending, memWrite{off: off, p: append([]byte(nil), p...)})
	return len(p), nil
}

// Sync implements File.
func (m *MemFile) Sync() error {
	m.Syncs++
	if m.FailSyncs != nil {
		return m.FailSyncs
	}
	if m.CrashAtSync > 0 {
		m.CrashAtSync--
		if m.CrashAtSync == 0 {
			m.Crash()
			return ErrInjected
		}
	}
	for _, w := range m.pending {
		copy(m.synced[w.off:], w.p)
	}
	m.pending = m.pending[:0]
	return nil
}

// Crash is a power cut: each write pending since the last Sync survives
// or not (seeded, in any order, as a disk reorders them), and a surviving
// one may be cut short (a torn write).
func (m *MemFile) Crash() {
	for _, w := range m.pending {
		if m.rng.IntN(2) == 0 {
			continue
		}
		n := len(w.p)
		if m.rng.IntN(3) == 0 {
			n = m.rng.IntN(n + 1)
		}
		copy(m.synced[w.off:], w.p[:n])
	}
	m.pending = m.pending[:0]
}

// Size implements File.
func (m *MemFile) Size() int64 { return int64(len(m.synced)) }

// Name implements File.
func (m *MemFile) Name() string { return m.name }

// Close implements File.
func (m *MemFile) Close() error { return nil }
