package reallink_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/bench/reallink"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/noc"
)

// One fabric carries every kind of traffic the benchmarks measure, counts
// it exactly, and leaves nothing behind: no namespace, no agent process.
func TestLineCarriesAndCleansUp(t *testing.T) {
	dir := fabricDir(t)
	f, err := reallink.Line(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			veth.Down(dir)
		}
	})
	if got := namespacesOf(t, f); len(got) != 3 {
		t.Fatalf("namespaces %v, want 3", got)
	}

	a, err := reallink.StartAgent(reallink.AgentConfig{
		Binary: agentBinary(t), Namespace: f.Namespace(1), Node: 1,
		RunDir: filepath.Join(dir, "node1"), Ports: []string{"p0 xdp p0", "p1 xdp p1"}, Seed: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			a.Stop()
		}
	})
	n0 := xdpNode(t, f, 0, reallink.Device(reallink.East))
	n2 := xdpNode(t, f, 2, reallink.Device(reallink.West))
	converge(t, []noc.NodeID{0, 2}, n0, n2)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := a.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const frames = 500
	fl, err := reallink.NoCForward(ctx, n0, n2, make([]byte, 64), frames)
	if err != nil {
		t.Fatal(err)
	}
	after, err := a.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fl.Delivered != frames {
		t.Fatalf("NoC flow through the agent: %v", fl)
	}
	if fwd := after["frames_forwarded"] - before["frames_forwarded"]; fwd != frames {
		t.Fatalf("agent forwarded %d frames, want %d", fwd, frames)
	}
	if rtts, err := reallink.NoCEcho(ctx, n0, 1, make([]byte, 64), 20, 0); err != nil || len(rtts) != 20 {
		t.Fatalf("echo to the agent: %d round trips, %v", len(rtts), err)
	}

	// The kernel's side on the same namespaces (the XDP programs pass IPv4).
	if err := reallink.RouteIPv4(f); err != nil {
		t.Fatal(err)
	}
	kf, err := reallink.KernelForward(ctx, f, 0, 2, 64, frames)
	if err != nil {
		t.Fatal(err)
	}
	if kf.Delivered != frames || kf.Forwarded < frames {
		t.Fatalf("kernel flow: %v", kf)
	}
	if rtts, err := reallink.KernelPingPong(ctx, f, 0, 1, 64, 20); err != nil || len(rtts) != 20 {
		t.Fatalf("UDP ping-pong: %d round trips, %v", len(rtts), err)
	}

	// Teardown: the agent exits, Down removes every namespace.
	pid := a.Pid()
	stopped = true
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("agent pid %d still exists after Stop: %v", pid, err)
	}
	n0.Close()
	n2.Close()
	downed = true
	if err := veth.Down(dir); err != nil {
		t.Fatal(err)
	}
	if left := namespacesOf(t, f); len(left) != 0 {
		t.Fatalf("namespaces left: %v", left)
	}
	if _, err := os.Stat(f.PinRoot()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory left: %v", err)
	}
}
