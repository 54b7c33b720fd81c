package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestAtomicModelComparesAllBits: the model of the atomic words judges
// CAS on all 64 bits. A history whose CAS swapped a word that matched its
// expectation only in the low half is not linearizable, nor is a fetch-add
// whose carry did not reach the high half; the true histories are.
func TestAtomicModelComparesAllBits(t *testing.T) {
	const w = uint64(0xdead_beef_0000_0005)
	cas := func(call, ret int64, exp, arg, prev uint64, swapped bool) porcupine.Operation {
		return porcupine.Operation{Input: opInput{kind: 1, exp: exp, arg: arg}, Output: opOutput{prev: prev, swapped: swapped}, Call: call, Return: ret}
	}
	add := func(call, ret int64, d, prev uint64) porcupine.Operation {
		return porcupine.Operation{Input: opInput{kind: 2, arg: d}, Output: opOutput{prev: prev}, Call: call, Return: ret}
	}
	for _, c := range []struct {
		what string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"true CAS history", []porcupine.Operation{cas(0, 1, 0, w, 0, true), cas(2, 3, 0x1111_1111_0000_0005, 9, w, false), cas(4, 5, w, 9, w, true)}, true},
		{"CAS swapped on a low-half match", []porcupine.Operation{cas(0, 1, 0, w, 0, true), cas(2, 3, 0x1111_1111_0000_0005, 9, w, true)}, false},
		{"true carry", []porcupine.Operation{add(0, 1, 0xffff_ffff, 0), add(2, 3, 1, 0xffff_ffff), add(4, 5, 0, 1<<32)}, true},
		{"carry lost", []porcupine.Operation{add(0, 1, 0xffff_ffff, 0), add(2, 3, 1, 0xffff_ffff), add(4, 5, 0, 0)}, false},
	} {
		if got := porcupine.CheckOperations(atomicModel, c.ops); got != c.ok {
			t.Errorf("%s: linearizable = %v, want %v", c.what, got, c.ok)
		}
	}
}

// TestWorkloadValuesAreWide: the map from the workload's counts to word
// values keeps sums and equality (a seed's CASes succeed as they would on
// the counts), sets the high half, gives counts equal mod 4 the same low
// half, and carries.
func TestWorkloadValuesAreWide(t *testing.T) {
	golden := uint64(0x9e3779b97f4a7c15)
	if wideScale != golden<<30 {
		t.Fatalf("wideScale %#x", uint64(wideScale))
	}
	r := rand.New(rand.NewPCG(1, 2))
	carried := false
	for range 1000 {
		a, b := r.Uint64N(1<<34), r.Uint64N(1<<34)
		if wide(a)+wide(b) != wide(a+b) {
			t.Fatalf("wide(%d)+wide(%d) != wide(%d)", a, b, a+b)
		}
		if (wide(a) == wide(b)) != (a == b) {
			t.Fatalf("wide(%d) = %#x, wide(%d) = %#x", a, wide(a), b, wide(b))
		}
		if (uint32(wide(a)) == uint32(wide(b))) != (a%4 == b%4) {
			t.Fatalf("low halves of wide(%d), wide(%d): %#x %#x", a, b, uint32(wide(a)), uint32(wide(b)))
		}
		if (uint64(uint32(wide(a)))+uint64(uint32(wide(b))))>>32 != 0 {
			carried = true
		}
	}
	if !carried {
		t.Fatal("no sum carried into the high half")
	}
	for v := uint64(1); v < 6; v++ {
		if wide(v)>>32 == 0 {
			t.Fatalf("wide(%d) = %#x leaves the high half clear", v, wide(v))
		}
	}
}
