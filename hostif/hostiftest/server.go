package hostiftest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif"
)

// StartServer serves be at a new socket in a fresh directory and returns
// the socket path. The server stops (and the test fails if it returned an
// error) when the test ends.
func StartServer(tb testing.TB, be hostif.Backend, opts hostif.Options) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "hostif")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, hostif.SocketName)
	srv, err := hostif.NewServer(be, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("server: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("server did not stop within 30s")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return path
		}
		select {
		case err := <-done:
			tb.Fatalf("server ended before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("socket %s did not appear", path)
		}
		time.Sleep(time.Millisecond)
	}
}

// StartEcho serves a bare SOCK_SEQPACKET echo at a new socket: every
// message is sent back as it came, by one goroutine per connection. It is
// the baseline the host interface's round trips are measured against.
func StartEcho(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "echo")
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "echo.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []*net.UnixConn
	wg.Go(func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 1<<16)
				for {
					n, err := c.Read(buf)
					if err != nil || n == 0 {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			})
		}
	})
	tb.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return path
}
