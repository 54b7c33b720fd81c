package gva

import (
	"errors"
	"fmt"
	"testing"
)

func TestFields(t *testing.T) {
	g := New(0xdeadbeef, 0x123456789, 0xabc, FlagHuge)
	if g.Machine() != 0xdeadbeef || g.Page() != 0x123456789 || g.Offset() != 0xabc || !g.Huge() || g.RefIndex() != 0 {
		t.Fatalf("fields of %v wrong: m=%x p=%x off=%x huge=%v ref=%d", g, g.Machine(), g.Page(), g.Offset(), g.Huge(), g.RefIndex())
	}
	r := g.ReplicaOf(7)
	if r.RefIndex() != 8 || r.Machine() != g.Machine() || r.Page() != g.Page() || !r.Huge() {
		t.Fatalf("replica %v lost fields", r)
	}
	if r.Key() != g.WithOffset(0) {
		t.Fatalf("key of replica %v = %v, want %v", r, r.Key(), g.WithOffset(0))
	}
	if big := g.ReplicaOf(1 << 30); big.RefIndex() != MaxRefIndex {
		t.Fatalf("saturating ref index = %d", big.RefIndex())
	}
}

func TestTextRoundTrip(t *testing.T) {
	for _, g := range []GVA{{}, {Hi: 7, Lo: 0x1000}, {Hi: ^uint64(0), Lo: ^uint64(0)}, New(1<<20, 42, 8, 0)} {
		s := g.String()
		if len(s) != 36 {
			t.Fatalf("%q: length %d", s, len(s))
		}
		back, err := Parse(s)
		if err != nil || back != g {
			t.Fatalf("Parse(%q) = %v, %v; want %v", s, back, err, g)
		}
	}
	if g, err := Parse("gva:00000000000000070000000000001000"); err != nil || g != (GVA{Hi: 7, Lo: 0x1000}) {
		t.Fatalf("parse known = %v %v", g, err)
	}
	if g, err := Parse("gva:ABCDEF00000000000000000000000001"); err != nil || g.Hi != 0xabcdef0000000000 || g.Lo != 1 {
		t.Fatalf("upper case = %v %v", g, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "gva:", "0x00", "gva:0000000000000007000000000000100", "gva:000000000000000700000000000010000", "gva:0000000000000007000000000000100g", "GVA:00000000000000070000000000001000"} {
		if _, err := Parse(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) err = %v, want ErrSyntax", s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("gva:00000000000000070000000000001000")
	f.Add("gva:zz")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := Parse(s)
		if err != nil {
			return
		}
		if back, err := Parse(g.String()); err != nil || back != g {
			t.Fatalf("round trip of %q: %v %v", s, back, err)
		}
	})
}

func TestTiers(t *testing.T) {
	if TierForHops(0) != TierMachine || TierForHops(1) != TierNeighbour || TierForHops(5) != TierRemote {
		t.Fatal("TierForHops")
	}
	if TierRemote.String() != "remote" || Tier(9).String() != "tier(9)" || SpeedFastDisk.String() != "fast-disk" {
		t.Fatal("names")
	}
}

// TestAllows: the file-mode rule, class by class, and root.
func TestAllows(t *testing.T) {
	a := Attr{UID: 10, GID: 20, Mode: 0o640}
	for _, tc := range []struct {
		c    Cred
		need uint32
		want bool
	}{
		{Cred{UID: 10, GID: 99}, AccessRead | AccessWrite, true},
		{Cred{UID: 11, GID: 20}, AccessRead, true},
		{Cred{UID: 11, GID: 20}, AccessWrite, false},
		{Cred{UID: 11, GID: 99, Groups: []uint32{5, 20}}, AccessRead, true},
		{Cred{UID: 11, GID: 99, Groups: []uint32{5}}, AccessRead, false},
		{Cred{UID: 0, GID: 99}, AccessRead | AccessWrite, true},
		// the owner class decides for the owner, even when other is wider
		{Cred{UID: 10}, AccessRead, true},
	} {
		if got := Allows(a, tc.c, tc.need); got != tc.want {
			t.Errorf("Allows(%+v, %+v, %d) = %v, want %v", a, tc.c, tc.need, got, tc.want)
		}
	}
	if Allows(Attr{UID: 10, Mode: 0o007}, Cred{UID: 10}, AccessRead) {
		t.Error("the owner got the other class's bits")
	}
}

// TestPageAt: the i-th page after g's, as a key, whatever g's offset and
// ref index.
func TestPageAt(t *testing.T) {
	g := New(7, 40, 123, FlagHuge).WithRefIndex(3)
	if got, want := g.PageAt(2), New(7, 42, 0, FlagHuge); got != want {
		t.Fatalf("PageAt(2) = %v, want %v", got, want)
	}
	if g.PageAt(0) != g.Key() {
		t.Fatal("PageAt(0) is not the key")
	}
}

// TestEachPage: a range from inside a page to inside another is cut at
// every page boundary, in order; fn's error ends the walk.
func TestEachPage(t *testing.T) {
	g := GVA{Hi: 7, Lo: 0x1000 + 4000}
	var got []string
	err := EachPage(g, 96+PageSize+5, func(at GVA, from, to int) error {
		got = append(got, fmt.Sprintf("%x:%d-%d", at.Lo, from, to))
		return nil
	})
	if want := "[1fa0:0-96 2000:96-4192 3000:4192-4197]"; err != nil || fmt.Sprint(got) != want {
		t.Fatalf("pieces %v (%v), want %s", got, err, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := EachPage(g, 3*PageSize, func(GVA, int, int) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("walk went on after an error: %d calls, %v", n, err)
	}
}
