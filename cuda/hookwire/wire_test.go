package hookwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

func TestWireRoundTrip(t *testing.T) {
	d := Device{Ordinal: 3, UUID: UUID{1, 2, 3, 15: 9}}
	body := AppendDevice(nil, d)
	if got, err := DecodeLimitRequest(body); err != nil || got != d {
		t.Fatalf("limit request: %+v %v", got, err)
	}
	for _, u := range []MemUpdate{
		{Kind: UpdateAlloc, Bytes: 4096, Total: 8192},
		{Kind: UpdateFree, Bytes: 4096, Total: 4096},
		{Kind: UpdateSync, Total: 1 << 40, Kernel: 3 * time.Hour},
	} {
		b := AppendUpdate(nil, d, u)
		if len(b) != UpdateRequest {
			t.Fatalf("update of %d bytes", len(b))
		}
		gd, gu, err := DecodeUpdate(b)
		if err != nil || gd != d || gu != u {
			t.Fatalf("update %+v: got %+v %+v %v", u, gd, gu, err)
		}
	}
	ask := TokenAsk{Want: 5 * time.Millisecond, Overuse: time.Millisecond}
	gd, ga, err := DecodeTokenAsk(AppendTokenAsk(nil, d, ask))
	if err != nil || gd != d || ga != ask {
		t.Fatalf("token ask: %+v %+v %v", gd, ga, err)
	}
	l := Limits{Memory: 1 << 30, MemoryUsed: 12345, Quota: 25, Window: 100 * time.Millisecond, Kernel: time.Minute, Others: 1 << 20}
	var l2 Limits
	if err := l2.Decode(l.Append(nil)); err != nil || l2 != l {
		t.Fatalf("limits: %+v %v", l2, err)
	}
	tok := Token{Grant: 3 * time.Millisecond, Wait: 0, Quota: 25, Window: 100 * time.Millisecond}
	var tok2 Token
	if err := tok2.Decode(tok.Append(nil)); err != nil || tok2 != tok {
		t.Fatalf("token: %+v %v", tok2, err)
	}
	if s := (UUID{0xfa, 0xce, 15: 1}).String(); s != "GPU-face0000-0000-0000-0000-000000000001" {
		t.Fatalf("uuid %s", s)
	}
}

func TestWireRejects(t *testing.T) {
	d := Device{Ordinal: 1}
	le := binary.LittleEndian
	valid := AppendUpdate(nil, d, MemUpdate{Kind: UpdateAlloc, Bytes: 1, Total: 1})
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(valid)
		f(b)
		return b
	}
	cases := map[string][]byte{
		"short":             valid[:UpdateRequest-1],
		"long":              append(bytes.Clone(valid), 0),
		"device reserved":   mutate(func(b []byte) { b[4] = 1 }),
		"device range":      mutate(func(b []byte) { le.PutUint32(b, HostDevice+1) }),
		"kind 0":            mutate(func(b []byte) { le.PutUint32(b[24:], 0) }),
		"kind 4":            mutate(func(b []byte) { le.PutUint32(b[24:], 4) }),
		"reserved":          mutate(func(b []byte) { b[28] = 1 }),
		"alloc total < len": mutate(func(b []byte) { le.PutUint64(b[32:], 2) }),
		"huge":              mutate(func(b []byte) { le.PutUint64(b[32:], MaxBytes+1); le.PutUint64(b[40:], MaxBytes+1) }),
		"kernel on alloc":   mutate(func(b []byte) { le.PutUint64(b[48:], 1) }),
		"sync with bytes":   AppendUpdate(nil, d, MemUpdate{Kind: UpdateSync, Bytes: 1, Total: 1}),
	}
	for name, b := range cases {
		if _, _, err := DecodeUpdate(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Packed allocations and frees that release nothing report 0 bytes.
	for _, u := range []MemUpdate{{Kind: UpdateFree}, {Kind: UpdateAlloc, Total: 4096}} {
		if _, _, err := DecodeUpdate(AppendUpdate(nil, d, u)); err != nil {
			t.Errorf("%v of 0 bytes: %v", u.Kind, err)
		}
	}
	if _, err := DecodeLimitRequest(valid); !errors.Is(err, ErrMalformed) {
		t.Errorf("limit request with an update body: %v", err)
	}
	ask := AppendTokenAsk(nil, d, TokenAsk{})
	le.PutUint64(ask[24:], uint64(MaxDuration)+1)
	if _, _, err := DecodeTokenAsk(ask); !errors.Is(err, ErrMalformed) {
		t.Errorf("token ask beyond a day: %v", err)
	}
	var l Limits
	if err := l.Decode(make([]byte, LimitsLen+1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("limits of the wrong length: %v", err)
	}
}

func TestProcsRoundTrip(t *testing.T) {
	p := Procs{{PID: 4242, Memory: 3 << 30}, {PID: 7, Memory: 0}}
	b := p.Append(nil)
	if len(b) != ProcsHeadLen+2*ProcLen {
		t.Fatalf("%d bytes", len(b))
	}
	var got Procs
	if err := got.Decode(b); err != nil || len(got) != 2 || got[0] != p[0] || got[1] != p[1] {
		t.Fatalf("%+v %v", got, err)
	}
	if err := got.Decode(b[:len(b)-1]); err == nil {
		t.Fatal("a short reply decoded")
	}
	long := make(Procs, MaxProcs+5)
	if err := got.Decode(long.Append(nil)); err != nil || len(got) != MaxProcs {
		t.Fatalf("%d of %d kept: %v", len(got), len(long), err)
	}
}
