package timeq

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestOrder: whatever the order of pushes, pops come by time, then by
// sequence number, and every value comes out once.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q Queue[int]
	var keys []Key
	for i := range 2000 {
		k := Key{At: time.Duration(r.IntN(50)), Seq: uint64(r.IntN(1 << 20))}
		keys = append(keys, k)
		q.Push(k, i)
		if i%7 == 0 { // pops interleaved with pushes
			mk, _ := q.Min()
			k2, v := q.Pop()
			if k2 != mk || keys[v] != k2 {
				t.Fatalf("pop %v (value %d, pushed at %v), min said %v", k2, v, keys[v], mk)
			}
			keys[v] = Key{At: -1}
		}
	}
	var rest []Key
	for q.Len() > 0 {
		k, v := q.Pop()
		if keys[v] != k {
			t.Fatalf("value %d came out at %v, pushed at %v", v, k, keys[v])
		}
		rest = append(rest, k)
	}
	if !slices.IsSortedFunc(rest, func(a, b Key) int {
		if a.Before(b) {
			return -1
		}
		if b.Before(a) {
			return 1
		}
		return 0
	}) {
		t.Fatal("pops out of order")
	}
	if _, ok := q.Min(); ok {
		t.Fatal("empty queue has a minimum")
	}
}
