package ring

// Every use of package unsafe in package ring lives in this file: the views
// of the mapping's index and flag words as atomics.

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// wordAt views the 4-byte word at off in mem as an atomic. The caller keeps
// mem mapped for as long as it uses the word.
func wordAt(mem []byte, off int) (*atomic.Uint32, error) {
	if off < 0 || off%4 != 0 || off+4 > len(mem) {
		return nil, fmt.Errorf("%w: word at %d outside a %d-byte map", ErrLayout, off, len(mem))
	}
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off])), nil
}

// ringWords views the three words of a ring.
func ringWords(mem []byte, producer, consumer, flags int) (words, error) {
	var w words
	var err error
	if w.producer, err = wordAt(mem, producer); err != nil {
		return w, err
	}
	if w.consumer, err = wordAt(mem, consumer); err != nil {
		return w, err
	}
	w.flags, err = wordAt(mem, flags)
	return w, err
}

// seqWord views a slot's sequence word (bytes 4..8 of the slot; slots are
// 64-byte aligned in a page-aligned mapping).
func seqWord(slot []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&slot[slotSeq]))
}
