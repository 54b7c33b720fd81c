package agent_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/metrics"
)

// TestOutOfDescriptorsDoesNotEndTheHostSocket (hole 3): an agent that runs
// out of descriptors fails its accepts, and the host socket serves on
// once descriptors are free again: the failure is logged and counted, the
// socket file stays, and a new client is answered.
//
// The test lowers this process's descriptor limit (the agent runs in it)
// and connects to dpu0.sock until its own dial fails: the agent's accept
// of the last queued connection has then failed too.
func TestOutOfDescriptorsDoesNotEndTheHostSocket(t *testing.T) {
	nodes := startLine(t, 1, nil)
	nd := nodes[0]
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(len(open) + 40)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Error(err)
			}
		}
	}
	defer restore()
	var held []*net.UnixConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(held) < 200 {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: nd.hostSocket(), Net: "unixpacket"})
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("dial %d: %v, want EMFILE", len(held), err)
			}
			break
		}
		held = append(held, c)
	}
	t.Logf("held %d connections at a limit of %d descriptors", len(held), low.Cur)
	// the agent's accept of the connection queued last fails (it has no
	// descriptor for it); wait until it has logged that, or ended
	waitFor(t, 30*time.Second, "a failed accept", func() bool {
		if strings.Contains(nd.log.String(), "host socket accept failed") {
			return true
		}
		_, err := os.Lstat(nd.hostSocket())
		return err != nil
	})
	for _, c := range held {
		c.Close()
	}
	held = nil
	restore()

	if _, err := os.Lstat(nd.hostSocket()); err != nil {
		t.Fatalf("the host socket is gone after the agent ran out of descriptors: %v", err)
	}
	c, err := client.Dial(ctxT(t, 10*time.Second), nd.hostSocket(), client.Options{Name: "after"})
	if err != nil {
		t.Fatalf("HELLO after the agent ran out of descriptors: %v", err)
	}
	c.Close()
	if n := counter(t, nd, "accept_errors_host"); n == 0 {
		t.Fatal("accept_errors_host is 0 after a failed accept")
	}
}

// TestMetricsEndpointHoldsFewConnections (hole 3): the metrics endpoint
// holds at most metrics.MaxConns connections at once (the others wait in
// the kernel's queue and cost the agent no descriptor), and closes idle
// keep-alive ones after metrics.IdleTimeout, so that a local user who
// holds connections open can neither run the agent out of descriptors nor
// keep the endpoint from others for good.
func TestMetricsEndpointHoldsFewConnections(t *testing.T) {
	nodes := startLine(t, 1, func(c *agent.Config) { c.MetricsListen = "127.0.0.1:0" })
	addr := nodes[0].a.MetricsAddr().String()
	const conns = 3 * metrics.MaxConns
	start := time.Now()
	var mu sync.Mutex
	var answered []int
	var wg sync.WaitGroup
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
		wg.Go(func() {
			// a keep-alive request, answered only once the server took
			// the connection
			if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return
			}
			_ = c.SetReadDeadline(start.Add(metrics.IdleTimeout / 2))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			resp.Body.Close()
			mu.Lock()
			answered = append(answered, i)
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d of %d connections answered within %v", len(answered), conns, metrics.IdleTimeout/2)
	if len(answered) > metrics.MaxConns {
		t.Fatalf("the metrics endpoint took %d connections at once, at most %d", len(answered), metrics.MaxConns)
	}
	if len(answered) == 0 {
		t.Fatal("no connection answered")
	}
	// the idle ones are closed after the idle timeout, and the waiting
	// ones are served then
	idle := cs[answered[0]]
	_ = idle.SetReadDeadline(time.Now().Add(3 * metrics.IdleTimeout))
	if _, err := idle.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an idle keep-alive connection was not closed: %v", err)
	}
	for _, c := range cs {
		c.Close()
	}
	resp, err := (&http.Client{Timeout: 3 * metrics.IdleTimeout}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("a scrape after the idle connections closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
}
