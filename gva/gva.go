package gva

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Sizes of pages and huge pages.
const (
	PageShift     = 12
	PageSize      = 1 << PageShift // 4 KiB
	HugePageShift = 21
	HugePageSize  = 1 << HugePageShift // 2 MiB
)

// Field layout of GVA.Hi (see the package documentation).
const (
	machineBits = 32
	refShift    = 32
	refBits     = 24
	flagShift   = 56

	machineMask = 1<<machineBits - 1
	refMask     = 1<<refBits - 1
	offsetMask  = PageSize - 1

	// MaxRefIndex is the largest ref index a GVA can carry.
	MaxRefIndex = refMask
)

// Flags are the per-page flags carried in GVA.Hi[63:56].
type Flags uint8

// Page flags.
const (
	FlagHuge Flags = 1 << 0 // the page is a 2 MiB huge page
)

// MachineIndex names a machine (host + DPU) of the fabric. It is also the
// node id of the machine's DPU on the NoC.
type MachineIndex uint32

// GVA is a 128-bit global virtual address.
type GVA struct {
	Hi, Lo uint64
}

// LVA is a virtual address inside one host process.
type LVA uint64

// PageNumber is the number of a page inside its machine (GVA.Lo >> 12).
type PageNumber uint64

// Version is a page version. The owner bumps it on every write; replicas
// apply versions in increasing order.
type Version uint64

// ErrSyntax is returned (wrapped) by Parse for text that is not a GVA.
var ErrSyntax = errors.New("gva: invalid syntax")

// New builds the GVA of byte offset off in page pn created on machine m,
// with ref index 0 (the primary copy) and the given flags.
func New(m MachineIndex, pn PageNumber, off uint16, f Flags) GVA {
	return GVA{
		Hi: uint64(f)<<flagShift | uint64(m),
		Lo: uint64(pn)<<PageShift | uint64(off)&offsetMask,
	}
}

// Machine returns the machine index where the page was created.
func (g GVA) Machine() MachineIndex { return MachineIndex(g.Hi & machineMask) }

// RefIndex returns the ref index: 0 for the primary copy.
func (g GVA) RefIndex() uint32 { return uint32(g.Hi >> refShift & refMask) }

// Flags returns the page flags.
func (g GVA) Flags() Flags { return Flags(g.Hi >> flagShift) }

// Huge reports whether the page is a huge page.
func (g GVA) Huge() bool { return g.Flags()&FlagHuge != 0 }

// Page returns the page number inside the machine.
func (g GVA) Page() PageNumber { return PageNumber(g.Lo >> PageShift) }

// Offset returns the byte offset inside the 4 KiB page.
func (g GVA) Offset() uint16 { return uint16(g.Lo & offsetMask) }

// WithRefIndex returns g with its ref index replaced.
func (g GVA) WithRefIndex(ref uint32) GVA {
	if ref > refMask {
		ref = refMask
	}
	g.Hi = g.Hi&^(refMask<<refShift) | uint64(ref)<<refShift
	return g
}

// WithOffset returns g with its byte offset replaced.
func (g GVA) WithOffset(off uint16) GVA {
	g.Lo = g.Lo&^offsetMask | uint64(off)&offsetMask
	return g
}

// ReplicaOf returns the address of holder's replica of the page at g.
func (g GVA) ReplicaOf(holder MachineIndex) GVA {
	return g.WithRefIndex(uint32(min(uint64(holder)+1, refMask)))
}

// Key returns the path cache key of g: the page's GVA with ref index and
// byte offset zeroed.
func (g GVA) Key() GVA {
	return GVA{Hi: g.Hi &^ (refMask << refShift), Lo: g.Lo &^ offsetMask}
}

// IsZero reports whether g is the zero address.
func (g GVA) IsZero() bool { return g.Hi == 0 && g.Lo == 0 }

// Less orders GVAs by (Hi, Lo).
func (g GVA) Less(o GVA) bool {
	if g.Hi != o.Hi {
		return g.Hi < o.Hi
	}
	return g.Lo < o.Lo
}

// Compare orders GVAs by (Hi, Lo): -1, 0 or +1, for slices.SortFunc and
// friends.
func Compare(a, b GVA) int {
	switch {
	case a == b:
		return 0
	case a.Less(b):
		return -1
	}
	return 1
}

// String returns the text form "gva:" + 32 hex digits.
func (g GVA) String() string {
	var b [4 + 32]byte
	return string(g.AppendText(b[:0]))
}

// AppendText appends the text form of g to b.
func (g GVA) AppendText(b []byte) []byte {
	const digits = "0123456789abcdef"
	b = append(b, "gva:"...)
	for _, w := range [2]uint64{g.Hi, g.Lo} {
		for s := 60; s >= 0; s -= 4 {
			b = append(b, digits[w>>uint(s)&0xf])
		}
	}
	return b
}

// MarshalText implements encoding.TextMarshaler.
func (g GVA) MarshalText() ([]byte, error) { return g.AppendText(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (g *GVA) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Parse parses the text form "gva:" + 32 hex digits.
func Parse(s string) (GVA, error) {
	rest, ok := strings.CutPrefix(s, "gva:")
	if !ok {
		return GVA{}, fmt.Errorf("%w: %q does not start with \"gva:\"", ErrSyntax, s)
	}
	if len(rest) != 32 {
		return GVA{}, fmt.Errorf("%w: %q has %d hex digits, want 32", ErrSyntax, s, len(rest))
	}
	var raw [16]byte
	if _, err := hex.Decode(raw[:], []byte(rest)); err != nil {
		return GVA{}, fmt.Errorf("%w: %q: %v", ErrSyntax, s, err)
	}
	var g GVA
	for i := 0; i < 8; i++ {
		g.Hi = g.Hi<<8 | uint64(raw[i])
		g.Lo = g.Lo<<8 | uint64(raw[8+i])
	}
	return g, nil
}

// PageAt is the key of the i-th page after g's page ([GVA.Key]: ref index
// and offset zeroed), the way the pages of an allocation follow its first.
func (g GVA) PageAt(i int) GVA {
	k := g.Key()
	k.Lo += uint64(i) * PageSize
	return k
}

// EachPage cuts the n bytes from g at page boundaries and calls fn with
// each piece's address and its place [from, to) in the range, in order,
// until fn fails.
func EachPage(g GVA, n int, fn func(at GVA, from, to int) error) error {
	for from := 0; from < n; {
		to := min(n, from+PageSize-int(g.Offset()))
		if err := fn(g, from, to); err != nil {
			return err
		}
		g.Lo += uint64(to - from)
		from = to
	}
	return nil
}
