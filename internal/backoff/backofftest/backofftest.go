package backofftest

import (
	"bytes"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/internal/backoff"
)

// FailingListener fails its first accepts with Errs, in order, then
// accepts from the listener it wraps; it records when each accept was
// asked for.
type FailingListener struct {
	net.Listener
	mu    sync.Mutex
	Errs  []error
	calls []time.Time
}

// Accept implements net.Listener.
func (l *FailingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	if len(l.Errs) > 0 {
		err := l.Errs[0]
		l.Errs = l.Errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// Calls returns when each accept was asked for.
func (l *FailingListener) Calls() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.calls...)
}

// AcceptError is what a failed accept(2) of a listener of network netw
// looks like from package net.
func AcceptError(netw string, errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: netw, Err: os.NewSyscallError("accept4", errno)}
}

// Log is a buffer for a logger used from several goroutines.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Log) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Log) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CheckWaits checks that log (slog's text) has failures lines with
// message msg, each with the wait the back-off gives (retry_in: Min,
// doubling), and that l's next accept after each came no sooner.
func CheckWaits(t testing.TB, log, msg string, failures int, l *FailingListener) {
	t.Helper()
	re := regexp.MustCompile(`msg="` + regexp.QuoteMeta(msg) + `".*retry_in=(\S+)`)
	var delays []time.Duration
	for _, line := range strings.Split(log, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			d, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			delays = append(delays, d)
		}
	}
	if len(delays) != failures {
		t.Fatalf("%d failed accepts logged, want %d:\n%s", len(delays), failures, log)
	}
	calls := l.Calls()
	for i, d := range delays {
		if want := backoff.Min << i; d != want {
			t.Errorf("failure %d: retry in %v, want %v", i+1, d, want)
		}
		if gap := calls[i+1].Sub(calls[i]); gap < d {
			t.Errorf("failure %d: tried again after %v, before its back-off of %v", i+1, gap, d)
		}
	}
}
