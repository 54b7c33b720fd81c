package route

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Control ops of link-state routing (inside noc.OpRouteFirst..OpRouteLast).
const (
	// OpHello discovers the neighbour on a port.
	OpHello = noc.OpRouteFirst
	// OpLSA carries one link-state advertisement.
	OpLSA = noc.OpRouteFirst + 1
)

// Payload sizes.
const (
	HelloLen          = 8
	LSAHeaderLen      = 20
	AdjacencyLen      = 8
	maxLSAAdjacencies = (noc.MaxPayload - LSAHeaderLen) / AdjacencyLen
)

// helloReply is the Hello flag bit of a reply.
const helloReply = 1 << 0

// Hello is the payload of an OpHello frame. The sender's node id is the
// frame's Src.
type Hello struct {
	// Port is the sender's port the hello leaves on.
	Port noc.PortID
	// Reply marks a hello sent in answer to one; it is not answered.
	Reply bool
	// Incarnation is the sender's incarnation number.
	Incarnation uint32
}

// AppendTo appends h's encoding to b.
func (h Hello) AppendTo(b []byte) []byte {
	var flags byte
	if h.Reply {
		flags |= helloReply
	}
	b = binary.BigEndian.AppendUint16(b, uint16(h.Port))
	b = append(b, flags, 0)
	return binary.BigEndian.AppendUint32(b, h.Incarnation)
}

// DecodeHello decodes a hello payload. Errors wrap ErrMalformed.
func DecodeHello(b []byte) (Hello, error) {
	if len(b) != HelloLen {
		return Hello{}, fmt.Errorf("hello of %d bytes, want %d: %w", len(b), HelloLen, ErrMalformed)
	}
	h := Hello{
		Port:        noc.PortID(binary.BigEndian.Uint16(b)),
		Reply:       b[2]&helloReply != 0,
		Incarnation: binary.BigEndian.Uint32(b[4:]),
	}
	switch {
	case b[2]&^helloReply != 0 || b[3] != 0:
		return Hello{}, fmt.Errorf("hello reserved bits %#x %#x: %w", b[2], b[3], ErrMalformed)
	case !validPort(h.Port):
		return Hello{}, fmt.Errorf("hello from port %#x: %w", uint16(h.Port), ErrMalformed)
	}
	return h, nil
}

// Adjacency is one entry of an LSA: the originator's Port leads to
// Neighbour, arriving on the neighbour's NeighbourPort.
type Adjacency struct {
	Port          noc.PortID `json:"port"`
	Neighbour     noc.NodeID `json:"neighbour"`
	NeighbourPort noc.PortID `json:"neighbour_port"`
}

// LSA is a link-state advertisement: the adjacencies of Origin, as of its
// (Incarnation, Seq). Of two LSAs of one originator the one with the
// higher Incarnation, then the higher Seq, is newer.
type LSA struct {
	Origin      noc.NodeID
	Incarnation uint32
	Seq         uint32
	// Age is how long ago the originator made this LSA, as known by the
	// sender (millisecond resolution on the wire).
	Age time.Duration
	// Adjacencies are sorted by Port, each port at most once.
	Adjacencies []Adjacency
}

// AppendTo appends l's encoding to b. Adjacencies must be sorted by Port
// with no port twice; AppendTo does not check.
func (l *LSA) AppendTo(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(l.Origin))
	b = binary.BigEndian.AppendUint32(b, l.Incarnation)
	b = binary.BigEndian.AppendUint32(b, l.Seq)
	b = binary.BigEndian.AppendUint32(b, ageMillis(l.Age))
	b = binary.BigEndian.AppendUint16(b, uint16(len(l.Adjacencies)))
	b = append(b, 0, 0)
	for _, a := range l.Adjacencies {
		b = binary.BigEndian.AppendUint16(b, uint16(a.Port))
		b = binary.BigEndian.AppendUint32(b, uint32(a.Neighbour))
		b = binary.BigEndian.AppendUint16(b, uint16(a.NeighbourPort))
	}
	return b
}

func ageMillis(d time.Duration) uint32 {
	ms := d / time.Millisecond
	if ms < 0 {
		return 0
	}
	if ms > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(ms)
}

// DecodeLSA decodes an LSA payload into l, reusing l.Adjacencies' storage.
// It accepts only the canonical form (adjacencies sorted by port, reserved
// bytes zero), so a decoded LSA re-encodes to the same bytes. Errors wrap
// ErrMalformed and leave l in an unspecified state.
func DecodeLSA(b []byte, l *LSA) error {
	if len(b) < LSAHeaderLen {
		return fmt.Errorf("lsa of %d bytes: %w", len(b), ErrMalformed)
	}
	l.Origin = noc.NodeID(binary.BigEndian.Uint32(b))
	l.Incarnation = binary.BigEndian.Uint32(b[4:])
	l.Seq = binary.BigEndian.Uint32(b[8:])
	l.Age = time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Millisecond
	n := int(binary.BigEndian.Uint16(b[16:]))
	switch {
	case l.Origin == noc.BroadcastNode:
		return fmt.Errorf("lsa from the broadcast id: %w", ErrMalformed)
	case b[18] != 0 || b[19] != 0:
		return fmt.Errorf("lsa reserved bytes %#x %#x: %w", b[18], b[19], ErrMalformed)
	case len(b) != LSAHeaderLen+n*AdjacencyLen:
		return fmt.Errorf("lsa of %d bytes for %d adjacencies: %w", len(b), n, ErrMalformed)
	}
	l.Adjacencies = l.Adjacencies[:0]
	for i := 0; i < n; i++ {
		e := b[LSAHeaderLen+i*AdjacencyLen:]
		a := Adjacency{
			Port:          noc.PortID(binary.BigEndian.Uint16(e)),
			Neighbour:     noc.NodeID(binary.BigEndian.Uint32(e[2:])),
			NeighbourPort: noc.PortID(binary.BigEndian.Uint16(e[6:])),
		}
		switch {
		case !validPort(a.Port) || !validPort(a.NeighbourPort):
			return fmt.Errorf("lsa adjacency %d: port %#x-%#x: %w", i, uint16(a.Port), uint16(a.NeighbourPort), ErrMalformed)
		case a.Neighbour == l.Origin || a.Neighbour == noc.BroadcastNode:
			return fmt.Errorf("lsa adjacency %d: neighbour %v of %v: %w", i, a.Neighbour, l.Origin, ErrMalformed)
		case i > 0 && a.Port <= l.Adjacencies[i-1].Port:
			return fmt.Errorf("lsa adjacency %d: port %d out of order: %w", i, a.Port, ErrMalformed)
		}
		l.Adjacencies = append(l.Adjacencies, a)
	}
	return nil
}

// validPort reports whether p can name a physical port.
func validPort(p noc.PortID) bool { return p < noc.LocalPort }
