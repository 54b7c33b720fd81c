package noc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/aitherion/dpu/gva"
	"github.com/gopacket/gopacket"
)

// Frame header constants.
const (
	FrameVersion = 1
	HeaderLen    = 48
	// MaxPayload is the largest payload a frame can describe.
	MaxPayload = 1<<16 - 1
	// EtherType is the Ethernet type of NoC frames on real links.
	EtherType = 0x88B5
)

// NodeID identifies a DPU on the NoC; it equals the machine index of its host.
type NodeID uint32

// BroadcastNode addresses whichever node is at the other end of a link.
const BroadcastNode NodeID = 0xFFFFFFFF

func (n NodeID) String() string {
	if n == BroadcastNode {
		return "any"
	}
	return fmt.Sprintf("%d", uint32(n))
}

// Class is the message class of a frame.
type Class uint8

// Message classes.
const (
	ClassLoad Class = iota
	ClassStore
	ClassAtomic
	ClassControl
	numClasses
)

var classNames = [...]string{"load", "store", "atomic", "control"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Op is an operation inside a class. The packages that speak a class own its
// op values (route owns the Control ops of routing, coherence the rest).
type Op uint8

// Flags of a frame.
type Flags uint8

// Frame flags.
const (
	FlagReply Flags = 1 << 0 // the frame answers a request with the same request id
	FlagError Flags = 1 << 1 // the reply carries an error (errno in the payload)
	FlagHuge  Flags = 1 << 2 // the page is a huge page
	// FlagPath marks a page-keyed frame: every node on the way hands it to
	// its coherence engine, which follows the path cache.
	FlagPath   Flags = 1 << 3
	flagsKnown       = FlagReply | FlagError | FlagHuge | FlagPath
)

// Errors returned (wrapped) by DecodeFromBytes.
var (
	ErrShort      = errors.New("noc: frame shorter than its header")
	ErrVersion    = errors.New("noc: unsupported frame version")
	ErrClass      = errors.New("noc: unknown message class")
	ErrFlags      = errors.New("noc: reserved flags set")
	ErrTruncated  = errors.New("noc: payload shorter than its length field")
	ErrTooLarge   = errors.New("noc: payload larger than a frame can carry")
	errDecodeFail = errors.New("noc: decode failed")
)

// LayerTypeFrame is the gopacket layer type of a NoC frame.
var LayerTypeFrame = gopacket.RegisterLayerType(EtherType, gopacket.LayerTypeMetadata{
	Name:    "DPUNoC",
	Decoder: gopacket.DecodeFunc(decodeFrame),
})

// Frame is one NoC frame. The zero value is an empty load frame of version 0;
// use [Frame.Reset] or set Version before encoding.
type Frame struct {
	Version     uint8
	Class       Class
	Op          Op
	Flags       Flags
	Src, Dst    NodeID
	Hops        uint8
	Priority    uint8
	RequestID   uint64
	GVA         gva.GVA
	PageVersion gva.Version

	// Contents is the header as decoded; Payload the payload bytes. Both
	// alias the decoded input.
	Contents []byte
	Payload  []byte
}

// LayerType implements gopacket.Layer.
func (f *Frame) LayerType() gopacket.LayerType { return LayerTypeFrame }

// LayerContents implements gopacket.Layer.
func (f *Frame) LayerContents() []byte { return f.Contents }

// LayerPayload implements gopacket.Layer.
func (f *Frame) LayerPayload() []byte { return f.Payload }

// CanDecode implements gopacket.DecodingLayer.
func (f *Frame) CanDecode() gopacket.LayerClass { return LayerTypeFrame }

// NextLayerType implements gopacket.DecodingLayer: the payload is opaque.
func (f *Frame) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes a frame from data in place. It never panics and
// allocates nothing; Payload aliases data.
func (f *Frame) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := f.decode(data); err != nil {
		if df != nil {
			df.SetTruncated()
		}
		return err
	}
	return nil
}

// Decode is DecodeFromBytes without gopacket's feedback argument.
func (f *Frame) Decode(data []byte) error { return f.decode(data) }

func (f *Frame) decode(data []byte) error {
	if len(data) < HeaderLen {
		return ErrShort
	}
	if data[0] != FrameVersion {
		return ErrVersion
	}
	if Class(data[1]) >= numClasses {
		return ErrClass
	}
	if Flags(data[3])&^flagsKnown != 0 {
		return ErrFlags
	}
	n := int(binary.BigEndian.Uint16(data[14:]))
	if len(data)-HeaderLen < n {
		return ErrTruncated
	}
	f.Version = data[0]
	f.Class = Class(data[1])
	f.Op = Op(data[2])
	f.Flags = Flags(data[3])
	f.Src = NodeID(binary.BigEndian.Uint32(data[4:]))
	f.Dst = NodeID(binary.BigEndian.Uint32(data[8:]))
	f.Hops = data[12]
	f.Priority = data[13]
	f.RequestID = binary.BigEndian.Uint64(data[16:])
	f.GVA.Hi = binary.BigEndian.Uint64(data[24:])
	f.GVA.Lo = binary.BigEndian.Uint64(data[32:])
	f.PageVersion = gva.Version(binary.BigEndian.Uint64(data[40:]))
	f.Contents = data[:HeaderLen:HeaderLen]
	f.Payload = data[HeaderLen : HeaderLen+n : HeaderLen+n]
	return nil
}

// Len returns the encoded length of f.
func (f *Frame) Len() int { return HeaderLen + len(f.Payload) }

// PutHeader writes f's header into b[:HeaderLen] with the given payload
// length. b must be at least HeaderLen long.
func (f *Frame) PutHeader(b []byte, payloadLen int) {
	_ = b[HeaderLen-1]
	b[0] = f.Version
	b[1] = byte(f.Class)
	b[2] = byte(f.Op)
	b[3] = byte(f.Flags)
	binary.BigEndian.PutUint32(b[4:], uint32(f.Src))
	binary.BigEndian.PutUint32(b[8:], uint32(f.Dst))
	b[12] = f.Hops
	b[13] = f.Priority
	binary.BigEndian.PutUint16(b[14:], uint16(payloadLen))
	binary.BigEndian.PutUint64(b[16:], f.RequestID)
	binary.BigEndian.PutUint64(b[24:], f.GVA.Hi)
	binary.BigEndian.PutUint64(b[32:], f.GVA.Lo)
	binary.BigEndian.PutUint64(b[40:], uint64(f.PageVersion))
}

// AppendTo appends the encoded frame (header + Payload) to b. It allocates
// only when b lacks capacity.
func (f *Frame) AppendTo(b []byte) ([]byte, error) {
	if len(f.Payload) > MaxPayload {
		return b, ErrTooLarge
	}
	n := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	f.PutHeader(b[n:], len(f.Payload))
	return append(b, f.Payload...), nil
}

// SerializeTo implements gopacket.SerializableLayer. The payload must already
// be in b (as gopacket serializes layers from the innermost outward); f's
// own Payload field is ignored.
func (f *Frame) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	n := len(b.Bytes())
	if n > MaxPayload {
		return ErrTooLarge
	}
	h, err := b.PrependBytes(HeaderLen)
	if err != nil {
		return fmt.Errorf("noc: serialize: %w", err)
	}
	if opts.FixLengths && f.Version == 0 {
		f.Version = FrameVersion
	}
	f.PutHeader(h, n)
	return nil
}

// Reset makes f an empty frame of the current version.
func (f *Frame) Reset() { *f = Frame{Version: FrameVersion} }

func decodeFrame(data []byte, p gopacket.PacketBuilder) error {
	f := &Frame{}
	if err := f.decode(data); err != nil {
		return fmt.Errorf("%w: %w", errDecodeFail, err)
	}
	p.AddLayer(f)
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// String describes f for logs.
func (f *Frame) String() string {
	return fmt.Sprintf("%s/%d %v->%v hops=%d req=%d %v v%d len=%d flags=%#x",
		f.Class, f.Op, f.Src, f.Dst, f.Hops, f.RequestID, f.GVA, f.PageVersion, len(f.Payload), uint8(f.Flags))
}
