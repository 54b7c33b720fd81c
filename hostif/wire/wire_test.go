package wire

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aitherion/dpu/gva"
)

var page = gva.New(3, 0x42, 0, 0)

// validRequests is one well-formed request of every op.
func validRequests() []Request {
	var name [NameLen]byte
	copy(name[:], "test")
	return []Request{
		{Header: Header{Op: OpHello, ID: 1}, Min: 1, Max: 3, Name: name},
		{Header: Header{Op: OpAlloc, ID: 2}, Bytes: 3 * PageSize, Mode: 0o640},
		{Header: Header{Op: OpFree, ID: 3, GVA: page}},
		{Header: Header{Op: OpMap, ID: 4, GVA: page}, LVA: 0x7f0000000000, Bytes: 2 * PageSize},
		{Header: Header{Op: OpMap, ID: 4, GVA: page}, Bytes: 1, Flags: MapNoFD},
		{Header: Header{Op: OpUnmap, ID: 5, GVA: page}, LVA: 0x7f0000000000, Bytes: 2 * PageSize},
		{Header: Header{Op: OpTranslate, ID: 6}, Dir: TranslateToGVA, LVA: 0x7f0000000123},
		{Header: Header{Op: OpTranslate, ID: 6, GVA: page.WithOffset(9)}, Dir: TranslateToLVA},
		{Header: Header{Op: OpLoad, ID: 7, GVA: page.WithOffset(4000)}, Len: 96},
		{Header: Header{Op: OpStore, ID: 8, GVA: page.WithOffset(1)}, Data: []byte{1, 2, 3}},
		{Header: Header{Op: OpCAS, ID: 9, GVA: page.WithOffset(8)}, Expected: 1, Desired: 2},
		{Header: Header{Op: OpFetchAdd, ID: 10, GVA: page.WithOffset(4088)}, Delta: 5},
		{Header: Header{Op: OpAcquire, ID: 11, GVA: page}, TimeoutMS: 100},
		{Header: Header{Op: OpRelease, ID: 12, GVA: page}},
		{Header: Header{Op: OpLock, ID: 13, GVA: page}, TimeoutMS: 10, Flags: LockTry},
		{Header: Header{Op: OpUnlock, ID: 14, GVA: page}},
		{Header: Header{Op: OpWhere, ID: 15, GVA: page.WithOffset(5)}},
		{Header: Header{Op: OpSubscribe, ID: 16}, Mask: AllEvents},
		{Header: Header{Op: OpRings, ID: 18}, RingEntries: 64, RingSlotSize: 4160},
		{Header: Header{Op: OpClock, ID: 19}},
		{Header: Header{Op: OpBulk, ID: 20}, Bytes: 64 * PageSize},
		{Header: Header{Op: OpStoreBulk, ID: 21, GVA: page.WithOffset(3)}, Len: 5 * PageSize, Off: PageSize},
		{Header: Header{Op: OpLoadBulk, ID: 22, GVA: page}, Len: MaxBulk},
		{Header: Header{Op: OpGPUMemUpdate, ID: 17}, Data: []byte("cuMemAlloc 4096")},
	}
}

// TestClusterTimeRoundTrip: a CLOCK reply decodes to what was encoded;
// a negative error, a reserved word or another length is refused.
func TestClusterTimeRoundTrip(t *testing.T) {
	c := ClusterTime{Time: -5, Error: 1234, Ref: 7}
	b := c.Append(nil)
	var got ClusterTime
	if err := got.Decode(b); err != nil || got != c || len(b) != ClusterTimeLen {
		t.Fatalf("decoded %+v (%v) from %d bytes", got, err, len(b))
	}
	bad := ClusterTime{Error: -1}
	for _, b := range [][]byte{bad.Append(nil), append(c.Append(nil)[:20], 1, 0, 0, 0), c.Append(nil)[:16]} {
		if err := got.Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: %v", b, err)
		}
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range validRequests() {
		b := AppendRequest(nil, &r)
		var got Request
		if err := DecodeRequest(b, &got); err != nil {
			t.Fatalf("%s: %v", r.Op, err)
		}
		r.Kind = KindRequest
		if fmt.Sprint(got) != fmt.Sprint(r) {
			t.Fatalf("%s: decoded %+v, want %+v", r.Op, got, r)
		}
		if again := AppendRequest(nil, &got); !bytes.Equal(again, b) {
			t.Fatalf("%s: re-encoding differs", r.Op)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	enc := func(r Request) []byte { return AppendRequest(nil, &r) }
	mut := func(b []byte, i int, v byte) []byte { b = append([]byte(nil), b...); b[i] = v; return b }
	load := enc(Request{Header: Header{Op: OpLoad, GVA: page}, Len: 8})
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", load[:31], ErrShort},
		{"kind", mut(load, 2, byte(KindReply)), ErrKind},
		{"flags", mut(load, 3, 1), ErrReserved},
		{"status", mut(load, 4, 1), ErrReserved},
		{"op 0", mut(load, 0, 0), ErrUnknownOp},
		{"op 23", mut(load, 0, 23), ErrUnknownOp},
		{"bulk area 0", enc(Request{Header: Header{Op: OpBulk}}), ErrField},
		{"bulk area not whole pages", enc(Request{Header: Header{Op: OpBulk}, Bytes: PageSize + 1}), ErrField},
		{"bulk area too large", enc(Request{Header: Header{Op: OpBulk}, Bytes: MaxBulkArea + PageSize}), ErrField},
		{"bulk area gva", enc(Request{Header: Header{Op: OpBulk, GVA: page}, Bytes: PageSize}), ErrReserved},
		{"store-bulk 0", enc(Request{Header: Header{Op: OpStoreBulk, GVA: page}}), ErrField},
		{"store-bulk too long", enc(Request{Header: Header{Op: OpStoreBulk, GVA: page}, Len: MaxBulk + 1}), ErrField},
		{"load-bulk past the area", enc(Request{Header: Header{Op: OpLoadBulk, GVA: page}, Len: MaxBulk, Off: MaxBulkArea - MaxBulk + 1}), ErrField},
		{"load-bulk wraps", enc(Request{Header: Header{Op: OpLoadBulk, GVA: gva.GVA{Lo: ^uint64(0) &^ 0xfff}}, Len: 2 * PageSize}), ErrField},
		{"clock gva", enc(Request{Header: Header{Op: OpClock, GVA: page}}), ErrReserved},
		{"long body", append(append([]byte(nil), load...), 0), ErrLength},
		{"load reserved", mut(load, 36, 1), ErrReserved},
		{"load 0 bytes", enc(Request{Header: Header{Op: OpLoad, GVA: page}}), ErrField},
		{"load crosses page", enc(Request{Header: Header{Op: OpLoad, GVA: page.WithOffset(4090)}, Len: 8}), ErrField},
		{"store empty", enc(Request{Header: Header{Op: OpStore, GVA: page}}), ErrField},
		{"store too long", enc(Request{Header: Header{Op: OpStore, GVA: page}, Data: make([]byte, PageSize+1)}), ErrField},
		{"cas unaligned", enc(Request{Header: Header{Op: OpCAS, GVA: page.WithOffset(4)}}), ErrField},
		{"fetch-add unaligned", enc(Request{Header: Header{Op: OpFetchAdd, GVA: page.WithOffset(1)}}), ErrField},
		{"hello min>max", enc(Request{Header: Header{Op: OpHello}, Min: 3, Max: 2}), ErrField},
		{"hello min 0", enc(Request{Header: Header{Op: OpHello}, Min: 0, Max: 2}), ErrField},
		{"hello gva", enc(Request{Header: Header{Op: OpHello, GVA: page}, Min: 1, Max: 1}), ErrReserved},
		{"alloc 0", enc(Request{Header: Header{Op: OpAlloc}}), ErrField},
		{"alloc huge size", enc(Request{Header: Header{Op: OpAlloc}, Bytes: MaxAllocBytes + 1}), ErrField},
		{"alloc mode", enc(Request{Header: Header{Op: OpAlloc}, Bytes: 1, Mode: 0o1000}), ErrField},
		{"alloc flags", enc(Request{Header: Header{Op: OpAlloc}, Bytes: 1, Flags: 2}), ErrField},
		{"free offset", enc(Request{Header: Header{Op: OpFree, GVA: page.WithOffset(1)}}), ErrField},
		{"map offset", enc(Request{Header: Header{Op: OpMap, GVA: page.WithOffset(8)}, Bytes: 1}), ErrField},
		{"map too many", enc(Request{Header: Header{Op: OpMap, GVA: page}, Bytes: MaxMapPages*PageSize + 1}), ErrField},
		{"map lva unaligned", enc(Request{Header: Header{Op: OpMap, GVA: page}, Bytes: 1, LVA: 0x1001}), ErrField},
		{"map nofd with lva", enc(Request{Header: Header{Op: OpMap, GVA: page}, Bytes: 1, LVA: 0x1000, Flags: MapNoFD}), ErrField},
		{"map wraps", enc(Request{Header: Header{Op: OpMap, GVA: gva.GVA{Lo: ^uint64(0) &^ 0xfff}}, Bytes: 2 * PageSize}), ErrField},
		{"unmap 0", enc(Request{Header: Header{Op: OpUnmap, GVA: page}}), ErrField},
		{"translate dir", enc(Request{Header: Header{Op: OpTranslate}, Dir: 2}), ErrField},
		{"translate to lva with lva", enc(Request{Header: Header{Op: OpTranslate}, Dir: TranslateToLVA, LVA: 1}), ErrField},
		{"lock flags", enc(Request{Header: Header{Op: OpLock, GVA: page}, Flags: 2}), ErrField},
		{"subscribe mask", enc(Request{Header: Header{Op: OpSubscribe}, Mask: 1 << 6}), ErrField},
		{"gpu too long", enc(Request{Header: Header{Op: OpGPUFirst}, Data: make([]byte, MaxBody+1)}), ErrLength},
	} {
		var r Request
		err := DecodeRequest(c.b, &r)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestDecodeRequestDoesNotAllocate(t *testing.T) {
	b := AppendRequest(nil, &Request{Header: Header{Op: OpStore, GVA: page}, Data: make([]byte, 64)})
	var r Request
	if n := testing.AllocsPerRun(100, func() { _ = DecodeRequest(b, &r) }); n != 0 {
		t.Fatalf("DecodeRequest allocates %.0f times", n)
	}
}

func TestReplyBodies(t *testing.T) {
	h := Hello{Version: 1, Min: 1, Max: 2, MaxOutstanding: 64, PageSize: 4096, Machine: 9, StatusSlots: 100, MaxMapPages: 64, MaxMessage: MaxMessage, ConnID: 77}
	var h2 Hello
	if b := h.Append(nil); len(b) != HelloLen || h2.Decode(b) != nil || h2 != h {
		t.Fatalf("hello round trip: %+v", h2)
	}
	pages := []MappedPage{{Slot: 1, Version: 5}, {Slot: 9, Version: 0}}
	if got, err := DecodeMapReply(AppendMapReply(nil, pages), nil); err != nil || fmt.Sprint(got) != fmt.Sprint(pages) {
		t.Fatalf("map reply: %v %v", got, err)
	}
	if _, err := DecodeMapReply(AppendMapReply(nil, pages)[:20], nil); !errors.Is(err, ErrLength) {
		t.Fatalf("short map reply: %v", err)
	}
	l := Location{Tier: gva.TierRemote, Speed: gva.SpeedFastDisk, Hops: 3, Owner: 12, Version: 99}
	var l2 Location
	if l2.Decode(l.Append(nil)) != nil || l2 != l {
		t.Fatalf("location round trip: %+v", l2)
	}
	ev := Event{Type: EventUpdated, Seq: 4, Page: page, Reason: 5, Version: 8, Offset: 16, Length: 8}
	b := ev.Append(nil)
	rh, body, err := DecodeReply(b)
	if err != nil || len(b) != EventLen {
		t.Fatal(err)
	}
	if got, err := DecodeEvent(&rh, body); err != nil || got != ev {
		t.Fatalf("event round trip: %+v %v", got, err)
	}
	if Pick(1, 3, 2, 5) != 3 || Pick(1, 1, 2, 5) != 0 || Pick(2, 2, 1, 9) != 2 {
		t.Fatal("Pick")
	}
	if s := string(AppendErrorText(nil, string(bytes.Repeat([]byte("é"), 200)))); len(s) > MaxText || len(s) == 0 {
		t.Fatalf("error text of %d bytes", len(s))
	}
}

func TestOpNames(t *testing.T) {
	if OpFetchAdd.String() != "fetch-add" || OpGPUKernelQuota.String() != "gpu-kernel-quota" || Op(70).String() != "gpu(70)" || Op(300).String() != "op(300)" {
		t.Fatal("op names")
	}
	if EventHostFault.String() != "host-fault" || EventHostFault.Mask() != 4 || EventType(9).String() != "event(9)" {
		t.Fatal("event names")
	}
}

// TestSeedCorpus checks the fuzz seed corpus in testdata/fuzz is there and
// holds no less than one file per op of validRequests (the seed files are
// those requests' encodings and some garbage).
func TestSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeRequest")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < len(validRequests()) {
		t.Fatalf("seed corpus %s: %d files, %v", dir, len(entries), err)
	}
}

func TestRingsReply(t *testing.T) {
	r := Rings{Entries: 64, SlotSize: 4160, MapSize: 4096 + 2*64*4160}
	b := r.Append(nil)
	var got Rings
	if len(b) != RingsLen || got.Decode(b) != nil || got != r {
		t.Fatalf("rings reply %x decodes as %+v", b, got)
	}
	if err := got.Decode(b[:15]); !errors.Is(err, ErrLength) {
		t.Fatalf("short rings reply: %v", err)
	}
	bad := AppendRequest(nil, &Request{Header: Header{Op: OpRings}, RingEntries: 1})
	bad[HeaderLen+8] = 1
	if err := DecodeRequest(bad, &Request{}); !errors.Is(err, ErrReserved) {
		t.Fatalf("rings request with reserved bits: %v", err)
	}
}
