package wire

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unicode/utf8"

	"github.com/aitherion/dpu/gva"
)

// Hello is the body of a HELLO reply (40 bytes). A failed HELLO reply
// carries it too, with Version 0, so the client learns the server's range.
type Hello struct {
	Version        uint16 // chosen version; 0 when the ranges do not meet
	Min, Max       uint16 // the server's range
	MaxOutstanding uint32 // requests a connection may have in flight
	PageSize       uint32
	Machine        gva.MachineIndex // this node's machine index
	StatusSlots    uint32           // entries of the replica status table
	MaxMapPages    uint32
	MaxMessage     uint32
	ConnID         uint64
}

// HelloLen is the length of a HELLO reply body.
const HelloLen = 40

// Append appends the encoding of h to b.
func (h *Hello) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint16(b, h.Version)
	b = le.AppendUint16(b, h.Min)
	b = le.AppendUint16(b, h.Max)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, h.MaxOutstanding)
	b = le.AppendUint32(b, h.PageSize)
	b = le.AppendUint32(b, uint32(h.Machine))
	b = le.AppendUint32(b, h.StatusSlots)
	b = le.AppendUint32(b, h.MaxMapPages)
	b = le.AppendUint32(b, h.MaxMessage)
	return le.AppendUint64(b, h.ConnID)
}

// Decode reads h from the first HelloLen bytes of b.
func (h *Hello) Decode(b []byte) error {
	if len(b) < HelloLen {
		return fmt.Errorf("%w: hello reply of %d bytes", ErrLength, len(b))
	}
	le := binary.LittleEndian
	*h = Hello{
		Version: le.Uint16(b[0:]), Min: le.Uint16(b[2:]), Max: le.Uint16(b[4:]),
		MaxOutstanding: le.Uint32(b[8:]), PageSize: le.Uint32(b[12:]),
		Machine: gva.MachineIndex(le.Uint32(b[16:])), StatusSlots: le.Uint32(b[20:]),
		MaxMapPages: le.Uint32(b[24:]), MaxMessage: le.Uint32(b[28:]), ConnID: le.Uint64(b[32:]),
	}
	return nil
}

// Pick returns the highest version in both [aMin, aMax] and [bMin, bMax],
// or 0 when the ranges do not meet.
func Pick(aMin, aMax, bMin, bMax uint16) uint16 {
	hi := min(aMax, bMax)
	if hi < max(aMin, bMin) {
		return 0
	}
	return hi
}

// MappedPage is one page of a MAP reply: its slot in the replica status
// table and the replica version at the time of the reply.
type MappedPage struct {
	Slot    uint32
	Version gva.Version
}

// AppendMapReply appends a MAP reply body.
func AppendMapReply(b []byte, pages []MappedPage) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(len(pages)))
	b = le.AppendUint32(b, 0)
	for _, p := range pages {
		b = le.AppendUint32(b, p.Slot)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, uint64(p.Version))
	}
	return b
}

// DecodeMapReply decodes a MAP reply body into dst (reused) and returns it.
func DecodeMapReply(b []byte, dst []MappedPage) ([]MappedPage, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: map reply of %d bytes", ErrLength, len(b))
	}
	le := binary.LittleEndian
	n := int(le.Uint32(b))
	if n > MaxMapPages || len(b) != 8+16*n {
		return nil, fmt.Errorf("%w: map reply of %d bytes for %d pages", ErrLength, len(b), n)
	}
	dst = dst[:0]
	for i := range n {
		p := b[8+16*i:]
		dst = append(dst, MappedPage{Slot: le.Uint32(p), Version: gva.Version(le.Uint64(p[8:]))})
	}
	return dst, nil
}

// Rings is the body of a RINGS reply (16 bytes). A successful reply passes
// two descriptors: the ring pair's memfd (MapSize bytes, sealed) and the
// host's end of its bell (PROTOCOL.md §12).
type Rings struct {
	Entries  uint32 // slots per ring, a power of two
	SlotSize uint32 // bytes per slot, a multiple of 64
	MapSize  uint64 // size of the memfd
}

// RingsLen is the length of a RINGS reply body.
const RingsLen = 16

// Append appends the encoding of r to b.
func (r *Rings) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, r.Entries)
	b = le.AppendUint32(b, r.SlotSize)
	return le.AppendUint64(b, r.MapSize)
}

// Decode reads r from b.
func (r *Rings) Decode(b []byte) error {
	if len(b) != RingsLen {
		return fmt.Errorf("%w: rings reply of %d bytes", ErrLength, len(b))
	}
	le := binary.LittleEndian
	*r = Rings{Entries: le.Uint32(b[0:]), SlotSize: le.Uint32(b[4:]), MapSize: le.Uint64(b[8:])}
	return nil
}

// Location is the body of a WHERE reply (16 bytes).
type Location struct {
	Tier    gva.Tier
	Speed   gva.Speed
	Hops    uint16
	Owner   gva.MachineIndex // machine index of the page's current owner
	Version gva.Version
}

// Append appends the encoding of l to b.
func (l *Location) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = append(b, byte(l.Tier), byte(l.Speed))
	b = le.AppendUint16(b, l.Hops)
	b = le.AppendUint32(b, uint32(l.Owner))
	return le.AppendUint64(b, uint64(l.Version))
}

// Decode reads l from b.
func (l *Location) Decode(b []byte) error {
	if len(b) != 16 {
		return fmt.Errorf("%w: where reply of %d bytes", ErrLength, len(b))
	}
	le := binary.LittleEndian
	*l = Location{Tier: gva.Tier(b[0]), Speed: gva.Speed(b[1]), Hops: le.Uint16(b[2:]),
		Owner: gva.MachineIndex(le.Uint32(b[4:])), Version: gva.Version(le.Uint64(b[8:]))}
	return nil
}

// ClusterTime is the body of a CLOCK reply (24 bytes): the cluster clock
// (the reference node's clock, in ns) when the agent read it, within Error
// ns of the truth.
type ClusterTime struct {
	Time, Error int64
	Ref         uint32 // the reference node
}

// ClusterTimeLen is the length of a CLOCK reply's body.
const ClusterTimeLen = 24

// Append appends the encoding of c to b.
func (c *ClusterTime) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(c.Time))
	b = le.AppendUint64(b, uint64(c.Error))
	b = le.AppendUint32(b, c.Ref)
	return le.AppendUint32(b, 0)
}

// Decode reads c from b.
func (c *ClusterTime) Decode(b []byte) error {
	if len(b) != ClusterTimeLen {
		return fmt.Errorf("%w: clock reply of %d bytes", ErrLength, len(b))
	}
	le := binary.LittleEndian
	*c = ClusterTime{Time: int64(le.Uint64(b[0:])), Error: int64(le.Uint64(b[8:])), Ref: le.Uint32(b[16:])}
	if c.Error < 0 || le.Uint32(b[20:]) != 0 {
		return fmt.Errorf("%w: clock reply error %d", ErrField, c.Error)
	}
	return nil
}

// Event is the body of an event message (16 bytes) with its header fields.
type Event struct {
	Type    EventType
	Seq     uint64  // the connection's event sequence number (header id)
	Page    gva.GVA // the page (zero for EventLost)
	Reason  syscall.Errno
	Version gva.Version
	Offset  uint16 // EventUpdated: the updated byte range
	Length  uint16
}

// EventLen is the length of an event message.
const EventLen = HeaderLen + 16

// Append appends the whole event message to b.
func (e *Event) Append(b []byte) []byte {
	h := Header{Op: Op(e.Type), Kind: KindEvent, Status: uint32(e.Reason), ID: e.Seq, GVA: e.Page}
	b = h.Append(b)
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(e.Version))
	b = le.AppendUint16(b, e.Offset)
	b = le.AppendUint16(b, e.Length)
	return le.AppendUint32(b, 0)
}

// DecodeEvent decodes an event message whose header is h.
func DecodeEvent(h *Header, body []byte) (Event, error) {
	if len(body) != 16 {
		return Event{}, fmt.Errorf("%w: event body of %d bytes", ErrLength, len(body))
	}
	le := binary.LittleEndian
	return Event{Type: EventType(h.Op), Seq: h.ID, Page: h.GVA, Reason: syscall.Errno(h.Status),
		Version: gva.Version(le.Uint64(body)), Offset: le.Uint16(body[8:]), Length: le.Uint16(body[10:])}, nil
}

// AppendErrorText appends msg to b as an error reply body: valid UTF-8,
// at most MaxText bytes.
func AppendErrorText(b []byte, msg string) []byte {
	if len(msg) > MaxText {
		msg = msg[:MaxText]
		for len(msg) > 0 && !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	return append(b, msg...)
}

// DecodeReply splits a reply or event message into header and body.
func DecodeReply(b []byte) (Header, []byte, error) {
	var h Header
	if err := h.Decode(b); err != nil {
		return h, nil, err
	}
	if h.Kind != KindReply && h.Kind != KindEvent {
		return h, nil, fmt.Errorf("%w: kind %d from the server", ErrKind, h.Kind)
	}
	if len(b) > MaxMessage {
		return h, nil, fmt.Errorf("%w: %d bytes", ErrLength, len(b))
	}
	return h, b[HeaderLen:], nil
}

// U64 reads the little-endian uint64 at b[i:]; b must be long enough.
func U64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// U32 reads the little-endian word at b[i:].
func U32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }
