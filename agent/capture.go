package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
)

// Packet capture (dpuctl link capture): every port is opened behind a tap
// that, while a capture runs on it, copies the datagrams it reads and
// writes. With no capture running a tap costs one atomic load per
// datagram. A port with link security has a second tap below the seal: a
// capture copies the datagrams there, as sealed on the wire, unless it
// asks for plaintext (root and the agent's user only: ctl/authz.go). A
// capture group member's capture of a port without link security has its
// payloads zeroed (redacted).

// tapPort is a port whose datagrams a capture can copy. It passes the
// optional port interfaces through (Poller, BatchPoller, BatchWriter,
// Waitable, Flusher, counters): a port that is not a Poller never has
// anything to poll, one without batches is read and written one datagram
// at a time, and one that is not a Flusher has nothing to flush. The agent
// decides what a port can do from the port itself, never from its tap.
type tapPort struct {
	noc.Port
	capture atomic.Pointer[capture]
}

func newTap(p noc.Port) *tapPort { return &tapPort{Port: p} }

func (t *tapPort) ReadDatagram(b []byte) (int, error) {
	n, err := t.Port.ReadDatagram(b)
	if c := t.capture.Load(); c != nil && err == nil {
		c.add(ctl.Received, b[:n])
	}
	return n, err
}

// TryReadDatagram implements noc.Poller.
func (t *tapPort) TryReadDatagram(b []byte) (int, bool, error) {
	p, ok := t.Port.(noc.Poller)
	if !ok {
		return 0, false, nil
	}
	n, ok, err := p.TryReadDatagram(b)
	if c := t.capture.Load(); c != nil && ok && err == nil {
		c.add(ctl.Received, b[:n])
	}
	return n, ok, err
}

func (t *tapPort) WriteDatagram(b []byte) error {
	if c := t.capture.Load(); c != nil {
		c.add(ctl.Sent, b)
	}
	return t.Port.WriteDatagram(b)
}

// TryReadDatagrams implements noc.BatchPoller (one TryReadDatagram at a
// time for a port that has no batch read).
func (t *tapPort) TryReadDatagrams(bufs [][]byte, lens []int) (int, error) {
	var n int
	var err error
	if bp, ok := t.Port.(noc.BatchPoller); ok {
		n, err = bp.TryReadDatagrams(bufs, lens)
	} else {
		for n < len(bufs) {
			var ok bool
			if lens[n], ok, err = t.TryReadDatagram(bufs[n]); !ok || err != nil {
				break
			}
			n++
		}
		return n, err // each was captured by TryReadDatagram
	}
	if c := t.capture.Load(); c != nil {
		for i := range n {
			c.add(ctl.Received, bufs[i][:lens[i]])
		}
	}
	return n, err
}

// WriteDatagrams implements noc.BatchWriter (one WriteDatagram at a time
// for a port that has no batch write).
func (t *tapPort) WriteDatagrams(bufs [][]byte) error {
	bw, ok := t.Port.(noc.BatchWriter)
	if !ok {
		for _, b := range bufs {
			if err := t.WriteDatagram(b); err != nil {
				return err
			}
		}
		return nil
	}
	if c := t.capture.Load(); c != nil {
		for _, b := range bufs {
			c.add(ctl.Sent, b)
		}
	}
	return bw.WriteDatagrams(bufs)
}

// ReadyFD implements noc.Waitable.
func (t *tapPort) ReadyFD() (int, error) {
	if w, ok := t.Port.(noc.Waitable); ok {
		return w.ReadyFD()
	}
	return -1, fmt.Errorf("port %s: %w", t.Name(), errors.ErrUnsupported)
}

// Flush implements noc.Flusher.
func (t *tapPort) Flush() error {
	if f, ok := t.Port.(noc.Flusher); ok {
		return f.Flush()
	}
	return nil
}

// Counters passes the port's own counters through (link show).
func (t *tapPort) Counters() (map[string]uint64, error) {
	if c, ok := t.Port.(interface {
		Counters() (map[string]uint64, error)
	}); ok {
		return c.Counters()
	}
	return nil, nil
}

// capture collects copies of a port's datagrams, up to a count.
type capture struct {
	port   string
	snap   int
	sealed bool // below the link's seal
	redact bool // zero the payloads of what the wire does not seal

	mu     sync.Mutex
	frames []ctl.CapturedFrame
	want   int           // 0 once the capture ended
	full   chan struct{} // closed when want frames are in
}

func (c *capture) add(d ctl.Direction, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.frames) >= c.want {
		return
	}
	var data []byte
	if c.redact && !c.sealed {
		data = redacted(b)[:min(len(b), c.snap)]
	} else {
		data = bytes.Clone(b[:min(len(b), c.snap)])
	}
	c.frames = append(c.frames, ctl.CapturedFrame{Time: time.Now(), Port: c.port, Direction: d,
		Length: uint32(len(b)), Data: data, Sealed: c.sealed, Redacted: c.redact && !c.sealed})
	if len(c.frames) == c.want {
		close(c.full)
	}
}

// Capture implements ctl.CaptureSource: one capture per port at a time,
// ended by its count, its timeout or the agent's shutdown.
func (s source) Capture(req ctl.CaptureRequest) ([]ctl.CapturedFrame, error) {
	var tap *tapPort
	sealed := false
	for i := range s.a.ports {
		if p := &s.a.ports[i]; p.spec.Name == req.Port {
			tap, _ = p.port.(*tapPort)
			// below the seal unless plaintext was asked for (and
			// allowed: ctl/authz.go)
			if p.sealed != nil && !req.Plaintext {
				tap, sealed = p.sealed, true
			}
		}
	}
	if tap == nil {
		return nil, fmt.Errorf("no port %q on this agent: %w", req.Port, syscall.ENODEV)
	}
	c := &capture{port: req.Port, snap: int(req.SnapLen), want: int(req.Count), sealed: sealed, redact: req.Redact, full: make(chan struct{})}
	if !tap.capture.CompareAndSwap(nil, c) {
		return nil, fmt.Errorf("port %s is being captured already: %w", req.Port, syscall.EBUSY)
	}
	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	select {
	case <-c.full:
	case <-timer.C:
	case <-s.a.running().Done():
	}
	tap.capture.Store(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = 0 // a datagram still on its way through add is not taken
	return c.frames, nil
}

// redacted is a copy of the link datagram b with every payload byte
// zeroed: the link header (with its selective acks and clock stamps) is
// kept, and for a datagram that holds a whole frame the frame's header
// too (class, op, nodes, request id, GVA, version); the frame's payload,
// any fragment of a frame and the trailer are zeros. What does not decode
// as a link datagram is zeros from its first byte. So a capture group
// member capturing a port without link security sees the traffic's shape
// and who asks for which page, never a page's bytes (nor those of the
// pages it could read itself: the tap does not know pages' owners).
func redacted(b []byte) []byte {
	out := bytes.Clone(b)
	keep := 0
	var h link.Header
	if payload, err := h.Decode(out); err == nil {
		keep = h.Len() - link.TrailerLen - len(payload) // the payload's offset
		whole := link.FlagData | link.FlagFirst | link.FlagLast
		var f noc.Frame
		if h.Flags&whole == whole && f.Decode(payload) == nil {
			keep += len(f.Contents)
		}
	}
	clear(out[keep:])
	return out
}

// running is the context of the agent's Run (done once it stops); before
// Run it is never done.
func (a *Agent) running() context.Context {
	a.metrics.mu.Lock()
	defer a.metrics.mu.Unlock()
	if a.metrics.ctx == nil {
		return context.Background()
	}
	return a.metrics.ctx
}

// Inner is the port behind the tap (for what looks for a particular port
// kind under its wrappers).
func (t *tapPort) Inner() noc.Port { return t.Port }
