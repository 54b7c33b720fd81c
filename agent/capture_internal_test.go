package agent

import (
	"bytes"
	"testing"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
)

// TestRedactedKeepsHeadersOnly: a redacted link datagram keeps its link
// header and its frame's header byte for byte, and zeros the frame's
// payload and the trailer; a fragment keeps only the link header; what is
// no link datagram is all zeros.
func TestRedactedKeepsHeadersOnly(t *testing.T) {
	secret := bytes.Repeat([]byte("secret page bytes "), 20)
	f := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassStore, Src: 1, Dst: 2, RequestID: 7, Payload: secret}
	enc, err := f.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	frameHeader := len(enc) - len(secret)
	for _, tc := range []struct {
		flags link.Flags
		keep  int // bytes kept after the link header
	}{
		{link.FlagData | link.FlagFirst | link.FlagLast, frameHeader},
		{link.FlagData | link.FlagFirst, 0},
	} {
		h := link.Header{Flags: tc.flags, SrcSession: 9, Seq: 3}
		b := make([]byte, link.HeaderLen+len(enc)+link.TrailerLen)
		n, err := h.Encode(b, enc)
		if err != nil {
			t.Fatal(err)
		}
		b = b[:n]
		r := redacted(b)
		keep := link.HeaderLen + tc.keep
		if !bytes.Equal(r[:keep], b[:keep]) {
			t.Errorf("flags %v: the headers changed", tc.flags)
		}
		if bytes.Contains(r, secret[:8]) || len(bytes.Trim(r[keep:], "\x00")) != 0 {
			t.Errorf("flags %v: payload bytes left after the headers", tc.flags)
		}
		if len(r) != len(b) {
			t.Errorf("flags %v: length %d, want %d", tc.flags, len(r), len(b))
		}
	}
	if r := redacted(secret); len(bytes.Trim(r, "\x00")) != 0 {
		t.Error("what is no link datagram is not all zeros")
	}
}

// TestRedactedIsByDatagram: redaction is decided per datagram, never per
// frame or page: a datagram whose message holds more than one frame back
// to back (the frame decoder takes the first and leaves the rest as
// trailing bytes) keeps its link header and its first frame's header
// only; the second frame, header and payload, and both payloads are
// zeros, whoever's pages they are. A datagram that is a fragment of a
// larger message keeps its link header only, whatever the fragment holds.
func TestRedactedIsByDatagram(t *testing.T) {
	secret1 := bytes.Repeat([]byte("first page's bytes "), 8)
	secret2 := bytes.Repeat([]byte("second page's bytes "), 8)
	f1 := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassStore, Src: 1, Dst: 2, RequestID: 7, Payload: secret1}
	f2 := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassStore, Src: 3, Dst: 2, RequestID: 8, Payload: secret2}
	msg, err := f1.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	first := len(msg) - len(secret1) // the first frame's header
	if msg, err = f2.AppendTo(msg); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags link.Flags
		keep  int // bytes kept after the link header
	}{
		{link.FlagData | link.FlagFirst | link.FlagLast, first},
		{link.FlagData | link.FlagFirst, 0},
		{link.FlagData | link.FlagLast, 0},
		{link.FlagData, 0},
	} {
		h := link.Header{Flags: tc.flags, SrcSession: 9, Seq: 3}
		b := make([]byte, link.HeaderLen+len(msg)+link.TrailerLen)
		n, err := h.Encode(b, msg)
		if err != nil {
			t.Fatal(err)
		}
		b = b[:n]
		r := redacted(b)
		keep := link.HeaderLen + tc.keep
		if !bytes.Equal(r[:keep], b[:keep]) {
			t.Errorf("flags %v: the headers changed", tc.flags)
		}
		if len(bytes.Trim(r[keep:], "\x00")) != 0 {
			t.Errorf("flags %v: %d bytes left after the first %d", tc.flags, len(bytes.Trim(r[keep:], "\x00")), keep)
		}
		for _, s := range [][]byte{secret1[:8], secret2[:8]} {
			if bytes.Contains(r, s) {
				t.Errorf("flags %v: %q left", tc.flags, s)
			}
		}
	}
}
