package wire

import (
	"bytes"
	"testing"
)

// FuzzDecodeRequest: the server's decoder of client bytes never panics, and
// whatever it accepts is canonical: re-encoding gives the same bytes and
// every field is in range. Seeds: testdata/fuzz/FuzzDecodeRequest (one
// valid request of every op and some garbage) plus validRequests.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range validRequests() {
		f.Add(AppendRequest(nil, &r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if err := DecodeRequest(b, &r); err != nil {
			return
		}
		if again := AppendRequest(nil, &r); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but re-encodes as %x", b, again)
		}
		switch r.Op {
		case OpLoad:
			if r.Len < 1 || int(r.GVA.Offset())+int(r.Len) > PageSize {
				t.Fatalf("load of %d at %d accepted", r.Len, r.GVA.Offset())
			}
		case OpStore:
			if len(r.Data) < 1 || int(r.GVA.Offset())+len(r.Data) > PageSize {
				t.Fatalf("store of %d at %d accepted", len(r.Data), r.GVA.Offset())
			}
		case OpMap, OpUnmap:
			if r.Pages() < 1 || r.Pages() > MaxMapPages || r.GVA.Offset() != 0 {
				t.Fatalf("map of %d pages accepted", r.Pages())
			}
		case OpCAS, OpFetchAdd:
			if r.GVA.Offset()%8 != 0 {
				t.Fatal("unaligned atomic accepted")
			}
		case OpStoreBulk, OpLoadBulk:
			if r.Len < 1 || r.Len > MaxBulk || uint64(r.Off)+uint64(r.Len) > MaxBulkArea || r.GVA.Lo+uint64(r.Len) < r.GVA.Lo {
				t.Fatalf("%s of %d at area offset %d accepted", r.Op, r.Len, r.Off)
			}
		case OpBulk:
			if r.Bytes < PageSize || r.Bytes > MaxBulkArea || r.Bytes%PageSize != 0 {
				t.Fatalf("bulk area of %d bytes accepted", r.Bytes)
			}
		}
	})
}

// FuzzDecodeReply: the client's decoders of server bytes never panic.
func FuzzDecodeReply(f *testing.F) {
	h := Hello{Version: 1, MaxOutstanding: 4}
	f.Add(append((&Header{Op: OpHello, Kind: KindReply}).Append(nil), h.Append(nil)...))
	f.Add(append((&Header{Op: OpMap, Kind: KindReply}).Append(nil), AppendMapReply(nil, []MappedPage{{Slot: 1}})...))
	f.Add((&Event{Type: EventUpdated, Length: 8}).Append(nil))
	f.Add(append((&Header{Op: OpClock, Kind: KindReply}).Append(nil), (&ClusterTime{Time: 1, Error: 2, Ref: 3}).Append(nil)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := DecodeReply(b)
		if err != nil {
			return
		}
		var hl Hello
		_ = hl.Decode(body)
		var l Location
		_ = l.Decode(body)
		var ct ClusterTime
		if ct.Decode(body) == nil && ct.Error < 0 {
			t.Fatal("clock reply with a negative error")
		}
		if pages, err := DecodeMapReply(body, nil); err == nil && len(body) != 8+16*len(pages) {
			t.Fatal("map reply length")
		}
		if h.Kind == KindEvent {
			_, _ = DecodeEvent(&h, body)
		}
	})
}
