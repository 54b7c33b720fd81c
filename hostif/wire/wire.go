package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/aitherion/dpu/gva"
)

// Protocol versions this build speaks. Hello carries both sides' ranges; the
// server picks the highest version in both.
const (
	VersionMin = 1
	VersionMax = 1
)

// Sizes.
const (
	HeaderLen = 32
	PageSize  = gva.PageSize
	// MaxBody is the largest body of any message (a LOAD reply: version + a page).
	MaxBody = 8 + PageSize
	// MaxMessage is the largest message either side sends.
	MaxMessage = HeaderLen + MaxBody
	// MaxBulk is the most bytes one STORE_BULK or LOAD_BULK moves.
	MaxBulk = 1 << 20
	// MaxBulkArea is the largest bulk area a connection may ask for.
	MaxBulkArea = 16 << 20
	// MaxMapPages is the most pages one MAP request may cover (one memfd each;
	// the kernel passes at most 253 descriptors in one message).
	MaxMapPages = 64
	// MaxText is the longest error text a reply carries.
	MaxText = 200
	// NameLen is the size of the client name field of HELLO.
	NameLen = 32
	// SlotSize is the size of one entry of the replica status table.
	SlotSize = 64
)

// Kind says what a message is.
type Kind uint8

// Message kinds.
const (
	KindRequest Kind = 1
	KindReply   Kind = 2
	KindEvent   Kind = 3
)

// Op is a request operation. Replies carry the op of their request.
type Op uint16

// Operations of protocol version 1.
const (
	OpHello     Op = 1
	OpAlloc     Op = 2
	OpFree      Op = 3
	OpMap       Op = 4
	OpUnmap     Op = 5
	OpTranslate Op = 6
	OpLoad      Op = 7
	OpStore     Op = 8
	OpCAS       Op = 9
	OpFetchAdd  Op = 10
	OpAcquire   Op = 11
	OpRelease   Op = 12
	OpLock      Op = 13
	OpUnlock    Op = 14
	OpWhere     Op = 15
	OpSubscribe Op = 16
	// OpRings asks for a shared-memory ring pair (PROTOCOL.md §12). A
	// server that does not offer rings answers ENOSYS or EOPNOTSUPP.
	OpRings Op = 17
	OpMaps  Op = 18 // dpu_mmap areas: report this process's (body), or list the host's (empty); maps.go
	// OpClock reads the cluster clock: the fabric's common time and its
	// error bound as this node knows them (ClusterTime).
	OpClock Op = 19
	// OpBulk asks for the connection's bulk area: shared memory of the
	// size asked (Bytes), passed as one sealed memfd with the reply, that
	// STORE_BULK takes its data from and LOAD_BULK puts its data in.
	OpBulk Op = 20
	// OpStoreBulk stores Len bytes of the bulk area, from offset Off,
	// at GVA: across pages, up to MaxBulk bytes. Its reply says how many
	// bytes from the start were stored, in whole pages, before the first
	// page that failed (all of them: success).
	OpStoreBulk Op = 21
	// OpLoadBulk loads Len bytes at GVA into the bulk area at offset Off;
	// its reply says how many bytes from the start were loaded.
	OpLoadBulk Op = 22
	numOps        = 23

	// OpGPUFirst..OpGPULast are reserved for the CUDA hook's GPU accounting.
	// Their bodies are not yet fixed (up to MaxBody bytes); a version 1
	// server answers them with ENOSYS.
	OpGPUFirst       Op = 64
	OpGPUMemLimit    Op = 64 // ask the GPU memory limit and what is left
	OpGPUMemUpdate   Op = 65 // report a GPU memory allocation or release
	OpGPUKernelQuota Op = 66 // ask a kernel-time quota before a launch
	OpGPULast        Op = 79
)

var opNames = [numOps]string{"", "hello", "alloc", "free", "map", "unmap", "translate", "load", "store", "cas", "fetch-add", "acquire", "release", "lock", "unlock", "where", "subscribe", "rings", "maps", "clock", "bulk", "store-bulk", "load-bulk"}

func (o Op) String() string {
	switch {
	case o > 0 && o < numOps:
		return opNames[o]
	case o == OpGPUMemLimit:
		return "gpu-mem-limit"
	case o == OpGPUMemUpdate:
		return "gpu-mem-update"
	case o == OpGPUKernelQuota:
		return "gpu-kernel-quota"
	case o.IsGPU():
		return fmt.Sprintf("gpu(%d)", uint16(o))
	}
	return fmt.Sprintf("op(%d)", uint16(o))
}

// IsGPU reports whether o is in the range reserved for GPU accounting.
func (o Op) IsGPU() bool { return o >= OpGPUFirst && o <= OpGPULast }

// SocketOnly reports whether requests of o travel on the socket only,
// never on a ring (PROTOCOL.md §12.5): HELLO, and the requests whose
// replies pass descriptors (MAP, RINGS, BULK).
func (o Op) SocketOnly() bool {
	return o == OpHello || o == OpMap || o == OpRings || o == OpBulk
}

// EventType is the op field of an event message.
type EventType uint16

// Event types. A SUBSCRIBE mask bit is 1 << (type - 1).
const (
	EventInvalidated   EventType = 1 // a mapped page has a newer version than its replica
	EventUpdated       EventType = 2 // a mapped page's replica was updated in place
	EventHostFault     EventType = 3 // a pin on a page this connection locked was revoked
	EventOwnershipLost EventType = 4 // a page this connection locked or acquired changed owner
	EventFreed         EventType = 5 // a mapped page was freed
	EventLost          EventType = 6 // events were dropped; treat every mapping as stale
	numEvents                    = 7

	// AllEvents is the SUBSCRIBE mask of every event type.
	AllEvents uint32 = 1<<(numEvents-1) - 1
)

// Mask returns the SUBSCRIBE mask bit of t.
func (t EventType) Mask() uint32 { return 1 << (t - 1) }

var eventNames = [numEvents]string{"", "invalidated", "updated", "host-fault", "ownership-lost", "freed", "lost"}

func (t EventType) String() string {
	if t > 0 && t < numEvents {
		return eventNames[t]
	}
	return fmt.Sprintf("event(%d)", uint16(t))
}

// Header is the 32-byte header that starts every message.
//
//	off len
//	0   2   op (requests, replies) or event type (events)
//	2   1   kind
//	3   1   flags (0 in version 1)
//	4   4   status: 0 in requests; errno in replies (0 = success); reason in events
//	8   8   request id (replies echo it; events: the connection's event sequence)
//	16  8   GVA high word
//	24  8   GVA low word
//
// All fields are little-endian.
type Header struct {
	Op     Op
	Kind   Kind
	Flags  uint8
	Status uint32
	ID     uint64
	GVA    gva.GVA
}

// Put writes h into b[:HeaderLen].
func (h *Header) Put(b []byte) {
	_ = b[HeaderLen-1]
	binary.LittleEndian.PutUint16(b[0:], uint16(h.Op))
	b[2] = byte(h.Kind)
	b[3] = h.Flags
	binary.LittleEndian.PutUint32(b[4:], h.Status)
	binary.LittleEndian.PutUint64(b[8:], h.ID)
	binary.LittleEndian.PutUint64(b[16:], h.GVA.Hi)
	binary.LittleEndian.PutUint64(b[24:], h.GVA.Lo)
}

// Append appends h to b.
func (h *Header) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	h.Put(b[n:])
	return b
}

// Decode reads h from b[:HeaderLen].
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderLen {
		return fmt.Errorf("%w: %d bytes, header needs %d", ErrShort, len(b), HeaderLen)
	}
	h.Op = Op(binary.LittleEndian.Uint16(b[0:]))
	h.Kind = Kind(b[2])
	h.Flags = b[3]
	h.Status = binary.LittleEndian.Uint32(b[4:])
	h.ID = binary.LittleEndian.Uint64(b[8:])
	h.GVA.Hi = binary.LittleEndian.Uint64(b[16:])
	h.GVA.Lo = binary.LittleEndian.Uint64(b[24:])
	return nil
}

// PeekID returns the request id of a message too malformed to decode, so the
// error reply can still name it; 0 when b is too short to hold one.
func PeekID(b []byte) uint64 {
	if len(b) < 16 {
		return 0
	}
	return binary.LittleEndian.Uint64(b[8:])
}

// Decoding errors. Every one wraps ErrMalformed, which a server answers with
// EINVAL and counts against the client.
var (
	ErrMalformed = errors.New("hostif: malformed message")
	ErrShort     = fmt.Errorf("%w: short", ErrMalformed)
	ErrLength    = fmt.Errorf("%w: wrong body length", ErrMalformed)
	ErrKind      = fmt.Errorf("%w: wrong kind", ErrMalformed)
	ErrUnknownOp = fmt.Errorf("%w: unknown op", ErrMalformed)
	ErrReserved  = fmt.Errorf("%w: reserved field not zero", ErrMalformed)
	ErrField     = fmt.Errorf("%w: field out of range", ErrMalformed)
)

// Replica status table. Every connection has its own, shared read-only
// with its client (the descriptor comes with the HELLO reply). Entry i
// (i >= 1) is at byte i*SlotSize and describes the replica of one page the
// connection maps:
//
//	off len
//	0   8   seq: odd while the server rewrites the replica or this entry
//	8   8   version of the replica's content
//	16  4   state (SlotFree, SlotLoading, SlotValid, SlotStale)
//	20  4   reserved
//	24  16  GVA of the page (hi, lo)
//	40  24  reserved
//
// A reader reads seq (acquire), the data, then seq again; the read is a
// snapshot of version when both seq values are equal and even and state is
// SlotValid.
const (
	SlotSeqOff     = 0
	SlotVersionOff = 8
	SlotStateOff   = 16
	SlotGVAOff     = 24
)

// Replica states in the status table.
const (
	SlotFree    uint32 = 0
	SlotLoading uint32 = 1
	SlotValid   uint32 = 2
	SlotStale   uint32 = 3
)
