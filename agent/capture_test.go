package agent_test

import (
	"errors"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc/link"
)

// TestCaptureLive: a capture of a live port returns the link datagrams it
// sent and received, one capture per port at a time.
func TestCaptureLive(t *testing.T) {
	nodes := startLine(t, 2, nil)
	c, err := ctl.Dial(filepath.Join(nodes[0].runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)

	var wg sync.WaitGroup
	var frames []ctl.CapturedFrame
	var capErr error
	wg.Go(func() {
		// (the second capture below may take the port before this one is
		// in place on a slow machine: this one then tries again)
		for {
			frames, capErr = c.Capture(ctx, ctl.CaptureRequest{Port: "right", Count: 1000, Timeout: 1500 * time.Millisecond})
			if !errors.Is(capErr, syscall.EBUSY) || ctx.Err() != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	// A second capture of the same port while the first runs is refused.
	c2, err := ctl.Dial(filepath.Join(nodes[0].runDir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	time.Sleep(100 * time.Millisecond) // the first capture is in place
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c2.Capture(ctx, ctl.CaptureRequest{Port: "right", Count: 1, Timeout: 50 * time.Millisecond})
		if errors.Is(err, syscall.EBUSY) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("second capture: %v, want EBUSY while the first runs", err)
		}
	}
	wg.Wait()
	if capErr != nil {
		t.Fatal(capErr)
	}
	// Heartbeats every 50ms both ways: the capture ends at its timeout.
	if len(frames) < 6 || len(frames) >= 1000 {
		t.Fatalf("%d frames", len(frames))
	}
	last, err := c.Capture(ctx, ctl.CaptureRequest{Port: "right", Count: 3, Timeout: 10 * time.Second})
	if err != nil || len(last) != 3 {
		t.Fatalf("capture ended by its count: %d frames, %v", len(last), err)
	}
	dirs := map[ctl.Direction]int{}
	for _, f := range frames {
		var h link.Header
		if _, err := h.Decode(f.Data); err != nil || f.Port != "right" || int(f.Length) != len(f.Data) {
			t.Errorf("captured %+v: %v", f, err)
		}
		dirs[f.Direction]++
	}
	if dirs[ctl.Sent] == 0 || dirs[ctl.Received] == 0 {
		t.Errorf("directions %v: heartbeats go both ways", dirs)
	}
	if _, err := c.Capture(ctx, ctl.CaptureRequest{Port: "nope", Count: 1, Timeout: time.Second}); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("unknown port: %v", err)
	}
	// The link still works after the capture (the tap is gone).
	waitRoutes(t, nodes)
}
