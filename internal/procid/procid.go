package procid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ID is a process's identity: its pid and its start time.
type ID struct {
	PID   int32
	Start uint64 // clock ticks since boot (/proc/PID/stat field 22)
}

// ErrGone is wrapped when the process is no longer there.
var ErrGone = errors.New("procid: process gone")

// Of returns the identity of the process that now has pid.
func Of(pid int32) (ID, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ID{}, fmt.Errorf("%w: pid %d", ErrGone, pid)
		}
		return ID{}, fmt.Errorf("procid: %w", err)
	}
	start, err := ParseStart(b)
	if err != nil {
		return ID{}, fmt.Errorf("procid: /proc/%d/stat: %w", pid, err)
	}
	return ID{PID: pid, Start: start}, nil
}

// ParseStart reads the start time from the contents of /proc/PID/stat.
// The command (field 2) is in parentheses and may hold anything a process
// names itself, spaces and parentheses included: the fields are counted
// from the last ')'.
func ParseStart(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command field")
	}
	f := bytes.Fields(stat[i+1:])
	const startField = 22 - 3 // fields after the command start with field 3 (state)
	if len(f) <= startField {
		return 0, fmt.Errorf("%d fields after the command, want more than %d", len(f), startField)
	}
	start, err := strconv.ParseUint(string(f[startField]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("start time: %w", err)
	}
	return start, nil
}

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5, the same number on every
// architecture): a pidfd of the process that connected.
const soPeerPidfd = 77

// OfPeer returns the identity of the process at the other end of the UNIX
// socket fd, whose pid (SO_PEERCRED) is pid. With SO_PEERPIDFD it is
// exact: the start time read from /proc counts only while the pidfd (the
// process that connected, whatever pid it had) is still alive after the
// read, so a pid taken over by another process in between is never
// mistaken for the peer (ErrGone). Without it (older kernels) the start
// time is that of the process with pid now, which is the peer unless it
// exited and its pid was reused since it connected.
func OfPeer(fd int, pid int32) (ID, error) {
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, soPeerPidfd)
	if err != nil {
		return Of(pid)
	}
	defer unix.Close(pidfd)
	id, err := Of(pid)
	if err != nil {
		return ID{}, err
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return ID{}, fmt.Errorf("%w: pid %d exited after it connected (%w)", ErrGone, pid, err)
	}
	return id, nil
}
