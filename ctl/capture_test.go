package ctl_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/ctl/ctltest"
)

// captureSource adds a capture of canned frames to a ctltest source.
type captureSource struct {
	*ctltest.Source
	got chan ctl.CaptureRequest
}

func (s captureSource) Capture(req ctl.CaptureRequest) ([]ctl.CapturedFrame, error) {
	s.got <- req
	if req.Port != "p0" {
		return nil, fmt.Errorf("no port %q: %w", req.Port, syscall.ENODEV)
	}
	at := time.Unix(1700000000, 123)
	return []ctl.CapturedFrame{
		{Time: at, Port: "p0", Direction: ctl.Received, Length: 3, Data: []byte{1, 2, 3}},
		{Time: at.Add(time.Millisecond), Port: "p0", Direction: ctl.Sent, Length: 100, Data: []byte{4}},
	}, nil
}

func TestCapture(t *testing.T) {
	src := captureSource{ctltest.NewSource(ctltest.Sample()), make(chan ctl.CaptureRequest, 4)}
	_, sock := ctltest.Serve(t, src)
	c, err := ctl.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	frames, err := c.Capture(ctx, ctl.CaptureRequest{Port: "p0", Count: 2, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if req := <-src.got; req.SnapLen != ctl.MaxSnapLen || req.Count != 2 || req.Timeout != time.Second {
		t.Errorf("request as served: %+v", req)
	}
	if len(frames) != 2 || frames[0].Time.UnixNano() != 1700000000000000123 || string(frames[0].Data) != "\x01\x02\x03" ||
		frames[1].Direction != ctl.Sent || frames[1].Length != 100 {
		t.Fatalf("frames %+v", frames)
	}
	if _, err := c.Capture(ctx, ctl.CaptureRequest{Port: "p9", Count: 1, Timeout: time.Second}); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("unknown port: %v", err)
	}
	<-src.got
	for _, bad := range []ctl.CaptureRequest{
		{Port: "p0", Count: 0, Timeout: time.Second},
		{Port: "p0", Count: ctl.MaxCaptureCount + 1, Timeout: time.Second},
		{Port: "p0", Count: 1, Timeout: 2 * ctl.MaxCaptureTimeout},
		{Count: 1, Timeout: time.Second},
	} {
		if _, err := c.Capture(ctx, bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", bad, err)
		}
	}
	select {
	case req := <-src.got:
		t.Errorf("a refused request reached the source: %+v", req)
	default:
	}
	// An agent without captures says so.
	_, sock2 := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	c2, err := ctl.Dial(sock2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Capture(ctx, ctl.CaptureRequest{Port: "p0", Count: 1, Timeout: time.Second}); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("no capture source: %v", err)
	}
}
