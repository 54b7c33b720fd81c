package admit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

var (
	testBounds = Bounds{Op: 10 * time.Second, Lock: 5 * time.Second, MaxLock: 30 * time.Second, DefaultMode: 0o600}
	testCred   = coherence.Cred{UID: 1000, GID: 100, Groups: []uint32{7}}
	page       = gva.New(3, 42, 0, 0)
)

func TestRequestOfEachOperation(t *testing.T) {
	for _, tc := range []struct {
		in   wire.Request
		want coherence.Request
	}{
		{wire.Request{Header: wire.Header{Op: wire.OpAlloc}, Bytes: 3*wire.PageSize - 1},
			coherence.Request{Op: coherence.HostAlloc, Pages: 3, Attr: gva.Attr{UID: 1000, GID: 100, Mode: 0o600}, Timeout: 10 * time.Second}},
		{wire.Request{Header: wire.Header{Op: wire.OpAlloc}, Bytes: 1, Mode: 0o640},
			coherence.Request{Op: coherence.HostAlloc, Pages: 1, Attr: gva.Attr{UID: 1000, GID: 100, Mode: 0o640}, Timeout: 10 * time.Second}},
		{wire.Request{Header: wire.Header{Op: wire.OpFree, GVA: page}},
			coherence.Request{Op: coherence.HostFree, GVA: page, Timeout: 10 * time.Second}},
		{wire.Request{Header: wire.Header{Op: wire.OpLoad, GVA: page.WithOffset(8)}, Len: 16},
			coherence.Request{Op: coherence.HostLoad, GVA: page.WithOffset(8), Len: 16}},
		{wire.Request{Header: wire.Header{Op: wire.OpStore, GVA: page.WithOffset(8)}, Data: []byte{1, 2}},
			coherence.Request{Op: coherence.HostStore, GVA: page.WithOffset(8), Data: []byte{1, 2}}},
		{wire.Request{Header: wire.Header{Op: wire.OpCAS, GVA: page.WithOffset(16)}, Expected: 1, Desired: 2},
			coherence.Request{Op: coherence.HostCAS, GVA: page.WithOffset(16), Expected: 1, Operand: 2}},
		{wire.Request{Header: wire.Header{Op: wire.OpFetchAdd, GVA: page.WithOffset(16)}, Delta: 5},
			coherence.Request{Op: coherence.HostFetchAdd, GVA: page.WithOffset(16), Operand: 5}},
		{wire.Request{Header: wire.Header{Op: wire.OpWhere, GVA: page.WithOffset(1)}},
			coherence.Request{Op: coherence.HostWhere, GVA: page.WithOffset(1)}},
		{wire.Request{Header: wire.Header{Op: wire.OpAcquire, GVA: page}},
			coherence.Request{Op: coherence.HostAcquire, GVA: page, Timeout: 5 * time.Second}},
		{wire.Request{Header: wire.Header{Op: wire.OpLock, GVA: page}, TimeoutMS: 60_000, Flags: wire.LockTry},
			coherence.Request{Op: coherence.HostLock, GVA: page, Try: true, Timeout: 30 * time.Second}},
		{wire.Request{Header: wire.Header{Op: wire.OpLock, GVA: page}, TimeoutMS: 250},
			coherence.Request{Op: coherence.HostLock, GVA: page, Timeout: 250 * time.Millisecond}},
		{wire.Request{Header: wire.Header{Op: wire.OpRelease, GVA: page}},
			coherence.Request{Op: coherence.HostRelease, GVA: page, Timeout: 10 * time.Second}},
		{wire.Request{Header: wire.Header{Op: wire.OpUnlock, GVA: page}},
			coherence.Request{Op: coherence.HostUnlock, GVA: page, Timeout: 10 * time.Second}},
	} {
		got, err := Request(&tc.in, testCred, testBounds)
		if err != nil {
			t.Fatalf("%s: %v", tc.in.Op, err)
		}
		tc.want.Cred = testCred
		if got.Op != tc.want.Op || got.GVA != tc.want.GVA || got.Pages != tc.want.Pages || got.Attr != tc.want.Attr ||
			got.Len != tc.want.Len || !bytes.Equal(got.Data, tc.want.Data) || got.Expected != tc.want.Expected ||
			got.Operand != tc.want.Operand || got.Try != tc.want.Try || got.Timeout != tc.want.Timeout ||
			got.Cred.UID != testCred.UID || got.Cred.GID != testCred.GID || len(got.Cred.Groups) != 1 {
			t.Errorf("%s: got %+v, want %+v", tc.in.Op, got, tc.want)
		}
	}
}

func TestRequestRefuses(t *testing.T) {
	huge := wire.Request{Header: wire.Header{Op: wire.OpAlloc}, Bytes: 1, Flags: wire.AllocHuge}
	if _, err := Request(&huge, testCred, testBounds); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("huge alloc: %v, want EOPNOTSUPP", err)
	}
	for _, op := range []wire.Op{wire.OpHello, wire.OpMap, wire.OpUnmap, wire.OpTranslate, wire.OpSubscribe, wire.OpRings, wire.OpMaps, wire.OpClock} {
		if Core(op) != 0 {
			t.Errorf("%s has a core operation", op)
		}
		r := wire.Request{Header: wire.Header{Op: op}}
		if _, err := Request(&r, testCred, testBounds); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", op, err)
		}
	}
	if Core(wire.Op(0xffff)) != 0 {
		t.Error("an op beyond the table has a core operation")
	}
}

// FuzzAdmit: whatever the host wire's decoder accepts, admission turns
// into a request the core can bound and check: it never panics, names
// the sender's user, and stays within the wire's limits and the node's
// bounds. Seeds: the wire decoder's corpus (hostif/wire's
// testdata/fuzz/FuzzDecodeRequest), the same bytes the socket and the
// rings decode.
func FuzzAdmit(f *testing.F) {
	dir := filepath.Join("..", "..", "hostif", "wire", "testdata", "fuzz", "FuzzDecodeRequest")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		f.Fatalf("the wire's corpus: %v (%d files)", err, len(ents))
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") {
			f.Fatalf("%s: not a corpus file of one []byte", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			f.Fatalf("%s: %v", e.Name(), err)
		}
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r wire.Request
		if wire.DecodeRequest(b, &r) != nil {
			return
		}
		if r.Op == wire.OpStoreBulk || r.Op == wire.OpLoadBulk {
			checkBulk(t, &r)
			return
		}
		if Core(r.Op) == 0 {
			return
		}
		cr, err := Request(&r, testCred, testBounds)
		if err != nil {
			if !errors.Is(err, syscall.EOPNOTSUPP) {
				t.Fatalf("%s refused with %v", r.Op, err)
			}
			return
		}
		if cr.Op != Core(r.Op) || cr.Cred.UID != testCred.UID || cr.Cred.GID != testCred.GID {
			t.Fatalf("%s admitted as %v for uid %d", r.Op, cr.Op, cr.Cred.UID)
		}
		if cr.Timeout < 0 || cr.Timeout > max(testBounds.Op, testBounds.MaxLock) {
			t.Fatalf("%s bounded by %v", r.Op, cr.Timeout)
		}
		switch cr.Op {
		case coherence.HostAlloc:
			if cr.Pages < 1 || cr.Pages > wire.MaxAllocBytes/wire.PageSize || cr.Attr.UID != testCred.UID || cr.Attr.Mode&^wire.ModeMask != 0 || cr.Attr.Mode == 0 {
				t.Fatalf("alloc of %d pages with %+v", cr.Pages, cr.Attr)
			}
		case coherence.HostLoad:
			if cr.Len < 1 || int(cr.GVA.Offset())+cr.Len > wire.PageSize {
				t.Fatalf("load of %d at %d", cr.Len, cr.GVA.Offset())
			}
		case coherence.HostStore:
			if len(cr.Data) < 1 || int(cr.GVA.Offset())+len(cr.Data) > wire.PageSize {
				t.Fatalf("store of %d at %d", len(cr.Data), cr.GVA.Offset())
			}
		case coherence.HostFree, coherence.HostAcquire, coherence.HostRelease, coherence.HostLock, coherence.HostUnlock:
			if cr.GVA != cr.GVA.Key() {
				t.Fatalf("%v of %v, not a page", cr.Op, cr.GVA)
			}
		}
	})
}

// checkBulk: an admitted bulk transfer's pieces cover its range exactly,
// in order, each inside one page, each the core's store or load of its
// length as the user.
func checkBulk(t *testing.T, r *wire.Request) {
	pieces, reqs, err := Bulk(r, testCred, testBounds, nil, nil)
	if err != nil {
		t.Fatalf("%s refused with %v", r.Op, err)
	}
	want := coherence.HostLoad
	if r.Op == wire.OpStoreBulk {
		want = coherence.HostStore
	}
	at := 0
	for i, p := range pieces {
		cr := reqs[i]
		if p.Start != at || p.Len < 1 || int(p.GVA.Offset())+p.Len > wire.PageSize || p.GVA.Lo != r.GVA.Lo+uint64(at) {
			t.Fatalf("piece %d of %s at %v+%d: %+v", i, r.Op, r.GVA, r.Len, p)
		}
		if cr.Op != want || cr.GVA != p.GVA || cr.Cred.UID != testCred.UID || (want == coherence.HostLoad && cr.Len != p.Len) ||
			(want == coherence.HostStore && len(cr.Data) != p.Len) {
			t.Fatalf("piece %d of %s admitted as %+v", i, r.Op, cr)
		}
		at += p.Len
	}
	if at != int(r.Len) || len(reqs) != len(pieces) {
		t.Fatalf("%s of %d bytes cut into %d bytes, %d pieces and %d requests", r.Op, r.Len, at, len(pieces), len(reqs))
	}
}

// TestBulkCutsAtPages: a transfer from inside one page to inside another
// is cut at every page boundary; a request that is no bulk transfer is
// refused.
func TestBulkCutsAtPages(t *testing.T) {
	g := gva.GVA{Hi: 1 << 32, Lo: 0x1000 + 4000}
	r := wire.Request{Header: wire.Header{Op: wire.OpStoreBulk, GVA: g}, Len: 96 + 2*wire.PageSize + 5}
	pieces, _, err := Bulk(&r, testCred, testBounds, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Piece{{g, 0, 96}, {gva.GVA{Hi: g.Hi, Lo: 0x2000}, 96, wire.PageSize}, {gva.GVA{Hi: g.Hi, Lo: 0x3000}, 96 + wire.PageSize, wire.PageSize}, {gva.GVA{Hi: g.Hi, Lo: 0x4000}, 96 + 2*wire.PageSize, 5}}
	if fmt.Sprint(pieces) != fmt.Sprint(want) {
		t.Fatalf("pieces %v, want %v", pieces, want)
	}
	checkBulk(t, &r)
	if _, _, err := Bulk(&wire.Request{Header: wire.Header{Op: wire.OpStore, GVA: g}}, testCred, testBounds, nil, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a store as a bulk transfer: %v", err)
	}
}
