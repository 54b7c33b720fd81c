package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
)

// HandleLen is the encoded length of a Handle.
const HandleLen = 64

// handleMagic starts every bootstrap datagram.
const handleMagic = 0x44505552 // "DPUR"

// handleVersion is the bootstrap version this package speaks.
const handleVersion = 1

// ErrHandle is wrapped by every refused bootstrap datagram.
var ErrHandle = errors.New("rdma: bad bootstrap handle")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Identity names one incarnation of one end's queue pair: the port's
// session and the generation of its QP (bumped at every QP reset).
type Identity struct {
	Session uint64
	Gen     uint32
}

// Handle is what one end tells the other so that the two queue pairs can
// connect: the channel handle of the bootstrap exchange.
type Handle struct {
	Self Identity
	// Peer is the peer identity the sender last heard (zero: none).
	Peer Identity
	// QPN and PSN are the sender's queue pair number and first send PSN
	// (24 bits each).
	QPN, PSN uint32
	// GID is the sender's port GID (RoCE: its IP address); LID its port
	// LID (0 on RoCE).
	GID netip.Addr
	LID uint16
	// MTU is the largest datagram the sender's receive slots hold; Slots
	// how many receives it keeps posted.
	MTU   uint16
	Slots uint32
}

// Encode writes h into b (HandleLen bytes) and returns HandleLen.
//
//	offset size field
//	0      4    magic "DPUR"
//	4      1    version (1)
//	5      3    receive slots (24 bits)
//	8      8    self session (never 0)
//	16     4    self generation
//	20     8    peer session (0: none heard)
//	28     4    peer generation
//	32     4    QPN (24 bits)
//	36     4    PSN (24 bits)
//	40     16   GID
//	56     2    LID
//	58     2    MTU
//	60     4    CRC32C of bytes 0..59
func (h *Handle) Encode(b []byte) (int, error) {
	if len(b) < HandleLen {
		return 0, fmt.Errorf("%w: buffer of %d bytes", ErrHandle, len(b))
	}
	if !h.GID.Is6() && !h.GID.Is4() {
		return 0, fmt.Errorf("%w: no GID", ErrHandle)
	}
	binary.BigEndian.PutUint32(b[0:], handleMagic)
	b[4] = handleVersion
	b[5], b[6], b[7] = byte(h.Slots>>16), byte(h.Slots>>8), byte(h.Slots)
	binary.BigEndian.PutUint64(b[8:], h.Self.Session)
	binary.BigEndian.PutUint32(b[16:], h.Self.Gen)
	binary.BigEndian.PutUint64(b[20:], h.Peer.Session)
	binary.BigEndian.PutUint32(b[28:], h.Peer.Gen)
	binary.BigEndian.PutUint32(b[32:], h.QPN&0xFFFFFF)
	binary.BigEndian.PutUint32(b[36:], h.PSN&0xFFFFFF)
	g := h.GID.As16()
	copy(b[40:56], g[:])
	binary.BigEndian.PutUint16(b[56:], h.LID)
	binary.BigEndian.PutUint16(b[58:], h.MTU)
	binary.BigEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return HandleLen, nil
}

// Decode fills h from b. It never panics and allocates nothing.
func (h *Handle) Decode(b []byte) error {
	switch {
	case len(b) != HandleLen:
		return fmt.Errorf("%w: %d bytes", ErrHandle, len(b))
	case binary.BigEndian.Uint32(b[0:]) != handleMagic:
		return fmt.Errorf("%w: magic", ErrHandle)
	case b[4] != handleVersion:
		return fmt.Errorf("%w: version %d", ErrHandle, b[4])
	case crc32.Checksum(b[:60], castagnoli) != binary.BigEndian.Uint32(b[60:]):
		return fmt.Errorf("%w: checksum", ErrHandle)
	}
	h.Slots = uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	h.Self = Identity{binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint32(b[16:])}
	h.Peer = Identity{binary.BigEndian.Uint64(b[20:]), binary.BigEndian.Uint32(b[28:])}
	h.QPN = binary.BigEndian.Uint32(b[32:])
	h.PSN = binary.BigEndian.Uint32(b[36:])
	h.GID = netip.AddrFrom16([16]byte(b[40:56]))
	h.LID = binary.BigEndian.Uint16(b[56:])
	h.MTU = binary.BigEndian.Uint16(b[58:])
	switch {
	case h.Self.Session == 0:
		return fmt.Errorf("%w: zero session", ErrHandle)
	case h.QPN > 0xFFFFFF || h.PSN > 0xFFFFFF || h.QPN == 0:
		return fmt.Errorf("%w: QPN %#x PSN %#x", ErrHandle, h.QPN, h.PSN)
	case h.MTU < 64 || h.Slots == 0:
		return fmt.Errorf("%w: MTU %d, %d slots", ErrHandle, h.MTU, h.Slots)
	}
	return nil
}
