package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/noc"
)

// liveNode is one in-process agent serving its sockets.
type liveNode struct {
	a      *agent.Agent
	runDir string
	log    *syncBuffer
}

func (n *liveNode) hostSocket() string { return hostif.SocketPath(n.runDir) }

// syncBuffer collects an agent's log.
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

// startLine starts n agents in this process, wired in a line (0-1-…-n-1)
// over UDP loopback, each with its run directory (mode 0755, so that other
// users reach the sockets) under one fresh directory, and waits until every
// agent routes to every other. configure may adjust each configuration.
// Everything stops when the test ends.
func startLine(tb testing.TB, n int, configure func(*agent.Config)) []*liveNode {
	tb.Helper()
	// one loopback address per port end: link i joins node i (its port
	// "right") and node i+1 (its port "left")
	addrs := make([][2]string, n-1)
	for i := range addrs {
		addrs[i] = [2]string(agent.HoldUDP(tb, 2))
	}
	return startNodes(tb, n, func(i int, cfg *agent.Config) {
		if i > 0 {
			cfg.Ports = append(cfg.Ports, agent.PortSpec{Name: "left", Kind: agent.PortUDPHeld, Args: []string{addrs[i-1][1], addrs[i-1][0]}})
		}
		if i < n-1 {
			cfg.Ports = append(cfg.Ports, agent.PortSpec{Name: "right", Kind: agent.PortUDPHeld, Args: []string{addrs[i][0], addrs[i][1]}})
		}
		if configure != nil {
			configure(cfg)
		}
	})
}

// startNodes starts n agents in this process, each with its run directory
// (mode 0755, so that other users reach the sockets) under one fresh
// directory; setup gives node i its ports and anything else. It waits
// until every agent routes to every other. Everything stops when the test
// ends.
func startNodes(tb testing.TB, n int, setup func(i int, cfg *agent.Config)) []*liveNode {
	tb.Helper()
	dir, err := os.MkdirTemp("", "agent-live")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	nodes := make([]*liveNode, n)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
		if tb.Failed() {
			for i, nd := range nodes {
				if nd != nil {
					tb.Logf("node %d log:\n%s", i, nd.log.String())
				}
			}
		}
		os.RemoveAll(dir)
	})
	for i := range n {
		cfg := agent.DefaultConfig()
		cfg.Node = noc.NodeID(i)
		cfg.RunDir = filepath.Join(dir, fmt.Sprintf("node%d", i))
		cfg.Heartbeat, cfg.DeadInterval = 50*time.Millisecond, 600*time.Millisecond
		cfg.Seed = uint64(i) + 1
		setup(i, &cfg)
		logBuf := &syncBuffer{}
		a, err := agent.New(cfg, slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelInfo})))
		if err != nil {
			tb.Fatal(err)
		}
		nodes[i] = &liveNode{a: a, runDir: cfg.RunDir, log: logBuf}
		wg.Go(func() {
			if err := a.Run(ctx); err != nil {
				tb.Errorf("agent %d: %v", i, err)
			}
		})
		select {
		case <-a.Ready():
		case <-time.After(10 * time.Second):
			tb.Fatalf("agent %d not ready", i)
		}
	}
	waitRoutes(tb, nodes)
	return nodes
}

// waitRoutes waits (bounded) until every agent routes to all the others.
func waitRoutes(tb testing.TB, nodes []*liveNode) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, nd := range nodes {
		c, err := ctl.Dial(filepath.Join(nd.runDir, "ctl.sock"))
		if err != nil {
			tb.Fatal(err)
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			rs, err := c.Routes(ctx)
			cancel()
			if err == nil && len(rs) == len(nodes)-1 {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				tb.Fatalf("routes of %s did not converge: %v %v", nd.runDir, rs, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
}

// dialHost connects a client to a node's dpu0.sock, closed at the end.
func dialHost(tb testing.TB, nd *liveNode) *client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, nd.hostSocket(), client.Options{Name: tb.Name()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func ctxT(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// counter reads one counter of dpuctl stats from a node.
func counter(t *testing.T, nd *liveNode, name string) uint64 {
	t.Helper()
	n, ok := statCounter(t, nd.runDir, name)
	if !ok {
		t.Fatalf("no counter %s in node %s's stats", name, nd.runDir)
	}
	return n
}

// dialCtl connects to the control socket of the agent whose run directory
// is runDir; the connection and the context (a 5 s bound for its calls)
// end at cleanup.
func dialCtl(tb testing.TB, runDir string) (*ctl.Client, context.Context) {
	tb.Helper()
	c, err := ctl.Dial(filepath.Join(runDir, "ctl.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	tb.Cleanup(func() {
		cancel()
		c.Close()
	})
	return c, ctx
}

// withCtl runs f on a control connection to the agent whose run
// directory is runDir, bounded by d, and closes the connection: the form
// for polls (a connection each poll left open until cleanup would count
// against the server's MaxConns, and past it every poll is refused).
func withCtl(runDir string, d time.Duration, f func(*ctl.Client, context.Context) error) error {
	c, err := ctl.Dial(filepath.Join(runDir, "ctl.sock"))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return f(c, ctx)
}

// statCounter reads one counter of dpuctl stats from the agent whose run
// directory is runDir; false when the agent has no such counter (an agent
// built from an older revision, DPU_AGENT_BIN).
func statCounter(tb testing.TB, runDir, name string) (uint64, bool) {
	tb.Helper()
	var st ctl.Stats
	err := withCtl(runDir, 5*time.Second, func(c *ctl.Client, ctx context.Context) (err error) {
		st, err = c.Stats(ctx)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, k := range st.Counters {
		if k.Name == name {
			return k.Value, true
		}
	}
	return 0, false
}

// testBinaryIn copies this test binary into dir (one other users may
// reach: t.TempDir's parents are 0700) as agent.test and returns its path,
// for the tests that run their helpers as other users.
func testBinaryIn(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "agent.test")
	self, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, self, 0o755)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// rawCall sends r on a raw host connection and reads its reply into in,
// with the descriptors the reply carries, within the bound.
func rawCall(tb testing.TB, uc *net.UnixConn, in []byte, r *wire.Request, within time.Duration) (n int, fds []int) {
	tb.Helper()
	if _, err := uc.Write(wire.AppendRequest(nil, r)); err != nil {
		tb.Fatal(err)
	}
	_ = uc.SetReadDeadline(time.Now().Add(within))
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(in, oob)
	if err != nil {
		tb.Fatal(err)
	}
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			f, _ := unix.ParseUnixRights(&m)
			fds = append(fds, f...)
		}
	}
	return n, fds
}

// rawStatus is rawCall for a reply without descriptors: its length, and
// its status as an error (nil: success).
func rawStatus(tb testing.TB, uc *net.UnixConn, in []byte, r *wire.Request, within time.Duration) (int, error) {
	tb.Helper()
	n, _ := rawCall(tb, uc, in, r, within)
	var h wire.Header
	if err := h.Decode(in[:n]); err != nil {
		tb.Fatal(err)
	}
	if h.Status != 0 {
		return n, syscall.Errno(h.Status)
	}
	return n, nil
}
