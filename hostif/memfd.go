package hostif

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sharedFile is a memfd the server reads and writes through its own
// mapping and hands to clients, sealed (after the server mapped it) with
// the seals it was made with.
type sharedFile struct {
	fd  int
	mem []byte // the server's read-write mapping
}

// Seals of shared files. Neither kind can grow or shrink (no mapping of
// it can fault) and neither takes more seals.
const (
	// readOnlySeals: clients can only map the file read-only
	// (F_SEAL_FUTURE_WRITE): replica files and status tables.
	readOnlySeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL
	// fixedSeals: clients write it too: bulk areas.
	fixedSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
)

func newSharedFile(name string, size int, seals int) (*sharedFile, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create %s: %w", name, err)
	}
	f := &sharedFile{fd: fd}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.close()
		return nil, fmt.Errorf("ftruncate %s: %w", name, err)
	}
	if f.mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		f.close()
		return nil, fmt.Errorf("mmap %s: %w", name, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.close()
		return nil, fmt.Errorf("seal %s (needs Linux 5.1): %w", name, err)
	}
	return f, nil
}

func (f *sharedFile) close() {
	if f.mem != nil {
		_ = unix.Munmap(f.mem)
		f.mem = nil
	}
	if f.fd >= 0 {
		_ = unix.Close(f.fd)
		f.fd = -1
	}
}
