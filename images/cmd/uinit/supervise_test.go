package main

import (
	"bytes"
	"context"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the supervisor's goroutine and the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var testBackoff = backoff{First: 10 * time.Millisecond, Max: 40 * time.Millisecond, Stable: time.Hour, Grace: 2 * time.Second}

func TestSuperviseRestartsWithBackoff(t *testing.T) {
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- superviseCommand(ctx, log.New(&logs, "", 0), []string{"/bin/sh", "-c", "exit 3"}, testBackoff)
	}()
	deadline := time.After(5 * time.Second)
	for !strings.Contains(logs.String(), "run 4") {
		select {
		case <-deadline:
			t.Fatalf("no fourth run:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"exit status 3", "restarting /bin/sh in 10ms", "restarting /bin/sh in 20ms", "restarting /bin/sh in 40ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "in 80ms") {
		t.Errorf("backoff passed its bound:\n%s", out)
	}
}

func TestSuperviseStopsCommand(t *testing.T) {
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := filepath.Join(t.TempDir(), "ready")
	go func() {
		done <- superviseCommand(ctx, log.New(&logs, "", 0), []string{"/bin/sh", "-c", "touch " + ready + "; exec sleep 30"}, testBackoff)
	}()
	waitFile(t, ready)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("supervisor did not stop the command")
	}
	if !strings.Contains(logs.String(), "stopped (signal: terminated)") {
		t.Errorf("logs:\n%s", logs.String())
	}
}

func TestSuperviseKillsStubbornCommand(t *testing.T) {
	var logs syncBuffer
	b := testBackoff
	b.Grace = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := filepath.Join(t.TempDir(), "ready")
	go func() {
		done <- superviseCommand(ctx, log.New(&logs, "", 0), []string{"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; sleep 30 & wait; wait"}, b)
	}()
	waitFile(t, ready) // the shell ignores SIGTERM from here on
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("supervisor did not kill the command")
	}
	if !strings.Contains(logs.String(), "killed after 100ms") {
		t.Errorf("logs:\n%s", logs.String())
	}
}

// waitFile waits (bounded) until the command under test has created path.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command did not create %s in 10 s", path)
		}
	}
}
