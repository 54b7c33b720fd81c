package hostif_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// gpuRecorder is a hookwire.Handler that echoes bodies and records peers.
type gpuRecorder struct {
	mu     sync.Mutex
	served []hookwire.Peer
	closed []hookwire.Peer
}

func (g *gpuRecorder) ServeGPU(ctx context.Context, p hookwire.Peer, op hookwire.Op, body, reply []byte) ([]byte, error) {
	g.mu.Lock()
	g.served = append(g.served, p)
	g.mu.Unlock()
	if op == hookwire.OpKernelQuota {
		return nil, fmt.Errorf("no quota here: %w", syscall.EAGAIN)
	}
	reply = append(reply, byte(op))
	return append(reply, body...), nil
}

func (g *gpuRecorder) GPUClosed(p hookwire.Peer) {
	g.mu.Lock()
	g.closed = append(g.closed, p)
	g.mu.Unlock()
}

func (g *gpuRecorder) snapshot() (served, closed []hookwire.Peer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]hookwire.Peer(nil), g.served...), append([]hookwire.Peer(nil), g.closed...)
}

func TestGPUHandler(t *testing.T) {
	rec := &gpuRecorder{}
	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	t.Cleanup(be.Close)
	path := hostiftest.StartServer(t, be, hostif.Options{GPU: rec})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("device-and-more")
	got, err := c.Raw(ctx, wire.OpGPUMemUpdate, gva.GVA{}, body)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]byte{byte(wire.OpGPUMemUpdate)}, body...); !bytes.Equal(got, want) {
		t.Fatalf("reply %q, want %q", got, want)
	}
	_, err = c.Raw(ctx, wire.OpGPUKernelQuota, gva.GVA{}, nil)
	wantErrno(t, err, syscall.EAGAIN)

	// A connection that sends no GPU op is not reported at close.
	other, err := client.Dial(ctx, path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()

	c.Close()
	var served, closed []hookwire.Peer
	waitFor(t, "GPUClosed", func() bool {
		served, closed = rec.snapshot()
		return len(closed) > 0
	})
	if len(served) != 2 || served[0] != served[1] {
		t.Fatalf("served %+v", served)
	}
	p := served[0]
	if p.PID != int32(os.Getpid()) || p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) || p.Conn != c.Hello().ConnID {
		t.Fatalf("peer %+v, want pid %d uid %d gid %d conn %d", p, os.Getpid(), os.Getuid(), os.Getgid(), c.Hello().ConnID)
	}
	time.Sleep(50 * time.Millisecond) // a second, wrong notification would come now
	if _, closed = rec.snapshot(); len(closed) != 1 || closed[0] != p {
		t.Fatalf("closed %+v, want once %+v", closed, p)
	}
}
