package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// userfaultfd, the kernel boundary of Area: the descriptor, its ioctls and
// its messages. Only this file speaks to the kernel's userfaultfd layouts
// (linux/userfaultfd.h).

const (
	uffdAPI          = 0xaa
	uffdioAPI        = 0xc018aa3f
	uffdioRegister   = 0xc020aa00
	uffdioUnregister = 0x8010aa01
	uffdioWake       = 0x8010aa02
	uffdioCopy       = 0xc028aa03
	uffdioWP         = 0xc018aa06

	uffdFeatureWP       = 1 << 0 // UFFD_FEATURE_PAGEFAULT_FLAG_WP
	uffdFeatureThreadID = 1 << 8
	uffdUserModeOnly    = 1

	uffdRegMissing   = 1
	uffdRegWP        = 2
	uffdCopyDontWake = 1
	uffdCopyWP       = 2
	uffdWPModeWP     = 1
	uffdWPDontWake   = 2

	uffdEventPagefault = 0x12
	uffdFlagWrite      = 1
	uffdFlagWP         = 2
	uffdMsgLen         = 32
)

// ErrNoUserfaultfd: the kernel or its settings refuse userfaultfd
// (vm.unprivileged_userfaultfd=0 leaves only user-mode faults, which Area
// takes too).
var ErrNoUserfaultfd = errors.New("hostif client: userfaultfd not available (sysctl vm.unprivileged_userfaultfd=1 or CAP_SYS_PTRACE)")

// openUffd opens a userfaultfd with write-protect faults: a full one, else
// one for user-mode faults only.
func openUffd() (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e == unix.EPERM {
		fd, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0)
	}
	if e != 0 {
		return -1, fmt.Errorf("%w: %w", ErrNoUserfaultfd, e)
	}
	api := [3]uint64{uffdAPI, uffdFeatureWP | uffdFeatureThreadID, 0}
	if err := ioctl(int(fd), uffdioAPI, unsafe.Pointer(&api)); err != nil {
		unix.Close(int(fd))
		return -1, fmt.Errorf("%w: API handshake: %w", ErrNoUserfaultfd, err)
	}
	return int(fd), nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

func uffdRegister(fd int, addr, n uintptr, mode uint64) error {
	reg := [4]uint64{uint64(addr), uint64(n), mode, 0}
	return ioctl(fd, uffdioRegister, unsafe.Pointer(&reg))
}

func uffdUnregister(fd int, addr, n uintptr) error {
	r := [2]uint64{uint64(addr), uint64(n)}
	return ioctl(fd, uffdioUnregister, unsafe.Pointer(&r))
}

func uffdWake(fd int, addr, n uintptr) error {
	r := [2]uint64{uint64(addr), uint64(n)}
	return ioctl(fd, uffdioWake, unsafe.Pointer(&r))
}

// uffdCopy installs src at the page dst (not yet present); EEXIST (present
// already) is not an error.
func uffdCopy(fd int, dst uintptr, src []byte, mode uint64) error {
	c := [5]uint64{uint64(dst), uint64(uintptr(unsafe.Pointer(&src[0]))), uint64(len(src)), mode, 0}
	err := ioctl(fd, uffdioCopy, unsafe.Pointer(&c))
	if err == unix.EEXIST {
		return nil
	}
	return err
}

func uffdWriteProtect(fd int, addr, n uintptr, on bool) error {
	mode := uint64(uffdWPDontWake)
	if on {
		mode = uffdWPModeWP
	}
	w := [3]uint64{uint64(addr), uint64(n), mode}
	return ioctl(fd, uffdioWP, unsafe.Pointer(&w))
}

// uffdFault is one page fault message.
type uffdFault struct {
	addr  uintptr
	write bool
	tid   int
}

// parseFaults decodes the page fault messages in b (other events are
// skipped).
func parseFaults(b []byte, out []uffdFault) []uffdFault {
	for ; len(b) >= uffdMsgLen; b = b[uffdMsgLen:] {
		if b[0] != uffdEventPagefault {
			continue
		}
		flags := binary.NativeEndian.Uint64(b[8:])
		out = append(out, uffdFault{
			addr:  uintptr(binary.NativeEndian.Uint64(b[16:])),
			write: flags&(uffdFlagWrite|uffdFlagWP) != 0,
			tid:   int(binary.NativeEndian.Uint32(b[24:])),
		})
	}
	return out
}
