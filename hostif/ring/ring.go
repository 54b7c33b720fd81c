package ring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Both rings share one shape: entries slots of a fixed size and three
// shared words (producer index, consumer index, flags). Indices run freely
// over uint32 and wrap; a slot is index & mask.
//
// Memory ordering: a producer writes a slot, then publishes it with an
// atomic store of the producer index (release); a consumer loads the
// producer index atomically (acquire) before reading slots, and hands them
// back with an atomic store of the consumer index after it copied them out
// (release), which the producer loads (acquire) before reusing them. Go's
// sync/atomic operations are sequentially consistent, which is also the
// store–load ordering the wakeup protocol needs (a side stores its index,
// then loads the other side's flag; the other side stores its flag, then
// loads the index).
//
// Every index loaded from shared memory is checked against this side's own
// private index before use: a producer index more than entries ahead of
// the consumer's, or a consumer index ahead of the producer's or more than
// entries behind, is ErrCorrupt.

// words are one ring's shared words inside the mapping.
type words struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
}

// slots are one ring's slots inside the mapping.
type slots struct {
	mem     []byte // entries × size bytes
	entries uint32
	mask    uint32
	size    uint32
}

func newSlots(mem []byte, c Config) slots {
	return slots{mem: mem, entries: c.Entries, mask: c.Entries - 1, size: c.SlotSize}
}

// slot returns the slot of index i, capacity-limited to the slot.
func (s *slots) slot(i uint32) []byte {
	off := int(i&s.mask) * int(s.size)
	return s.mem[off : off+int(s.size) : off+int(s.size)]
}

// producer is the side of a ring that fills slots.
type producer struct {
	words
	slots
	// next is the next index to write; published by publish.
	next uint32
	// published is the producer index as last stored.
	published uint32
	// limit is the consumer's index plus entries as last loaded:
	// limit - next slots are known to be free.
	limit uint32
}

func newProducer(w words, s slots) producer {
	p := producer{words: w, slots: s}
	p.next = w.producer.Load()
	p.published = p.next
	p.limit = p.next // nothing known free until the consumer index is loaded
	return p
}

// free returns the number of free slots, loading the consumer's index only
// when none is known to be free.
func (p *producer) free() (uint32, error) {
	if n := p.limit - p.next; n > 0 {
		return n, nil
	}
	cons := p.consumer.Load()
	if p.next-cons > p.entries {
		return 0, fmt.Errorf("%w: consumer index %d, producer at %d", ErrCorrupt, cons, p.next)
	}
	p.limit = cons + p.entries
	return p.limit - p.next, nil
}

// put writes msg into the next slot and marks it with its sequence word
// (a consumer polling the slot may take it from then on); the caller
// checked free and the size.
func (p *producer) put(msg []byte) {
	s := p.slot(p.next)
	binary.LittleEndian.PutUint32(s[0:], uint32(len(msg)))
	copy(s[SlotHeader:], msg)
	storeRelease(seqWord(s), p.next+1)
	p.next++
}

// unpublished reports whether slots were put since the last publish.
func (p *producer) unpublished() bool { return p.next != p.published }

// publish hands the slots put so far to the consumer.
func (p *producer) publish() {
	p.producer.Store(p.next)
	p.published = p.next
}

// consumer is the side of a ring that drains slots.
type consumer struct {
	words
	slots
	// next is the next index to read; handed back by release.
	next uint32
	// released is the consumer index as last stored.
	released uint32
	// ready is the producer's index as last loaded and checked.
	ready uint32
}

func newConsumer(w words, s slots) consumer {
	c := consumer{words: w, slots: s}
	c.next = w.consumer.Load()
	c.released, c.ready = c.next, c.next
	return c
}

// available returns the number of slots ready to read. When none are
// known it looks at the next slot's sequence word, not at the producer's
// index: the slot's own cache line brings the message with the news.
func (c *consumer) available() uint32 {
	if n := c.ready - c.next; n > 0 {
		return n
	}
	if seqWord(c.slot(c.next)).Load() == c.next+1 {
		c.ready = c.next + 1
		return 1
	}
	return 0
}

// refresh loads and checks the producer's index. It may lag behind the
// slots the consumer took through their sequence words (the producer
// publishes the index after the slots), by at most entries.
func (c *consumer) refresh() (uint32, error) {
	prod := c.producer.Load()
	n := prod - c.next
	if n > c.entries {
		if c.next-prod <= c.entries {
			c.ready = c.next
			return 0, nil
		}
		return 0, fmt.Errorf("%w: producer index %d, consumer at %d, %d entries", ErrCorrupt, prod, c.next, c.entries)
	}
	c.ready = prod
	return n, nil
}

// take copies the next ready message into dst; the caller checked
// available. The sequence word must name the slot's index (a producer
// index that ran ahead of the slots is corruption), and the length word is
// loaded once and checked before the copy, so whatever the peer writes
// meanwhile can only change the bytes copied.
func (c *consumer) take(dst []byte) (int, error) {
	s := c.slot(c.next)
	if seq := seqWord(s).Load(); seq != c.next+1 {
		return 0, fmt.Errorf("%w: slot %d has sequence %d, want %d", ErrCorrupt, c.next, seq, c.next+1)
	}
	n := binary.LittleEndian.Uint32(s[0:])
	if n == 0 || n > c.size-SlotHeader {
		return 0, fmt.Errorf("%w: slot %d holds a %d-byte message (1..%d)", ErrCorrupt, c.next, n, c.size-SlotHeader)
	}
	if int(n) > len(dst) {
		return 0, fmt.Errorf("%w: %d-byte message, %d-byte buffer", ErrShortBuffer, n, len(dst))
	}
	copy(dst, s[SlotHeader:SlotHeader+n])
	c.next++
	return int(n), nil
}

// unreleased reports whether slots were taken since the last release.
func (c *consumer) unreleased() bool { return c.next != c.released }

// release hands the slots taken so far back to the producer.
func (c *consumer) release() {
	c.consumer.Store(c.next)
	c.released = c.next
}
