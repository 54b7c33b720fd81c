// Package procid names a process by more than its pid: its start time
// (field 22 of /proc/PID/stat, clock ticks since boot), which a process
// that later gets the same pid does not share. An account keyed by
// (pid, start) never passes to the next process with that pid.
//
// It reads /proc and the peer of a UNIX socket (SO_PEERPIDFD, Linux 6.5),
// nothing else, and keeps no state.
package procid
