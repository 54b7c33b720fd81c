package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/hostif/client"
)

// Errors that say what was expected: a socket of the other kind, or a
// request the agent refused, told in the words of the command that failed.

// wrongSocket turns a protocol error on a socket into what the socket is
// when dpuctl can tell (it asks it the other protocol's hello), and which
// option wants which socket.
func wrongSocket(ctx context.Context, e *env, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	switch {
	case errors.Is(err, ctl.ErrProtocol):
		if isHostSocket(ctx, e.socket) {
			return fmt.Errorf("%s is a dpu0 host interface socket; dpuctl -s wants the control socket ctl.sock (dpu0.sock goes with -d, for mem): %w", e.socket, ctl.ErrProtocol)
		}
		return fmt.Errorf("%s does not speak the control protocol (dpuctl -s wants a dpu-agent's ctl.sock): %w", e.socket, err)
	case errors.Is(err, client.ErrProtocol):
		path := memSocket(e)
		if isCtlSocket(ctx, path) {
			return fmt.Errorf("%s is a control socket; dpuctl -d wants the host interface socket dpu0.sock (ctl.sock goes with -s): %w", path, client.ErrProtocol)
		}
		return fmt.Errorf("%s does not speak the host interface protocol (dpuctl -d wants a dpu-agent's dpu0.sock): %w", path, client.ErrProtocol)
	}
	return err
}

func isHostSocket(ctx context.Context, path string) bool {
	c, err := client.Dial(ctx, path, client.Options{Name: "dpuctl-probe"})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func isCtlSocket(ctx context.Context, path string) bool {
	c, err := ctl.Dial(path)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Stats(ctx)
	var refused *ctl.Error
	return err == nil || errors.As(err, &refused)
}

// memSocket is the host socket mem commands use.
func memSocket(e *env) string {
	if e.device != "" {
		return e.device
	}
	return client.DefaultSocket()
}

// memError is a mem request the agent refused, said for a person: the
// command, its address, what the errno means there, and the agent's own
// words without the prefixes and errno they repeat.
type memError struct {
	cmd    string // "mem read gva:…"
	what   string // what the errno means for this command
	detail string // the agent's text, trimmed
	err    *client.Error
}

func (m *memError) Error() string {
	s := m.cmd + ": " + m.what
	if m.detail != "" {
		return s + " (" + m.err.Errno.Error() + ": " + m.detail + ")"
	}
	return s + " (" + m.err.Errno.Error() + ")"
}

func (m *memError) Unwrap() error { return m.err }

// explainMem rewrites a refused request of mem command a.
func explainMem(a memArgs, err error) error {
	ce, ok := err.(*client.Error) // only as the agent said it: a message of ours stays
	if !ok {
		return err
	}
	cmd := "mem " + a.verb
	if len(a.pos) > 0 {
		cmd += " " + a.pos[0]
	}
	return &memError{cmd: cmd, what: errnoMeaning(a.verb, ce.Errno), detail: trimAgentText(ce), err: ce}
}

func errnoMeaning(verb string, errno syscall.Errno) string {
	switch errno {
	case syscall.ENOENT:
		if verb == "free" {
			return "no allocation starts at this address (free takes the GVA alloc printed)"
		}
		return "no such page"
	case syscall.EHOSTDOWN, syscall.EHOSTUNREACH:
		return "no node answered for this page: it is not allocated, or the node that holds it is unreachable"
	case syscall.EFAULT:
		return "a bad address (outside its page or its allocation)"
	case syscall.EACCES:
		return "refused by the page's owner and mode (pages are checked against the user running dpuctl)"
	case syscall.EPERM:
		return "not permitted to this connection"
	case syscall.ETIMEDOUT:
		return "no answer within the agent's request timeout"
	case syscall.ENOMEM, syscall.ENOSPC:
		return "the node has no free pages (its pages setting bounds how many it may index)"
	case syscall.EBUSY, syscall.EAGAIN:
		return "the page is locked or changing owner; try again"
	case syscall.EINVAL:
		return "the agent refused the request as invalid"
	}
	return "refused by the agent"
}

// opPrefix matches a step of the agent's text that names an operation and
// its address ("load gva:…"), which the command line already says.
var opPrefix = regexp.MustCompile(`^([a-z-]+ )?gva:[0-9a-f]+(\+\S+)?$`)

func trimAgentText(ce *client.Error) string {
	var keep []string
	for _, part := range strings.Split(ce.Text, ": ") {
		part = strings.TrimSpace(part)
		if part == "" || part == ce.Errno.Error() || opPrefix.MatchString(part) {
			continue
		}
		keep = append(keep, part)
	}
	return strings.Join(keep, ": ")
}
