package hookwire

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds outside bytes to every request decoder: none may panic,
// and whatever decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	d := Device{Ordinal: 2, UUID: UUID{0xfa, 0xce, 15: 2}}
	f.Add(AppendDevice(nil, d))
	f.Add(AppendUpdate(nil, d, MemUpdate{Kind: UpdateAlloc, Bytes: 4096, Total: 4096}))
	f.Add(AppendTokenAsk(nil, d, TokenAsk{Want: 1000, Overuse: 10}))
	f.Add(Procs{{PID: 7, Memory: 1 << 20}, {PID: 9}}.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := DecodeLimitRequest(b); err == nil {
			if got := AppendDevice(nil, d); !bytes.Equal(got, b) {
				t.Fatalf("limit request %x re-encodes to %x", b, got)
			}
		}
		if d, u, err := DecodeUpdate(b); err == nil {
			if got := AppendUpdate(nil, d, u); !bytes.Equal(got, b) {
				t.Fatalf("update %x re-encodes to %x", b, got)
			}
		}
		if d, a, err := DecodeTokenAsk(b); err == nil {
			if got := AppendTokenAsk(nil, d, a); !bytes.Equal(got, b) {
				t.Fatalf("token ask %x re-encodes to %x", b, got)
			}
		}
		var l Limits
		if err := l.Decode(b); err == nil {
			var l2 Limits
			if err := l2.Decode(l.Append(nil)); err != nil || l2 != l {
				t.Fatalf("limits %+v: %+v %v", l, l2, err)
			}
		}
		if d, err := DecodeProcsRequest(b); err == nil {
			if got := AppendDevice(nil, d); !bytes.Equal(got, b) {
				t.Fatalf("procs request %x re-encodes to %x", b, got)
			}
		}
		var ps Procs
		if err := ps.Decode(b); err == nil {
			if got := ps.Append(nil); !bytes.Equal(got, b) {
				t.Fatalf("procs %x re-encode to %x", b, got)
			}
		}
		var tok Token
		if err := tok.Decode(b); err == nil {
			var t2 Token
			if err := t2.Decode(tok.Append(nil)); err != nil || t2 != tok {
				t.Fatalf("token %+v: %+v %v", tok, t2, err)
			}
		}
	})
}
