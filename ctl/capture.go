package ctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
)

// Packet capture: the agent copies the datagrams one port sends and
// receives, as they cross the port, until it has Count of them or Timeout
// passes, and answers with one CapturedFrame per datagram (a dump). dpuctl
// link capture writes them to a pcapng file.
//
//	cmd 21 CmdCapture  dump  request: CaptureRequest attrs  reply: one CapturedFrame per message
//
//	capture request  1 port string, 2 count u32, 3 timeout s64 ns, 4 snap length u32,
//	                 5 plaintext u8 (1: above the link's seal; root only)
//	captured frame   1 time s64 unix ns, 2 port string, 3 direction u8 (0 received,
//	                 1 sent), 4 length u32 (on the wire), 5 data (the first snap
//	                 length bytes), 6 sealed u8 (1: as sealed on the wire),
//	                 7 redacted u8 (1: payloads zeroed, headers kept)
//
// Who may capture, and what they see: authz.go.

// CmdCapture captures datagrams of one port (CaptureSource).
const CmdCapture Cmd = 21

func init() { cmdNames[CmdCapture] = "capture" }

// Bounds of one capture.
const (
	MaxCaptureCount   = 4096
	MaxCaptureTimeout = time.Minute
	// MaxSnapLen keeps every captured frame within one reply message.
	MaxSnapLen = 60 << 10
)

// CaptureRequest asks for the next Count datagrams of Port (sent and
// received), waiting at most Timeout; each is cut to SnapLen bytes (0:
// MaxSnapLen).
//
// Without Plaintext the datagrams are copied as they cross the wire: on a
// port with link security, sealed (the link's encryption applied), so the
// capture shows the traffic's shape and never a page's bytes. Plaintext
// copies them above the seal, as the node core reads and writes them:
// only root and the agent's user may ask for it.
type CaptureRequest struct {
	Port      string
	Count     uint32
	Timeout   time.Duration
	SnapLen   uint32
	Plaintext bool
	// Redact is set by the server, never by the client (it is not on the
	// wire): the caller is in the capture group only, so the datagrams'
	// payloads are zeroed where the wire does not seal them.
	Redact bool `json:"-"`
}

// Direction says whether a captured datagram was received or sent.
type Direction uint8

// Directions.
const (
	Received Direction = 0
	Sent     Direction = 1
)

func (d Direction) String() string {
	if d == Sent {
		return "tx"
	}
	return "rx"
}

// MarshalText implements encoding.TextMarshaler.
func (d Direction) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// CapturedFrame is one datagram as it crossed a port.
type CapturedFrame struct {
	Time      time.Time `json:"time"`
	Port      string    `json:"port"`
	Direction Direction `json:"direction"`
	Length    uint32    `json:"length"` // on the wire; len(Data) may be less
	Data      []byte    `json:"data"`
	// Sealed: Data is as sealed on the wire (a port with link security,
	// captured without Plaintext).
	Sealed bool `json:"sealed"`
	// Redacted: the payloads in Data are zeroed (the link and frame
	// headers kept), for a capture group member on a port without link
	// security.
	Redacted bool `json:"redacted,omitempty"`
}

// CaptureSource serves CmdCapture. Capture blocks until it has req.Count
// datagrams or req.Timeout passed (the server has checked both bounds) and
// returns what it has; an unknown port is an error wrapping ENODEV, a port
// already being captured one wrapping EBUSY.
type CaptureSource interface {
	Capture(req CaptureRequest) ([]CapturedFrame, error)
}

// Capture asks the agent for the next req.Count datagrams of a port. It
// waits up to req.Timeout (plus the reply's transfer): ctx should allow
// that.
func (c *Client) Capture(ctx context.Context, req CaptureRequest) ([]CapturedFrame, error) {
	var frames []CapturedFrame
	err := c.exchange(ctx, CmdCapture, flagDump, &req, func(attrs []byte) error {
		var f CapturedFrame
		if err := decodeObject(attrs, &f); err != nil {
			return err
		}
		frames = append(frames, f)
		return nil
	})
	return frames, err
}

// capture answers CmdCapture.
func (s *Server) capture(r replier, m message, dump bool, cs CaptureSource) error {
	var req CaptureRequest
	if err := decodeObject(m.attrs, &req); err != nil {
		return s.replyError(r, m.hdr, errInvalid("capture: %v", err))
	}
	switch {
	case req.Count == 0 || req.Count > MaxCaptureCount:
		return s.replyError(r, m.hdr, errInvalid("capture: count %d: want 1 to %d", req.Count, MaxCaptureCount))
	case req.Timeout <= 0 || req.Timeout > MaxCaptureTimeout:
		return s.replyError(r, m.hdr, errInvalid("capture: timeout %v: want up to %v", req.Timeout, MaxCaptureTimeout))
	case req.SnapLen == 0 || req.SnapLen > MaxSnapLen:
		req.SnapLen = MaxSnapLen
	}
	if !dump {
		return s.replyError(r, m.hdr, errUnsupported("%s is a dump: set NLM_F_DUMP", m.cmd))
	}
	if werr := s.authorizeCapture(r, &req); werr != nil {
		return s.replyError(r, m.hdr, werr)
	}
	frames, err := cs.Capture(req)
	if err != nil {
		return s.replyError(r, m.hdr, captureError(err))
	}
	return dumpAll(s, r, m, dump, func() []CapturedFrame { return frames })
}

// captureError turns a CaptureSource's error into the reply's errno.
func captureError(err error) *wireError {
	errno := syscall.EIO
	errors.As(err, &errno)
	return &wireError{errno: errno, reason: strings.TrimSuffix(err.Error(), ": "+errno.Error())}
}

const (
	capPort    uint16 = 1
	capCount   uint16 = 2
	capTimeout uint16 = 3
	capSnapLen uint16 = 4
	capPlain   uint16 = 5

	frameTime      uint16 = 1
	framePort      uint16 = 2
	frameDirection uint16 = 3
	frameLength    uint16 = 4
	frameData      uint16 = 5
	frameSealed    uint16 = 6
	frameRedacted  uint16 = 7
)

func (q *CaptureRequest) encode(ae *netlink.AttributeEncoder) {
	ae.String(capPort, q.Port)
	ae.Uint32(capCount, q.Count)
	ae.Int64(capTimeout, int64(q.Timeout))
	ae.Uint32(capSnapLen, q.SnapLen)
	if q.Plaintext {
		ae.Uint8(capPlain, 1)
	}
}

func (q *CaptureRequest) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case capPort:
			q.Port = ad.String()
		case capCount:
			q.Count = ad.Uint32()
		case capTimeout:
			q.Timeout = time.Duration(ad.Int64())
		case capSnapLen:
			q.SnapLen = ad.Uint32()
		case capPlain:
			q.Plaintext = ad.Uint8() != 0
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if q.Port == "" {
		return fmt.Errorf("no port (attribute %d)", capPort)
	}
	return nil
}

func (f *CapturedFrame) encode(ae *netlink.AttributeEncoder) {
	ae.Int64(frameTime, f.Time.UnixNano())
	ae.String(framePort, f.Port)
	ae.Uint8(frameDirection, uint8(f.Direction))
	ae.Uint32(frameLength, f.Length)
	ae.Bytes(frameData, f.Data)
	if f.Sealed {
		ae.Uint8(frameSealed, 1)
	}
	if f.Redacted {
		ae.Uint8(frameRedacted, 1)
	}
}

func (f *CapturedFrame) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case frameTime:
			f.Time = time.Unix(0, ad.Int64())
		case framePort:
			f.Port = ad.String()
		case frameDirection:
			f.Direction = Direction(ad.Uint8())
		case frameLength:
			f.Length = ad.Uint32()
		case frameData:
			f.Data = ad.Bytes()
		case frameSealed:
			f.Sealed = ad.Uint8() != 0
		case frameRedacted:
			f.Redacted = ad.Uint8() != 0
		}
	}
	return ad.Err()
}
