package ring

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/internal/nbio"
)

// seals are the seals a ring memfd carries: its size is fixed (so neither
// side's mapping can ever fault) and no further seal may be added.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// createMemfd makes a sealed memfd of c's size with the control page
// written, and maps it read-write.
func createMemfd(c Config) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate("dpu-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("ring: memfd_create: %w", err)
	}
	fail := func(what string, e error) (int, []byte, error) {
		if mem != nil {
			_ = unix.Munmap(mem)
		}
		_ = unix.Close(fd)
		return -1, nil, fmt.Errorf("ring: %s: %w", what, e)
	}
	size := c.MapSize()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail("mmap", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	le := binary.LittleEndian
	le.PutUint32(mem[offMagic:], Magic)
	le.PutUint16(mem[offVersion:], LayoutVersion)
	le.PutUint32(mem[offEntries:], c.Entries)
	le.PutUint32(mem[offSlotSize:], c.SlotSize)
	le.PutUint64(mem[offMapSize:], uint64(size))
	return fd, mem, nil
}

// mapMemfd checks a ring memfd offered by the agent (seals, size, control
// page) and maps it read-write.
func mapMemfd(fd int) (Config, []byte, error) {
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return Config{}, nil, fmt.Errorf("%w: F_GET_SEALS: %w", ErrLayout, err)
	}
	if got&seals != seals || got&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return Config{}, nil, fmt.Errorf("%w: seals %#x, want %#x and writable", ErrLayout, got, seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Config{}, nil, fmt.Errorf("%w: fstat: %w", ErrLayout, err)
	}
	if st.Size < ControlSize || st.Size > int64(Config{MaxEntries, MaxSlotSize}.MapSize()) {
		return Config{}, nil, fmt.Errorf("%w: memfd of %d bytes", ErrLayout, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return Config{}, nil, fmt.Errorf("ring: mmap: %w", err)
	}
	le := binary.LittleEndian
	c := Config{Entries: le.Uint32(mem[offEntries:]), SlotSize: le.Uint32(mem[offSlotSize:])}
	err = c.Check()
	switch {
	case err != nil:
	case le.Uint32(mem[offMagic:]) != Magic || le.Uint16(mem[offVersion:]) != LayoutVersion:
		err = fmt.Errorf("%w: magic %#x version %d", ErrLayout, le.Uint32(mem[offMagic:]), le.Uint16(mem[offVersion:]))
	case le.Uint64(mem[offMapSize:]) != uint64(st.Size) || int64(c.MapSize()) != st.Size:
		err = fmt.Errorf("%w: %d-byte memfd says %d bytes, %+v needs %d", ErrLayout, st.Size, le.Uint64(mem[offMapSize:]), c, c.MapSize())
	}
	if err != nil {
		_ = unix.Munmap(mem)
		return Config{}, nil, err
	}
	return c, mem, nil
}

// newBell returns a connected pair of non-blocking datagram sockets: the
// agent keeps one end, the host gets the other.
func newBell() (agent, host int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("ring: bell socketpair: %w", err)
	}
	return fds[0], fds[1], nil
}

// ring sends one wakeup datagram without ever waiting: a full queue means
// wakeups are pending already, and a closed peer is the connection's
// business, not the ring's.
func ring(fd int) {
	_, _ = nbio.Send(fd, bellByte[:])
}

var bellByte = [1]byte{1}

// drain reads pending wakeup datagrams without waiting, at most max, and
// returns how many it read.
func drain(fd, max int) int {
	var b [8]byte
	n := 0
	for n < max {
		if _, err := nbio.Recv(fd, b[:]); err != nil {
			break
		}
		n++
	}
	return n
}
