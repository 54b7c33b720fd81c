package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Wire constants of the link header (see the package documentation for the
// byte layout).
const (
	// Version is the link header version this package speaks.
	Version = 1
	// HeaderLen is the length of the fixed part of the header.
	HeaderLen = 40
	// TrailerLen is the length of the CRC32C trailer.
	TrailerLen = 4
	// MaxSACK is the most selective-ack blocks one datagram carries.
	MaxSACK = 4
	// SACKLen is the encoded length of one selective-ack block.
	SACKLen = 4
	// Overhead is the most bytes a data datagram adds to its payload.
	Overhead = HeaderLen + MaxSACK*SACKLen + TrailerLen
)

// Flags of a link datagram.
type Flags uint8

// Link datagram flags.
const (
	FlagData   Flags = 1 << 0 // the datagram carries one fragment of a message
	FlagFirst  Flags = 1 << 1 // the fragment starts a message
	FlagLast   Flags = 1 << 2 // the fragment ends a message
	FlagAckReq Flags = 1 << 3 // the receiver should answer at once
	flagsKnown       = FlagData | FlagFirst | FlagLast | FlagAckReq
)

// Errors returned (wrapped) by [Header.Decode] and Endpoint.Input.
var (
	// ErrMalformed: the datagram is not a well-formed link datagram.
	ErrMalformed = errors.New("link: malformed datagram")
	// ErrVersion: the header version is not [Version].
	ErrVersion = errors.New("link: unsupported header version")
	// ErrChecksum: the CRC32C trailer does not match.
	ErrChecksum = errors.New("link: bad checksum")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SACKBlock acknowledges Count datagrams starting Start after the
// cumulative ack: sequence numbers [Ack+Start, Ack+Start+Count).
type SACKBlock struct {
	Start, Count uint16
}

// Header is a decoded link header.
type Header struct {
	Flags Flags
	// SrcSession and SrcEpoch identify the sender's incarnation and link
	// epoch; DstSession and DstEpoch the receiver's as the sender last
	// heard them (zero when it has heard nothing).
	SrcSession uint64
	SrcEpoch   uint32
	DstSession uint64
	DstEpoch   uint32
	// Seq is the sequence number of the fragment (the sender's next
	// sequence number when the datagram carries none).
	Seq uint32
	// Ack is the cumulative ack: every sequence number before it arrived.
	Ack uint32
	// Credits is how many sequence numbers from Ack on the sender of this
	// header will accept.
	Credits uint16
	// Length is the payload length.
	Length uint16
	// NSACK blocks of SACK are valid.
	NSACK uint8
	SACK  [MaxSACK]SACKBlock
}

// Len returns the encoded length of a datagram with h's SACK blocks and a
// payload of h.Length bytes.
func (h *Header) Len() int {
	return HeaderLen + int(h.NSACK)*SACKLen + int(h.Length) + TrailerLen
}

// Encode writes h, payload and the CRC32C trailer into b and returns the
// datagram length. It sets h.Length from payload. b must hold h.Len() bytes.
func (h *Header) Encode(b, payload []byte) (int, error) {
	if len(payload) > 0xFFFF || h.NSACK > MaxSACK {
		return 0, fmt.Errorf("link: encode: %w: payload %d, %d sack blocks", ErrMalformed, len(payload), h.NSACK)
	}
	h.Length = uint16(len(payload))
	n := h.Len()
	if len(b) < n {
		return 0, fmt.Errorf("link: encode: buffer of %d bytes for a %d-byte datagram: %w", len(b), n, ErrMalformed)
	}
	b[0] = Version
	b[1] = byte(h.Flags)
	b[2] = h.NSACK
	b[3] = 0
	binary.BigEndian.PutUint64(b[4:], h.SrcSession)
	binary.BigEndian.PutUint32(b[12:], h.SrcEpoch)
	binary.BigEndian.PutUint64(b[16:], h.DstSession)
	binary.BigEndian.PutUint32(b[24:], h.DstEpoch)
	binary.BigEndian.PutUint32(b[28:], h.Seq)
	binary.BigEndian.PutUint32(b[32:], h.Ack)
	binary.BigEndian.PutUint16(b[36:], h.Credits)
	binary.BigEndian.PutUint16(b[38:], h.Length)
	o := HeaderLen
	for i := range h.NSACK {
		binary.BigEndian.PutUint16(b[o:], h.SACK[i].Start)
		binary.BigEndian.PutUint16(b[o+2:], h.SACK[i].Count)
		o += SACKLen
	}
	o += copy(b[o:], payload)
	binary.BigEndian.PutUint32(b[o:], crc32.Checksum(b[:o], castagnoli))
	return o + TrailerLen, nil
}

// Decode fills h from datagram b and returns the payload, which aliases b.
// Bytes after the trailer (link padding) are ignored. It never panics and
// allocates nothing; on error h is left in an unspecified state.
func (h *Header) Decode(b []byte) ([]byte, error) {
	if len(b) < HeaderLen+TrailerLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if b[0] != Version {
		return nil, fmt.Errorf("%w: %d", ErrVersion, b[0])
	}
	h.Flags = Flags(b[1])
	h.NSACK = b[2]
	if h.NSACK > MaxSACK || b[3] != 0 || h.Flags&^flagsKnown != 0 {
		return nil, fmt.Errorf("%w: reserved bits set", ErrMalformed)
	}
	h.Length = binary.BigEndian.Uint16(b[38:])
	end := HeaderLen + int(h.NSACK)*SACKLen + int(h.Length)
	if end+TrailerLen > len(b) {
		return nil, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	if crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:]) {
		return nil, ErrChecksum
	}
	if h.Flags&FlagData == 0 && (h.Length != 0 || h.Flags&(FlagFirst|FlagLast) != 0) {
		return nil, fmt.Errorf("%w: fragment flags without data", ErrMalformed)
	}
	h.SrcSession = binary.BigEndian.Uint64(b[4:])
	h.SrcEpoch = binary.BigEndian.Uint32(b[12:])
	h.DstSession = binary.BigEndian.Uint64(b[16:])
	h.DstEpoch = binary.BigEndian.Uint32(b[24:])
	h.Seq = binary.BigEndian.Uint32(b[28:])
	h.Ack = binary.BigEndian.Uint32(b[32:])
	h.Credits = binary.BigEndian.Uint16(b[36:])
	if h.SrcSession == 0 {
		return nil, fmt.Errorf("%w: zero session", ErrMalformed)
	}
	o := HeaderLen
	for i := range h.NSACK {
		blk := SACKBlock{binary.BigEndian.Uint16(b[o:]), binary.BigEndian.Uint16(b[o+2:])}
		if blk.Count == 0 || blk.Start == 0 {
			// Start 0 would acknowledge Ack itself, which the
			// cumulative ack says has not arrived.
			return nil, fmt.Errorf("%w: empty sack block", ErrMalformed)
		}
		h.SACK[i] = blk
		o += SACKLen
	}
	return b[o:end:end], nil
}
