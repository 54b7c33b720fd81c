package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/internal/backoff/backofftest"
)

// TestAcceptErrorsBackOffAndServeOn (hole 3, the metrics endpoint): failed
// accepts (out of descriptors, EMFILE and ENFILE, or out of kernel memory,
// ENOBUFS and ENOMEM, which net/http would end its server on) are logged
// with the agent's logger, counted, and backed off (5 ms, doubling), and
// the endpoint serves on: a scrape after them is answered.
func TestAcceptErrorsBackOffAndServeOn(t *testing.T) {
	var logs backofftest.Log
	srv, err := Listen("127.0.0.1:0", New(sample(), 0), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	accErr := func(errno syscall.Errno) error { return backofftest.AcceptError("tcp", errno) }
	fl := &backofftest.FailingListener{Listener: srv.ln.Listener,
		Errs: []error{accErr(syscall.EMFILE), accErr(syscall.ENOBUFS), accErr(syscall.ENFILE), accErr(syscall.ENOMEM), accErr(syscall.EMFILE)}}
	failures := len(fl.Errs)
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
	backofftest.CheckWaits(t, logs.String(), "metrics accept failed", failures, fl)
}
