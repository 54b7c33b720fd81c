package coherence

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/aitherion/dpu/gva"
)

// TestMemStoreIn: a store over provided memory hands out pages of that
// memory only, zeroed, at most len/PageSize of them, and reuses released
// ones.
func TestMemStoreIn(t *testing.T) {
	backing := make([]byte, 3*gva.PageSize+100)
	s := NewMemStoreIn(backing)
	if s.Cap() != 3 {
		t.Fatalf("Cap = %d, want 3", s.Cap())
	}
	inside := func(p []byte) bool {
		lo := uintptr(unsafe.Pointer(&backing[0]))
		at := uintptr(unsafe.Pointer(&p[0]))
		return at >= lo && at+uintptr(len(p)) <= lo+uintptr(3*gva.PageSize) && cap(p) == gva.PageSize
	}
	key := func(i int) gva.GVA { return gva.New(0, gva.PageNumber(i+1), 0, 0) }
	for i := range 3 {
		p, err := s.Alloc(key(i), false)
		if err != nil || len(p) != gva.PageSize || !inside(p) {
			t.Fatalf("page %d: len %d, inside %v, %v", i, len(p), err == nil && inside(p), err)
		}
		p[0] = byte(i + 1)
	}
	if _, err := s.Alloc(key(3), false); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a fourth page: %v, want ErrNoSpace", err)
	}
	s.Release(key(1))
	p, err := s.Alloc(key(4), false)
	if err != nil || !inside(p) || p[0] != 0 {
		t.Fatalf("a page after a release: inside %v, first byte %d, %v", err == nil && inside(p), p[0], err)
	}
	if q, _ := s.Lookup(key(0)); q[0] != 1 {
		t.Fatalf("page 0 lost its content")
	}
}
