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

type item[T any] struct {
	k Key
	v T
}

// Queue is a binary min-heap by Key. The zero value is empty; once it has
// grown, pushing allocates nothing.
type Queue[T any] struct {
	h []item[T]
}

// Len is the number of things queued.
func (q *Queue[T]) Len() int { return len(q.h) }

// Min returns the first key; false when the queue is empty.
func (q *Queue[T]) Min() (Key, bool) {
	if len(q.h) == 0 {
		return Key{}, false
	}
	return q.h[0].k, true
}

// Push queues v at k.
func (q *Queue[T]) Push(k Key, v T) {
	q.h = append(q.h, item[T]{k, v})
	h := q.h
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].k.Before(h[p].k) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// Pop takes the first thing out; the queue must not be empty.
func (q *Queue[T]) Pop() (Key, T) {
	h := q.h
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = item[T]{}
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].k.Before(h[l].k) {
			m = r
		}
		if !h[m].k.Before(h[i].k) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.h = h
	return top.k, top.v
}
