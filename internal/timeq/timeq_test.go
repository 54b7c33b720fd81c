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

// TestReplace: replacing the first thing leaves the queue as a Pop then a
// Push would.
func TestReplace(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q, ref Queue[int]
	for i := range 3000 {
		k := Key{At: time.Duration(r.IntN(60)), Seq: uint64(i)}
		if q.Len() == 0 || r.IntN(3) == 0 {
			q.Push(k, i)
			ref.Push(k, i)
			continue
		}
		q.Replace(k, i)
		ref.Pop()
		ref.Push(k, i)
		if a, b := q.k[0], ref.k[0]; a != b {
			t.Fatalf("step %d: first %v, want %v", i, a, b)
		}
	}
	for ref.Len() > 0 {
		k1, v1 := q.Pop()
		k2, v2 := ref.Pop()
		if k1 != k2 || v1 != v2 {
			t.Fatalf("pop %v %d, want %v %d", k1, v1, k2, v2)
		}
	}
	if q.Len() != 0 {
		t.Fatal("queue longer than its reference")
	}
}
