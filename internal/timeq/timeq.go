package timeq

import "time"

// Key orders a queue: by At, then by Seq.
type Key struct {
	At  time.Duration
	Seq uint64
}

// Before reports whether k comes before o.
func (k Key) Before(o Key) bool {
	if k.At != o.At {
		return k.At < o.At
	}
	return k.Seq < o.Seq
}

// Queue is a 4-ary min-heap by Key. The keys sit in a slice of their own,
// apart from the values: the four children of a node are one cache line
// of keys, so a pop reads about half as many lines as a binary heap of
// (key, value) items would, which is what counts when millions of things
// are queued (a large fabric's routing flood). Sifting moves a hole, not
// pairs of items. The zero value is empty; once it has grown, pushing
// allocates nothing.
type Queue[T any] struct {
	k []Key
	v []T
}

const arity = 4

// Len is the number of things queued.
func (q *Queue[T]) Len() int { return len(q.k) }

// Min returns the first key; false when the queue is empty.
func (q *Queue[T]) Min() (Key, bool) {
	if len(q.k) == 0 {
		return Key{}, false
	}
	return q.k[0], true
}

// Push queues v at k.
func (q *Queue[T]) Push(k Key, v T) {
	q.k = append(q.k, k)
	q.v = append(q.v, v)
	ks, vs := q.k, q.v
	i := len(ks) - 1
	for i > 0 {
		p := (i - 1) / arity
		if !k.Before(ks[p]) {
			break
		}
		ks[i], vs[i] = ks[p], vs[p]
		i = p
	}
	ks[i], vs[i] = k, v
}

// Pop takes the first thing out; the queue must not be empty.
func (q *Queue[T]) Pop() (Key, T) {
	ks, vs := q.k, q.v
	topK, topV := ks[0], vs[0]
	n := len(ks) - 1
	lastK, lastV := ks[n], vs[n]
	var zero T
	vs[n] = zero
	ks, vs = ks[:n], vs[:n]
	q.k, q.v = ks, vs
	if n == 0 {
		return topK, topV
	}
	i := 0
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+arity && j < n; j++ {
			if ks[j].Before(ks[m]) {
				m = j
			}
		}
		if !ks[m].Before(lastK) {
			break
		}
		ks[i], vs[i] = ks[m], vs[m]
		i = m
	}
	ks[i], vs[i] = lastK, lastV
	return topK, topV
}
