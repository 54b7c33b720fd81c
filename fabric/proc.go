package fabric

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotOurs is returned when a pid recorded in the state file no longer
// names the agent this fabric started (it exited and the pid was reused,
// or the state file was changed): nothing is signalled.
var ErrNotOurs = errors.New("fabric: process is not the agent this fabric started")

// procIdentity is what tells the agent dpu-fabric started from any other
// process that later holds the same pid: its start time (clock ticks since
// boot, /proc/PID/stat field 22) and its executable.
type procIdentity struct {
	Start uint64 `json:"start"`
	Exe   string `json:"exe"`
}

// identify reads pid's identity from /proc.
func identify(pid int) (procIdentity, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procIdentity{}, err
	}
	// fields after the parenthesised command name; start time is field 22,
	// the 20th after ')'
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procIdentity{}, fmt.Errorf("fabric: /proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procIdentity{}, fmt.Errorf("fabric: /proc/%d/stat: malformed", pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procIdentity{}, fmt.Errorf("fabric: /proc/%d/stat: %w", pid, err)
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return procIdentity{}, err
	}
	return procIdentity{Start: start, Exe: exe}, nil
}

// signalOurs sends sig to pid only when it is still the process with
// identity want. It holds a pidfd while it checks, so the pid cannot be
// reused between the check and the signal.
func signalOurs(pid int, want procIdentity, sig syscall.Signal) error {
	if pid <= 0 || want.Start == 0 {
		return fmt.Errorf("%w: pid %d has no recorded start time", ErrNotOurs, pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // gone already
		}
		return fmt.Errorf("fabric: pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	got, err := identify(pid)
	if err != nil {
		return nil // exited meanwhile
	}
	if got.Start != want.Start {
		return fmt.Errorf("%w: pid %d is %s (started at tick %d), recorded %s (tick %d)", ErrNotOurs, pid, got.Exe, got.Start, want.Exe, want.Start)
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("fabric: signal %d: %w", pid, err)
	}
	return nil
}

// ours reports whether pid is alive and still the process with identity
// want.
func ours(pid int, want procIdentity) bool {
	if !alive(pid) {
		return false
	}
	got, err := identify(pid)
	return err == nil && got == want
}

// checkExecutable refuses to run a program that someone other than the
// caller or root owns or may write: the state file names it, and running
// it is running whatever that someone put there.
func checkExecutable(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("fabric: agent %s: %w", path, err)
	}
	uid := uint32(os.Geteuid())
	if st.Uid != uid && st.Uid != 0 {
		return fmt.Errorf("fabric: agent %s is owned by uid %d: refusing to run it as uid %d", path, st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("fabric: agent %s has mode %#o: others can write it, refusing to run it", path, st.Mode&0o7777)
	}
	return nil
}
