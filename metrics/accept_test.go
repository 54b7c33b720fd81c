package metrics

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/internal/backoff"
)

// failingListener fails its first accepts with errs, in order, then
// accepts from the listener it wraps; it records when each accept was
// asked for.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	errs  []error
	calls []time.Time
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// acceptErr is what a failed accept(2) looks like from net.
func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// syncBuf is a bytes.Buffer for a logger used from several goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAcceptErrorsBackOffAndServeOn (hole 3, the metrics endpoint): failed
// accepts (out of descriptors, EMFILE and ENFILE, or out of kernel memory,
// ENOBUFS and ENOMEM, which net/http would end its server on) are logged
// with the agent's logger, counted, and backed off (5 ms, doubling), and
// the endpoint serves on: a scrape after them is answered.
func TestAcceptErrorsBackOffAndServeOn(t *testing.T) {
	var logs syncBuf
	srv, err := Listen("127.0.0.1:0", New(sample(), 0), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: srv.ln.Listener,
		errs: []error{acceptErr(syscall.EMFILE), acceptErr(syscall.ENOBUFS), acceptErr(syscall.ENFILE), acceptErr(syscall.ENOMEM), acceptErr(syscall.EMFILE)}}
	failures := len(fl.errs)
	srv.ln.Listener = fl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the metrics server did not stop")
		}
	}()

	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + srv.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("a scrape after %d failed accepts: %v (log:\n%s)", failures, err, logs.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	if n := srv.AcceptErrors(); n != uint64(failures) {
		t.Errorf("AcceptErrors %d, want %d", n, failures)
	}
	// each failure logged with the delay before the next try: 5 ms,
	// doubling; and the next try came no sooner
	re := regexp.MustCompile(`msg="metrics accept failed".*retry_in=(\S+)`)
	var delays []time.Duration
	for _, l := range strings.Split(logs.String(), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			d, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			delays = append(delays, d)
		}
	}
	if len(delays) != failures {
		t.Fatalf("%d failed accepts logged, want %d:\n%s", len(delays), failures, logs.String())
	}
	fl.mu.Lock()
	calls := append([]time.Time(nil), fl.calls...)
	fl.mu.Unlock()
	for i, d := range delays {
		if want := backoff.Min << i; d != want {
			t.Errorf("failure %d: retry in %v, want %v", i+1, d, want)
		}
		if gap := calls[i+1].Sub(calls[i]); gap < d {
			t.Errorf("failure %d: tried again after %v, before its back-off of %v", i+1, gap, d)
		}
	}
}
