package ether

import (
	"bytes"
	"testing"
)

// FuzzParseHeader decodes arbitrary bytes as a received frame: the decoder
// never panics, and what it decodes re-encodes to the same bytes.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0xb5, 1, 2})
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, err := ParseHeader(frame)
		if err != nil {
			if len(frame) >= HeaderLen {
				t.Fatalf("ParseHeader(%d bytes): %v", len(frame), err)
			}
			return
		}
		b := make([]byte, HeaderLen)
		PutHeader(b, h)
		if !bytes.Equal(b, frame[:HeaderLen]) {
			t.Fatalf("re-encoded % x, want % x", b, frame[:HeaderLen])
		}
		n := NewNeighbour(MAC{2, 0, 0, 0, 0, 1}, MAC{})
		if n.Accept(h) {
			if p, ok := n.Peer(); !ok || p != h.Src {
				t.Fatalf("accepted frame from %v but learned %v %v", h.Src, p, ok)
			}
		}
	})
}
