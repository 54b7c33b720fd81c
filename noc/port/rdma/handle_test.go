package rdma

import (
	"errors"
	"net/netip"
	"testing"
)

func sampleHandle() Handle {
	return Handle{Self: Identity{7, 2}, Peer: Identity{9, 1}, QPN: 0x11, PSN: 0xabcdef,
		GID: netip.MustParseAddr("::ffff:10.0.2.15"), LID: 0, MTU: 9000, Slots: 256}
}

func TestHandleRoundTrip(t *testing.T) {
	h := sampleHandle()
	b := make([]byte, HandleLen)
	if _, err := h.Encode(b); err != nil {
		t.Fatal(err)
	}
	var got Handle
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("got %+v, want %+v", got, h)
	}
	b[20] ^= 1
	if err := got.Decode(b); !errors.Is(err, ErrHandle) {
		t.Fatalf("corrupt handle: %v", err)
	}
}

// FuzzHandle: Decode never panics, and what it accepts encodes back to the
// same bytes.
func FuzzHandle(f *testing.F) {
	h := sampleHandle()
	b := make([]byte, HandleLen)
	h.Encode(b)
	f.Add(b)
	f.Add(b[:10])
	f.Add(make([]byte, HandleLen))
	f.Fuzz(func(t *testing.T, in []byte) {
		var h Handle
		if err := h.Decode(in); err != nil {
			return
		}
		out := make([]byte, HandleLen)
		if _, err := h.Encode(out); err != nil {
			t.Fatalf("accepted handle does not encode: %v", err)
		}
		if string(out) != string(in) {
			t.Fatal("accepted handle re-encodes differently")
		}
	})
}
