package numa

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PinProcess sets the CPU affinity of every thread of this process to
// cpus. Threads are listed from /proc/self/task until a pass finds none it
// has not pinned: a thread started meanwhile by a thread not yet pinned is
// caught by the next pass, and every thread started from a pinned one
// inherits the affinity. A thread that exits on the way is skipped.
func PinProcess(cpus CPUSet) error {
	set, err := affinitySet(cpus)
	if err != nil {
		return err
	}
	done := map[int]bool{}
	for pass := 0; pass < 16; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("numa: pin: %w", err)
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh++
			if err := unix.SchedSetaffinityDynamic(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("numa: pin thread %d to CPUs %s: %w", tid, cpus, err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return nil
		}
	}
	return fmt.Errorf("numa: pin: threads kept starting through 16 passes")
}

// Affinity is the calling thread's CPU affinity.
func Affinity() (CPUSet, error) {
	set := unix.NewCPUSet(MaxCPU)
	if err := unix.SchedGetaffinityDynamic(0, set); err != nil {
		return nil, fmt.Errorf("numa: affinity: %w", err)
	}
	var cpus CPUSet
	for c := range MaxCPU {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func affinitySet(cpus CPUSet) (unix.CPUSetDynamic, error) {
	if len(cpus) == 0 {
		return nil, errors.New("numa: pin: no CPU")
	}
	set := unix.NewCPUSet(cpus[len(cpus)-1] + 1)
	for _, c := range cpus {
		set.Set(c)
	}
	return set, nil
}

// Memory policies and get_mempolicy flags (linux/mempolicy.h).
const (
	mpolPreferred = 1
	mpolFNode     = 1 << 0
	mpolFAddr     = 1 << 1
)

// Arena is anonymous memory whose pages the kernel places on one node:
// mapped, bound with mbind (MPOL_PREFERRED) before any page is touched, so
// each page lands on the node at its first touch. It is not Go heap: it
// holds no Go pointer, and Close unmaps it.
type Arena struct {
	mem  []byte
	node int
}

// NewArena maps size bytes (rounded up to the page size) bound to node.
// The mapping reserves no swap (MAP_NORESERVE): memory is taken as pages
// are touched.
func NewArena(size, node int) (*Arena, error) {
	if size <= 0 || node < 0 {
		return nil, fmt.Errorf("numa: arena of %d bytes on node %d", size, node)
	}
	pg := os.Getpagesize()
	size = (size + pg - 1) / pg * pg
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("numa: map %d bytes: %w", size, err)
	}
	mask := make([]uint64, node/64+1)
	mask[node/64] |= 1 << (node % 64)
	// maxnode counts bits and the kernel reads one fewer than it is told
	maxnode := uintptr(len(mask)*64 + 1)
	_, _, errno := unix.Syscall6(unix.SYS_MBIND, uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(size),
		mpolPreferred, uintptr(unsafe.Pointer(unsafe.SliceData(mask))), maxnode, 0)
	if errno != 0 {
		unix.Munmap(mem)
		return nil, fmt.Errorf("numa: mbind %d bytes to node %d: %w", size, node, errno)
	}
	return &Arena{mem: mem, node: node}, nil
}

// Bytes is the arena's memory (valid until Close).
func (a *Arena) Bytes() []byte { return a.mem }

// Node is the node the arena is bound to.
func (a *Arena) Node() int { return a.node }

// Close unmaps the arena; nothing may use its bytes after.
func (a *Arena) Close() error {
	if a.mem == nil {
		return nil
	}
	err := unix.Munmap(a.mem)
	a.mem = nil
	if err != nil {
		return fmt.Errorf("numa: unmap arena: %w", err)
	}
	return nil
}

// NodeOf is the node the page holding b[0] lies on (the page is faulted
// in if it was never touched).
func NodeOf(b []byte) (int, error) {
	if len(b) == 0 {
		return NoNode, errors.New("numa: node of no memory")
	}
	var node int32
	_, _, errno := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&node)), 0, 0,
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), mpolFNode|mpolFAddr, 0)
	if errno != 0 {
		return NoNode, fmt.Errorf("numa: get_mempolicy: %w", errno)
	}
	return int(node), nil
}
