package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
)

// TestDurableStateOnAFullDisk (root: a 1 MiB tmpfs as the state
// directory): an agent with durable pages does not start on a full disk,
// naming the file it could not write and ENOSPC. Started with room, it
// acknowledges stores; when the disk then fills up, the store whose
// records do not fit is never acknowledged and the agent stops with the
// page log's file and ENOSPC. Started again once there is room, it
// reloads the page at the last acknowledged store.
func TestDurableStateOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("no small file system to fill (mount tmpfs: %v)", err)
	}
	t.Cleanup(func() { unix.Unmount(state, 0) })
	filler := filepath.Join(state, "filler")
	fill := func() {
		t.Helper()
		f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 4096)
		for range 1 << 10 { // 4 MiB at most: the file system holds 1
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatal("the 1 MiB file system took 4 MiB")
	}
	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	cfg.Pages = 64
	cfg.Durable, cfg.StateDir = true, state

	fill()
	if a, err := agent.New(cfg, nil); err == nil {
		a.Close()
		t.Fatal("the agent started on a full disk")
	} else if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), state) {
		t.Fatalf("start on a full disk: %v, want ENOSPC naming a file of %s", err, state)
	} else {
		t.Logf("start on a full disk: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func() (*client.Client, <-chan error, context.CancelFunc) {
		t.Helper()
		a, err := agent.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		done, exited := make(chan error, 1), make(chan struct{})
		go func() { done <- a.Run(actx); close(exited) }()
		t.Cleanup(func() {
			stop()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Error("agent did not stop")
			}
		})
		select {
		case <-a.Ready():
		case err := <-done:
			t.Fatalf("agent: %v", err)
		case <-ctx.Done():
			t.Fatal("agent not ready")
		}
		c, err := client.Dial(ctx, hostif.SocketPath(cfg.RunDir), client.Options{Name: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, done, stop
	}
	c, done, _ := run()
	g, err := c.Alloc(ctx, gva.PageSize, 0)
	if err != nil {
		t.Fatal(err)
	}
	const acked = 3
	for i := uint64(1); i <= acked; i++ {
		if _, err := c.Store64(ctx, g, i); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	fill()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	if v, err := c.Store64(sctx, g, 99); err == nil {
		t.Fatalf("a store the disk had no room for was acknowledged (version %d)", v)
	}
	scancel()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(state, pagelog.FileName)) {
			t.Fatalf("the agent stopped with %v, want ENOSPC naming its page log", err)
		}
		t.Logf("the agent stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the agent runs on after its page log's disk filled up")
	}
	c.Close()

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c, _, _ = run()
	// The reloaded copy takes the page over after its restore grace.
	var v uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		v, err = c.Load64(lctx, g)
		lcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart the page does not come back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v != acked {
		t.Fatalf("after the restart the page holds %d, want %d (the last acknowledged store)", v, acked)
	}
}
