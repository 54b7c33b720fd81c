package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// notifier tells the service manager about the agent's state with the
// sd_notify protocol: one datagram of newline-separated VAR=value
// assignments to the unix socket named by $NOTIFY_SOCKET (a path, or an
// abstract name when it starts with '@'). Without NOTIFY_SOCKET it does
// nothing. See sd_notify(3).
type notifier struct{ addr *net.UnixAddr }

// newNotifier reads $NOTIFY_SOCKET, and unsets it so that no child
// process inherits it.
func newNotifier() notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	if path == "" {
		return notifier{}
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:]
	}
	return notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// notify sends the assignments; a missing service manager is no error.
func (n notifier) notify(assignments ...string) error {
	if n.addr == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(strings.Join(assignments, "\n") + "\n")); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, which RELOADING=1
// carries (MONOTONIC_USEC) so the manager can tell reloads apart.
func monotonicUsec() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("MONOTONIC_USEC=%d", ts.Nano()/1000)
}
