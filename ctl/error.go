package ctl

import (
	"errors"
	"syscall"
)

// Error is a request refused by the server: the errno of its NLMSG_ERROR
// and the reason from the extended acknowledgement. errors.Is matches it
// against its syscall.Errno (syscall.EOPNOTSUPP: the agent does not serve
// that object; syscall.ENOBUFS: a monitor was dropped for falling behind).
type Error struct {
	Op     string // what was asked: "route dump", "monitor", ...
	Errno  syscall.Errno
	Reason string

	conn bool // about the connection, not the request: it is closed
}

func (e *Error) Error() string {
	s := "ctl: " + e.Op + ": " + e.Errno.Error()
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// ErrProtocol is returned when the server's answer breaks the protocol.
var ErrProtocol = errors.New("ctl: protocol error")

// ErrClosed is returned by a closed Client.
var ErrClosed = errors.New("ctl: client closed")
