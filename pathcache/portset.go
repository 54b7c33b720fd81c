package pathcache

import (
	"iter"
	"math/bits"
	"strconv"
	"strings"

	"github.com/aitherion/dpu/noc"
)

// MaxPort is the largest ordinary port id a PortSet can hold. A DPU has a
// handful of ports (4–8); ids up to MaxPort leave ample room.
const MaxPort noc.PortID = 62

const localBit = 63

// PortSet is a set of port ids (0..MaxPort and noc.LocalPort) in one machine
// word: the down ports of a path cache entry. The zero value is empty.
type PortSet uint64

func portBit(p noc.PortID) (uint64, bool) {
	switch {
	case p <= MaxPort:
		return 1 << p, true
	case p == noc.LocalPort:
		return 1 << localBit, true
	}
	return 0, false
}

// Add returns s with p added; ok is false (s unchanged) when p cannot be
// held (noc.NoPort or an id above MaxPort).
func (s PortSet) Add(p noc.PortID) (PortSet, bool) {
	b, ok := portBit(p)
	return s | PortSet(b), ok
}

// Remove returns s without p.
func (s PortSet) Remove(p noc.PortID) PortSet {
	b, _ := portBit(p)
	return s &^ PortSet(b)
}

// Has reports whether p is in s.
func (s PortSet) Has(p noc.PortID) bool {
	b, ok := portBit(p)
	return ok && uint64(s)&b != 0
}

// Len returns the number of ports in s.
func (s PortSet) Len() int { return bits.OnesCount64(uint64(s)) }

// Empty reports whether s has no port.
func (s PortSet) Empty() bool { return s == 0 }

// Without returns s minus p: the ports a write arriving on p is propagated to.
func (s PortSet) Without(p noc.PortID) PortSet { return s.Remove(p) }

// All yields the ports of s in increasing id order, noc.LocalPort last.
func (s PortSet) All() iter.Seq[noc.PortID] {
	return func(yield func(noc.PortID) bool) {
		for w := uint64(s); w != 0; w &= w - 1 {
			i := bits.TrailingZeros64(w)
			p := noc.PortID(i)
			if i == localBit {
				p = noc.LocalPort
			}
			if !yield(p) {
				return
			}
		}
	}
}

// String lists the ports: "p0,p3,local"; "-" when empty.
func (s PortSet) String() string {
	if s == 0 {
		return "-"
	}
	var b strings.Builder
	for p := range s.All() {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(portName(p))
	}
	return b.String()
}

func portName(p noc.PortID) string {
	switch p {
	case noc.NoPort:
		return "-"
	case noc.LocalPort:
		return "local"
	}
	return "p" + strconv.Itoa(int(p))
}
