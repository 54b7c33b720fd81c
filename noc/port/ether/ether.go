package ether

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/aitherion/dpu/noc"
)

// HeaderLen is the length of an Ethernet header without a VLAN tag.
const HeaderLen = 14

// EtherType is the Ethernet type of NoC frames (noc.EtherType).
const EtherType uint16 = noc.EtherType

// MAC is an Ethernet address.
type MAC [6]byte

// Broadcast is the all-ones Ethernet address.
var Broadcast = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// MACFrom converts a net.HardwareAddr of six bytes.
func MACFrom(a net.HardwareAddr) (MAC, error) {
	var m MAC
	if len(a) != len(m) {
		return m, fmt.Errorf("ether: %q is not a 6-byte Ethernet address", a.String())
	}
	copy(m[:], a)
	return m, nil
}

// IsMulticast reports whether m is a group (multicast or broadcast) address.
func (m MAC) IsMulticast() bool { return m[0]&1 == 1 }

// IsZero reports whether m is all zeros.
func (m MAC) IsZero() bool { return m == MAC{} }

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// Header is a decoded Ethernet header.
type Header struct {
	Dst, Src  MAC
	EtherType uint16
}

// ErrShort is returned for a frame shorter than an Ethernet header.
var ErrShort = errors.New("ether: frame shorter than its header")

// ParseHeader decodes the header at the start of frame.
func ParseHeader(frame []byte) (Header, error) {
	var h Header
	if len(frame) < HeaderLen {
		return h, fmt.Errorf("%w: %d bytes", ErrShort, len(frame))
	}
	copy(h.Dst[:], frame[0:6])
	copy(h.Src[:], frame[6:12])
	h.EtherType = binary.BigEndian.Uint16(frame[12:14])
	return h, nil
}

// PutHeader writes h at the start of b, which must hold HeaderLen bytes.
func PutHeader(b []byte, h Header) {
	_ = b[HeaderLen-1]
	copy(b[0:6], h.Dst[:])
	copy(b[6:12], h.Src[:])
	binary.BigEndian.PutUint16(b[12:14], h.EtherType)
}

// Neighbour is the far end of a point-to-point link as seen from one port:
// its MAC address, learned from received frames unless fixed. It is safe
// for one receiving and any number of sending goroutines.
type Neighbour struct {
	own   MAC
	fixed bool
	peer  atomic.Uint64 // MAC in the low 48 bits, bit 48 set once known
}

const known = 1 << 48

// NewNeighbour returns the neighbour of a port whose own address is own.
// A non-zero peer fixes the neighbour's address; otherwise it is learned.
func NewNeighbour(own, peer MAC) *Neighbour {
	n := &Neighbour{own: own}
	if !peer.IsZero() {
		n.fixed = true
		n.peer.Store(pack(peer) | known)
	}
	return n
}

// Own is this port's address.
func (n *Neighbour) Own() MAC { return n.own }

// Peer returns the neighbour's address and whether it is known.
func (n *Neighbour) Peer() (MAC, bool) {
	v := n.peer.Load()
	if v&known == 0 {
		return MAC{}, false
	}
	return unpack(v), true
}

// Dst is the destination address of the next frame: the neighbour's address,
// or broadcast while it is unknown.
func (n *Neighbour) Dst() MAC {
	if m, ok := n.Peer(); ok {
		return m
	}
	return Broadcast
}

// Header returns the header of a NoC frame to the neighbour.
func (n *Neighbour) Header() Header {
	return Header{Dst: n.Dst(), Src: n.own, EtherType: EtherType}
}

// Accept reports whether a received frame with header h is a NoC frame for
// this port (addressed to it or broadcast), and learns the sender's address.
func (n *Neighbour) Accept(h Header) bool {
	if h.EtherType != EtherType || h.Src.IsMulticast() || h.Src == n.own {
		return false
	}
	if h.Dst != n.own && h.Dst != Broadcast {
		return false
	}
	v := pack(h.Src) | known
	if n.fixed {
		return n.peer.Load() == v
	}
	if n.peer.Load() != v {
		n.peer.Store(v)
	}
	return true
}

func pack(m MAC) uint64 {
	var v uint64
	for _, b := range m {
		v = v<<8 | uint64(b)
	}
	return v
}

func unpack(v uint64) MAC {
	var m MAC
	for i := len(m) - 1; i >= 0; i-- {
		m[i] = byte(v)
		v >>= 8
	}
	return m
}
