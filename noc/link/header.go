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
	// ClockVersion marks a datagram that carries clock timestamps
	// (FlagClockReq or FlagClockAns, never with data); every other
	// datagram is Version, byte for byte as before.
	ClockVersion = 2
	// HeaderLen is the length of the fixed part of the header.
	HeaderLen = 40
	// TrailerLen is the length of the CRC32C trailer.
	TrailerLen = 4
	// MaxSACK is the most selective-ack blocks one datagram carries.
	MaxSACK = 4
	// SACKLen is the encoded length of one selective-ack block.
	SACKLen = 4
	// StampLen is the encoded length of one clock timestamp.
	StampLen = 8
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
	// FlagClockReq: the datagram carries the sender's transmit time and
	// asks for a FlagClockAns at once (ClockVersion only).
	FlagClockReq Flags = 1 << 4
	// FlagClockAns: the datagram answers a FlagClockReq with its transmit
	// time echoed, its arrival time and this transmit time (ClockVersion
	// only).
	FlagClockAns Flags = 1 << 5
	// FlagPacked: the payload is several whole messages, each after its
	// length (uint16, at least 1), sent only to a peer whose feature word
	// says it unpacks them. First and Last are set with it.
	FlagPacked Flags = 1 << 6
	flagsKnown       = FlagData | FlagFirst | FlagLast | FlagAckReq | FlagPacked
	flagsClock       = FlagClockReq | FlagClockAns
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
	// Clock holds the timestamps of FlagClockReq (Transmit only) or
	// FlagClockAns (all three).
	Clock Stamps
}

// Stamps are clock timestamps in nanoseconds: Origin and Receive are the
// request's transmit time (the requester's clock) and its arrival time
// (the answerer's clock), Transmit the sender's clock when it sent this
// datagram.
type Stamps struct {
	Origin, Receive, Transmit int64
}

// clockLen is the length of the timestamps flags f carry.
func clockLen(f Flags) int {
	switch f & flagsClock {
	case FlagClockReq:
		return StampLen
	case FlagClockAns:
		return 3 * StampLen
	}
	return 0
}

// Len returns the encoded length of a datagram with h's SACK blocks and a
// payload of h.Length bytes.
func (h *Header) Len() int {
	return HeaderLen + int(h.NSACK)*SACKLen + clockLen(h.Flags) + int(h.Length) + TrailerLen
}

// Encode writes h, payload and the CRC32C trailer into b and returns the
// datagram length. It sets h.Length from payload. b must hold h.Len() bytes.
func (h *Header) Encode(b, payload []byte) (int, error) {
	if len(payload) > 0xFFFF || h.NSACK > MaxSACK || h.Flags&flagsClock == flagsClock || (h.Flags&flagsClock != 0 && len(payload) > 0) {
		return 0, fmt.Errorf("link: encode: %w: payload %d, %d sack blocks", ErrMalformed, len(payload), h.NSACK)
	}
	h.Length = uint16(len(payload))
	n := h.Len()
	if len(b) < n {
		return 0, fmt.Errorf("link: encode: buffer of %d bytes for a %d-byte datagram: %w", len(b), n, ErrMalformed)
	}
	b[0] = Version
	if h.Flags&flagsClock != 0 {
		b[0] = ClockVersion
	}
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
	o = putStamps(b, o, h.Flags, &h.Clock)
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
	if b[0] != Version && b[0] != ClockVersion {
		return nil, fmt.Errorf("%w: %d", ErrVersion, b[0])
	}
	h.Flags = Flags(b[1])
	h.NSACK = b[2]
	if h.NSACK > MaxSACK || b[3] != 0 || h.Flags&^(flagsKnown|flagsClock) != 0 {
		return nil, fmt.Errorf("%w: reserved bits set", ErrMalformed)
	}
	if clk := h.Flags & flagsClock; (b[0] == Version) != (clk == 0) || clk == flagsClock || clk != 0 && h.Flags&FlagData != 0 {
		return nil, fmt.Errorf("%w: clock flags %#x in a version %d datagram", ErrMalformed, uint8(clk), b[0])
	}
	h.Length = binary.BigEndian.Uint16(b[38:])
	end := HeaderLen + int(h.NSACK)*SACKLen + clockLen(h.Flags) + int(h.Length)
	if end+TrailerLen > len(b) {
		return nil, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	if crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:]) {
		return nil, ErrChecksum
	}
	if h.Flags&FlagData == 0 && (h.Length != 0 || h.Flags&(FlagFirst|FlagLast|FlagPacked) != 0) {
		return nil, fmt.Errorf("%w: fragment flags without data", ErrMalformed)
	}
	if h.Flags&FlagPacked != 0 && h.Flags&(FlagFirst|FlagLast) != FlagFirst|FlagLast {
		return nil, fmt.Errorf("%w: a packed datagram that is part of a message", ErrMalformed)
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
	o = getStamps(b, o, h.Flags, &h.Clock)
	return b[o:end:end], nil
}

// The feature word follows the trailer of a datagram, where the MTU leaves
// room for it: three magic bytes and a byte of features. It says what the
// sender's receiver understands beyond version 1; an endpoint that
// predates it takes it for link padding and ignores it, so a sender uses a
// feature only once its peer's datagrams have named it.
const (
	// FeatureLen is the length of the feature word.
	FeatureLen = 4
	// FeatureUnpack: the sender's receiver unpacks FlagPacked datagrams.
	FeatureUnpack = 1 << 0
	featuresKnown = FeatureUnpack
)

var featureMagic = [3]byte{0xD9, 0x50, 0x4B}

// putFeatures writes the feature word after a datagram of n bytes in b
// when it fits in mtu, and returns the new length.
func putFeatures(b []byte, n, mtu int, f byte) int {
	if n+FeatureLen > mtu || n+FeatureLen > len(b) {
		return n
	}
	copy(b[n:], featureMagic[:])
	b[n+3] = f
	return n + FeatureLen
}

// Features returns the features named by the word after the trailer of
// datagram d, whose header h decoded (0 when it carries none: padding,
// or a peer that predates the word). Unknown feature bits are ignored.
func Features(d []byte, h *Header) byte {
	o := h.Len()
	if len(d) < o+FeatureLen || [3]byte(d[o:o+3]) != featureMagic {
		return 0
	}
	return d[o+3] & featuresKnown
}

// putStamps writes the timestamps flags f carry at b[o:] and returns the
// offset after them.
func putStamps(b []byte, o int, f Flags, s *Stamps) int {
	switch f & flagsClock {
	case FlagClockReq:
		binary.BigEndian.PutUint64(b[o:], uint64(s.Transmit))
		return o + StampLen
	case FlagClockAns:
		binary.BigEndian.PutUint64(b[o:], uint64(s.Origin))
		binary.BigEndian.PutUint64(b[o+8:], uint64(s.Receive))
		binary.BigEndian.PutUint64(b[o+16:], uint64(s.Transmit))
		return o + 3*StampLen
	}
	return o
}

// getStamps reads what putStamps wrote.
func getStamps(b []byte, o int, f Flags, s *Stamps) int {
	*s = Stamps{}
	switch f & flagsClock {
	case FlagClockReq:
		s.Transmit = int64(binary.BigEndian.Uint64(b[o:]))
		return o + StampLen
	case FlagClockAns:
		s.Origin = int64(binary.BigEndian.Uint64(b[o:]))
		s.Receive = int64(binary.BigEndian.Uint64(b[o+8:]))
		s.Transmit = int64(binary.BigEndian.Uint64(b[o+16:]))
		return o + 3*StampLen
	}
	return o
}
