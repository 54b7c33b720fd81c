package pagelog

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aitherion/dpu/internal/rundir"
)

// Disk is the stable storage of one log.
type Disk interface {
	// Load returns the log's bytes (nil, nil when there is none yet).
	Load() ([]byte, error)
	// Append writes p at the end of the log; it is durable only once Sync
	// returned.
	Append(p []byte) error
	// Sync makes everything appended durable.
	Sync() error
	// Replace makes p the whole log, durably and atomically: after a
	// crash the log is either the old one or p.
	Replace(p []byte) error
	// Close releases the disk.
	Close() error
	// Name says where the log lives (errors name it).
	Name() string
}

// FileName is the log's file in its state directory.
const FileName = "pages.log"

// OSDisk is a log file in a directory of a file system. The file is
// trusted only when it is a regular file of the process's user that
// neither its group nor others may write, reached through no symlink
// (rundir.OpenTrusted, rundir.OpenAppend); it is replaced through an
// O_EXCL|O_NOFOLLOW temporary (rundir.WriteFile).
type OSDisk struct {
	dir   string // where the file is opened: a path, or a directory's descriptor (/proc/self/fd/N)
	shown string // the directory as errors name it
	f     *os.File
}

// NewOSDisk returns the log of state directory dir (created, mode 0700, if
// missing).
func NewOSDisk(dir string) (*OSDisk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state-dir %s: %w", dir, err)
	}
	return &OSDisk{dir: dir, shown: dir}, nil
}

// NewOSDiskIn returns the log of a state directory that is open already:
// dir names it through its descriptor (rundir.Dir.Path), so every use of
// the log goes to the directory that was checked, whatever its path
// names later; shown is the path errors name it by.
func NewOSDiskIn(dir, shown string) *OSDisk { return &OSDisk{dir: dir, shown: shown} }

// Name implements Disk.
func (d *OSDisk) Name() string { return filepath.Join(d.shown, FileName) }

// path is where the log is opened.
func (d *OSDisk) path() string { return filepath.Join(d.dir, FileName) }

// Load implements Disk.
func (d *OSDisk) Load() ([]byte, error) {
	f, err := rundir.OpenTrusted(d.path(), os.Geteuid())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.Name(), err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.Name(), err)
	}
	return b, nil
}

func (d *OSDisk) open() error {
	if d.f != nil {
		return nil
	}
	f, err := rundir.OpenAppend(d.path(), 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", d.Name(), err)
	}
	d.f = f
	return nil
}

// Append implements Disk.
func (d *OSDisk) Append(p []byte) error {
	if err := d.open(); err != nil {
		return err
	}
	if _, err := d.f.Write(p); err != nil {
		return fmt.Errorf("write %s: %w", d.Name(), err)
	}
	return nil
}

// Sync implements Disk.
func (d *OSDisk) Sync() error {
	if d.f == nil {
		return nil
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", d.Name(), err)
	}
	return nil
}

// Replace implements Disk: the new log is written to a temporary file
// (O_EXCL|O_NOFOLLOW), synced, renamed over the log, and the directory
// synced.
func (d *OSDisk) Replace(p []byte) error {
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
	if err := rundir.WriteFile(d.path(), p, 0o600, -1, -1); err != nil {
		return fmt.Errorf("replace %s: %w", d.Name(), err)
	}
	dir, err := os.Open(d.dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", d.shown, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", d.shown, err)
	}
	return nil
}

// Close implements Disk.
func (d *OSDisk) Close() error {
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}

// ErrCrashed is returned by a MemDisk's Sync that a planned crash cut.
var ErrCrashed = errors.New("pagelog: the disk crashed during the sync")

// MemDisk is an in-memory Disk that survives its node's crashes: the
// simulator's and the tests' twin of OSDisk.
type MemDisk struct {
	synced  []byte
	pending []byte
	// CrashAtSync, if positive, makes the CrashAtSync-th Sync from now
	// keep a torn prefix of what it should have made durable and fail
	// with ErrCrashed (a power cut in the middle of the fsync).
	CrashAtSync int
	// Space, if positive, is how many bytes the disk holds (a full file
	// system): an Append past it writes what fits and fails with
	// syscall.ENOSPC, as write(2) does; a Replace past it fails with
	// ENOSPC and keeps the old log.
	Space int
	rng   *rand.Rand
	syncs uint64
	name  string
}

// NewMemDisk returns an empty MemDisk whose crashes draw from seed.
func NewMemDisk(name string, seed uint64) *MemDisk {
	return &MemDisk{name: name, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Name implements Disk.
func (d *MemDisk) Name() string { return d.name }

// Load implements Disk: what a restarted node reads (the synced bytes; an
// earlier Crash decided what of the rest survived).
func (d *MemDisk) Load() ([]byte, error) {
	if d.synced == nil {
		return nil, nil
	}
	return append([]byte(nil), d.synced...), nil
}

// Append implements Disk.
func (d *MemDisk) Append(p []byte) error {
	if room := d.Space - len(d.synced) - len(d.pending); d.Space > 0 && len(p) > room {
		d.pending = append(d.pending, p[:max(room, 0)]...)
		return fmt.Errorf("write %s: %w", d.name, syscall.ENOSPC)
	}
	d.pending = append(d.pending, p...)
	return nil
}

// Sync implements Disk.
func (d *MemDisk) Sync() error {
	d.syncs++
	if d.CrashAtSync > 0 {
		d.CrashAtSync--
		if d.CrashAtSync == 0 {
			d.Crash()
			return ErrCrashed
		}
	}
	d.synced = append(d.synced, d.pending...)
	d.pending = d.pending[:0]
	return nil
}

// Replace implements Disk (atomic: a crash keeps the old log or p).
func (d *MemDisk) Replace(p []byte) error {
	if d.Space > 0 && len(p)+len(d.synced)+len(d.pending) > d.Space {
		// The new file is written beside the old one before the rename.
		return fmt.Errorf("write %s.new: %w", d.name, syscall.ENOSPC)
	}
	d.synced = append(d.synced[:0:0], p...)
	d.pending = d.pending[:0]
	return nil
}

// Close implements Disk.
func (d *MemDisk) Close() error { return nil }

// Syncs is how many times Sync was called.
func (d *MemDisk) Syncs() uint64 { return d.syncs }

// Crash is a power cut: of the bytes written since the last Sync, a seeded
// prefix survives (none, some, all), and its last surviving byte may be
// garbled (a torn sector).
func (d *MemDisk) Crash() {
	if n := len(d.pending); n > 0 {
		keep := d.rng.IntN(n + 1)
		d.synced = append(d.synced, d.pending[:keep]...)
		if keep > 0 && d.rng.IntN(2) == 0 {
			d.synced[len(d.synced)-1] ^= 0x5a
		}
	}
	d.pending = d.pending[:0]
}
