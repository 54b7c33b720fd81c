package ring

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/aitherion/dpu/hostif/wire"
)

// The layout of the shared memfd (hostif/PROTOCOL.md §12). All integers are
// little-endian; the index and flag words are accessed atomically.
//
//	off   len  field                               written by
//	0     4    magic "DPUR" (0x52555044)           agent, at setup
//	4     2    layout version (LayoutVersion, 2)   agent, at setup
//	6     2    reserved, 0
//	8     4    entries per ring (a power of two)   agent, at setup
//	12    4    slot size in bytes                  agent, at setup
//	16    8    size of the whole memfd             agent, at setup
//	24    104  reserved, 0
//	128   4    submission producer index           host
//	256   4    submission consumer index           agent
//	384   4    submission flags (NEED_WAKEUP)      agent
//	512   4    completion producer index           agent
//	640   4    completion consumer index           host
//	768   4    completion flags (HOST_WAITING)     host
//	4096       submission slots, entries × slot size
//	...        completion slots, entries × slot size
//
// Each index and flag word sits alone in a 128-byte block so that the two
// sides never write the same cache line (nor an adjacent-line prefetch
// pair). A slot is a 4-byte message length, a 4-byte sequence word, then
// the message. The producer writes the length and the message, then the
// sequence word (the slot's index + 1, a release store), then the
// producer index. A consumer waiting for slot i polls that slot's
// sequence word for i + 1 rather than the producer index: the message and
// the sign that it is there share one cache line, so a request crosses
// between the CPUs as one line each way instead of two (the index is for
// the wakeup protocol and for consumers that come back from sleep).
const (
	Magic = 0x52555044 // "DPUR" little-endian
	// LayoutVersion 2 added the slot's sequence word (version 1 left it
	// zero and had consumers poll the producer index).
	LayoutVersion = 2

	offMagic    = 0
	offVersion  = 4
	offEntries  = 8
	offSlotSize = 12
	offMapSize  = 16

	offSQProducer = 128
	offSQConsumer = 256
	offSQFlags    = 384
	offCQProducer = 512
	offCQConsumer = 640
	offCQFlags    = 768

	// ControlSize is the control page before the slots.
	ControlSize = 4096
	// SlotHeader is the length word and sequence word before a message.
	SlotHeader = 8
	slotSeq    = 4 // offset of the sequence word in a slot
)

// Flags.
const (
	// NeedWakeup in the submission flags: the agent may sleep; a host that
	// submits must ring the bell.
	NeedWakeup uint32 = 1 << 0
	// HostWaiting in the completion flags: the host may sleep; the agent
	// must ring the bell after publishing completions.
	HostWaiting uint32 = 1 << 0
)

// Sizes the agent accepts.
const (
	DefaultEntries = 64
	MinEntries     = 2
	MaxEntries     = 256
	// MinSlotSize fits the largest message (wire.MaxMessage) and its slot
	// header, rounded up to a cache line; it is also the default.
	MinSlotSize     = (SlotHeader + wire.MaxMessage + 63) &^ 63
	DefaultSlotSize = MinSlotSize
	MaxSlotSize     = 8192
)

// Errors.
var (
	// ErrCorrupt: the peer wrote something impossible into shared memory
	// (an index beyond the ring, a slot length beyond the slot). It is
	// sticky; the side that sees it closes the ring.
	ErrCorrupt = errors.New("ring: shared memory corrupt")
	// ErrFull: no free slot; retry after the peer consumed some.
	ErrFull = errors.New("ring: full")
	// ErrTooLarge: the message does not fit a slot.
	ErrTooLarge = errors.New("ring: message larger than a slot")
	// ErrShortBuffer: the destination cannot hold the next message; nothing
	// was consumed.
	ErrShortBuffer = errors.New("ring: destination too small")
	// ErrClosed: the ring was closed.
	ErrClosed = errors.New("ring: closed")
	// ErrLayout: a memfd offered as a ring pair does not have a valid layout
	// or seals.
	ErrLayout = errors.New("ring: bad layout")
)

// Config is the size of a ring pair: both rings have Entries slots of
// SlotSize bytes.
type Config struct {
	Entries  uint32
	SlotSize uint32
}

// Fit turns the sizes a host asked for (zero: the default) into the
// nearest valid Config: entries rounded up to a power of two and slot size
// up to a multiple of 64, both clamped to the accepted range.
func Fit(entries, slotSize uint32) Config {
	if entries == 0 {
		entries = DefaultEntries
	}
	entries = min(max(entries, MinEntries), MaxEntries)
	if bits.OnesCount32(entries) != 1 {
		entries = 1 << bits.Len32(entries)
	}
	if slotSize == 0 {
		slotSize = DefaultSlotSize
	}
	slotSize = min(max(slotSize, MinSlotSize), MaxSlotSize)
	slotSize = (slotSize + 63) &^ 63
	return Config{Entries: entries, SlotSize: slotSize}
}

// Check reports whether c is a valid Config.
func (c Config) Check() error {
	if c.Entries < MinEntries || c.Entries > MaxEntries || bits.OnesCount32(c.Entries) != 1 {
		return fmt.Errorf("%w: %d entries (a power of two in %d..%d)", ErrLayout, c.Entries, MinEntries, MaxEntries)
	}
	if c.SlotSize < MinSlotSize || c.SlotSize > MaxSlotSize || c.SlotSize%64 != 0 {
		return fmt.Errorf("%w: slot size %d (a multiple of 64 in %d..%d)", ErrLayout, c.SlotSize, MinSlotSize, MaxSlotSize)
	}
	return nil
}

// MapSize is the size of the memfd of a pair of c.
func (c Config) MapSize() int {
	return ControlSize + 2*int(c.Entries)*int(c.SlotSize)
}

// MaxMessage is the longest message a slot of c carries.
func (c Config) MaxMessage() int { return int(c.SlotSize) - SlotHeader }

// sqOff and cqOff are where the submission and completion slots start.
func (c Config) sqOff() int { return ControlSize }
func (c Config) cqOff() int { return ControlSize + int(c.Entries)*int(c.SlotSize) }
