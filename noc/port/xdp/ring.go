package xdp

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// The four AF_XDP rings share one shape: an array of entries whose length is
// a power of two, and producer, consumer and flags words shared with the
// kernel. Indices run freely over uint32 and wrap; an entry's slot is
// index & mask. Each ring has one producer and one consumer, one of which is
// the kernel.
//
// Memory ordering: a producer writes entries, then publishes them with an
// atomic store of the producer index (release); a consumer loads the
// producer index atomically (acquire) before reading entries, and hands the
// slots back with an atomic store of the consumer index after it has read
// them. Go's sync/atomic operations are sequentially consistent, which is
// at least the acquire/release pairing the kernel's smp_load_acquire and
// smp_store_release expect.
//
// Each side keeps cached copies of both indices and touches the shared
// words only when the cache runs dry (consumer side) or when it publishes a
// batch (producer side).

// ringWords are the words a ring shares with the kernel.
type ringWords struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
}

// checkRingSize reports whether n entries make a valid ring.
func checkRingSize(n uint32) error {
	if n == 0 || bits.OnesCount32(n) != 1 {
		return fmt.Errorf("xdp: ring size %d is not a power of two", n)
	}
	return nil
}

// producerRing is a ring this process fills and the kernel drains (fill,
// TX).
type producerRing[T any] struct {
	ringWords
	ring []T
	mask uint32
	// cachedProducer is the next index to write; published by submit.
	cachedProducer uint32
	// cachedConsumer is the kernel's consumer index plus len(ring), as last
	// loaded, so that cachedConsumer-cachedProducer is the free space.
	cachedConsumer uint32
}

func newProducerRing[T any](ring []T, w ringWords) producerRing[T] {
	n := uint32(len(ring))
	return producerRing[T]{
		ringWords:      w,
		ring:           ring,
		mask:           n - 1,
		cachedProducer: w.producer.Load(),
		cachedConsumer: w.consumer.Load() + n,
	}
}

// free returns the number of free slots, loading the kernel's consumer index
// only when fewer than want are known to be free.
func (r *producerRing[T]) free(want uint32) uint32 {
	if n := r.cachedConsumer - r.cachedProducer; n >= want {
		return n
	}
	r.cachedConsumer = r.consumer.Load() + uint32(len(r.ring))
	return r.cachedConsumer - r.cachedProducer
}

// put writes v in the next slot; the caller has checked free.
func (r *producerRing[T]) put(v T) {
	r.ring[r.cachedProducer&r.mask] = v
	r.cachedProducer++
}

// pending is the number of entries put but not yet submitted.
func (r *producerRing[T]) pending() uint32 {
	return r.cachedProducer - r.producer.Load()
}

// submit publishes the entries put so far to the kernel.
func (r *producerRing[T]) submit() {
	r.producer.Store(r.cachedProducer)
}

// needWakeup reports whether the kernel asked to be woken (XDP_USE_NEED_WAKEUP).
func (r *producerRing[T]) needWakeup() bool {
	return r.flags.Load()&ringNeedWakeup != 0
}

// consumerRing is a ring the kernel fills and this process drains (RX,
// completion).
type consumerRing[T any] struct {
	ringWords
	ring []T
	mask uint32
	// cachedProducer is the kernel's producer index as last loaded.
	cachedProducer uint32
	// cachedConsumer is the next index to read; handed back by release.
	cachedConsumer uint32
}

func newConsumerRing[T any](ring []T, w ringWords) consumerRing[T] {
	n := uint32(len(ring))
	return consumerRing[T]{
		ringWords:      w,
		ring:           ring,
		mask:           n - 1,
		cachedProducer: w.producer.Load(),
		cachedConsumer: w.consumer.Load(),
	}
}

// available returns the number of entries ready to read, loading the
// kernel's producer index only when none are known.
func (r *consumerRing[T]) available() uint32 {
	if n := r.cachedProducer - r.cachedConsumer; n > 0 {
		return n
	}
	return r.refresh()
}

// refresh loads the kernel's producer index.
func (r *consumerRing[T]) refresh() uint32 {
	r.cachedProducer = r.producer.Load()
	return r.cachedProducer - r.cachedConsumer
}

// peek returns the i-th ready entry; the caller has checked available.
func (r *consumerRing[T]) peek(i uint32) T {
	return r.ring[(r.cachedConsumer+i)&r.mask]
}

// consume marks n read entries as done.
func (r *consumerRing[T]) consume(n uint32) {
	r.cachedConsumer += n
}

// unreleased is the number of consumed entries not yet handed back.
func (r *consumerRing[T]) unreleased() uint32 {
	return r.cachedConsumer - r.consumer.Load()
}

// release hands the consumed slots back to the kernel.
func (r *consumerRing[T]) release() {
	r.consumer.Store(r.cachedConsumer)
}

// ringNeedWakeup is XDP_RING_NEED_WAKEUP.
const ringNeedWakeup = 1
