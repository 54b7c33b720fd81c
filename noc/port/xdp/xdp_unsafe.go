package xdp

// Every use of package unsafe in package xdp lives in this file: the
// setsockopt/getsockopt calls whose arguments are kernel structs, and the
// views of the mmapped rings as Go values.

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// registerUMEM registers mem as the socket's UMEM (XDP_UMEM_REG).
func registerUMEM(fd int, mem []byte, frameSize uint32) error {
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))),
		Len:  uint64(len(mem)),
		Size: frameSize,
	}
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0)
	if errno != 0 {
		return fmt.Errorf("setsockopt XDP_UMEM_REG: %w", errno)
	}
	return nil
}

// mmapOffsets returns where the rings' words and entries lie in their mmaps.
func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return off, fmt.Errorf("getsockopt XDP_MMAP_OFFSETS: %w", errno)
	}
	if size != uint32(unsafe.Sizeof(off)) {
		return off, fmt.Errorf("getsockopt XDP_MMAP_OFFSETS: %d bytes, want %d", size, unsafe.Sizeof(off))
	}
	return off, nil
}

// socketStatistics reads XDP_STATISTICS.
func socketStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	size := uint32(unsafe.Sizeof(st))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return st, fmt.Errorf("getsockopt XDP_STATISTICS: %w", errno)
	}
	return st, nil
}

// mappedWords views a ring's shared words inside its mmap.
func mappedWords(mem []byte, off unix.XDPRingOffset) (ringWords, error) {
	for _, o := range []uint64{off.Producer, off.Consumer, off.Flags} {
		if o%4 != 0 || o+4 > uint64(len(mem)) {
			return ringWords{}, fmt.Errorf("xdp: ring word offset %d outside a %d-byte map", o, len(mem))
		}
	}
	return ringWords{
		producer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags])),
	}, nil
}

// mappedEntries views n ring entries of type T starting at off.Desc.
func mappedEntries[T any](mem []byte, off unix.XDPRingOffset, n uint32) ([]T, error) {
	var zero T
	size := uint64(unsafe.Sizeof(zero))
	if off.Desc%uint64(unsafe.Alignof(zero)) != 0 || off.Desc+uint64(n)*size > uint64(len(mem)) {
		return nil, fmt.Errorf("xdp: %d ring entries at %d outside a %d-byte map", n, off.Desc, len(mem))
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&mem[off.Desc])), n), nil
}

// ringMapSize is the length of a ring's mmap holding n entries of type T.
func ringMapSize[T any](off unix.XDPRingOffset, n uint32) int {
	var zero T
	return int(off.Desc + uint64(n)*uint64(unsafe.Sizeof(zero)))
}
