package nbio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Read reads a non-blocking descriptor (an eventfd, a timerfd).
func Read(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(r), errnoErr(e)
}

// Write writes a non-blocking descriptor (an eventfd).
func Write(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(r), errnoErr(e)
}

// Send sends b on a connected socket with MSG_DONTWAIT|MSG_NOSIGNAL.
func Send(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
	return int(r), errnoErr(e)
}

// Recv receives into b with MSG_DONTWAIT.
func Recv(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		unix.MSG_DONTWAIT, 0, 0)
	return int(r), errnoErr(e)
}

// EpollPoll returns the ready events of an epoll set without waiting.
func EpollPoll(ep int, evs []unix.EpollEvent) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	return int(r), errnoErr(e)
}

// TimerfdSettime arms a timerfd (relative time).
func TimerfdSettime(fd int, spec *unix.ItimerSpec) error {
	_, _, e := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(fd), 0, uintptr(unsafe.Pointer(spec)), 0, 0, 0)
	return errnoErr(e)
}

// Yield gives the CPU to another runnable thread, if there is one
// (sched_yield(2)): a spinning loop calls it between looks so that the
// process it waits for gets the CPU on a machine with few cores.
func Yield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
