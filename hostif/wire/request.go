package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/aitherion/dpu/gva"
)

// Request flags and limits.
const (
	// AllocHuge asks for 2 MiB huge pages (not served by version 1 servers).
	AllocHuge uint32 = 1 << 0
	// MapNoFD takes the refs without local mappings: the reply carries no
	// descriptors and the LVA must be 0.
	MapNoFD uint32 = 1 << 0
	// LockTry fails with EBUSY at once instead of waiting for a local holder.
	LockTry uint32 = 1 << 0

	// TranslateToGVA asks the GVA of an LVA; TranslateToLVA the reverse.
	TranslateToGVA uint32 = 0
	TranslateToLVA uint32 = 1

	// MaxAllocBytes is the largest ALLOC request (1 TiB).
	MaxAllocBytes = 1 << 40
	// ModeMask is the permission bits a page may carry.
	ModeMask = 0o777
)

// Request is one decoded request. Only the fields of its op are meaningful.
type Request struct {
	Header

	// HELLO
	Min, Max uint16
	Name     [NameLen]byte

	// ALLOC (Bytes, Mode, Flags), MAP (LVA, Bytes, Flags), UNMAP (LVA, Bytes),
	// TRANSLATE (Dir, LVA), LOCK (TimeoutMS, Flags), ACQUIRE (TimeoutMS)
	Bytes     uint64
	Mode      uint32
	Flags     uint32
	LVA       uint64
	Dir       uint32
	TimeoutMS uint32

	// LOAD; STORE_BULK and LOAD_BULK (Len bytes at Off in the bulk area)
	Len uint32
	Off uint32
	// STORE data, or the raw body of a GPU accounting op. Aliases the input.
	Data []byte

	// CAS (Expected, Desired), FETCH_ADD (Delta), SUBSCRIBE (Mask)
	Expected, Desired uint64
	Delta             uint64
	Mask              uint32

	// RINGS: the ring pair's wanted entries per ring and slot size (0:
	// the server's default; the server fits them, see Rings).
	RingEntries, RingSlotSize uint32
}

// Pages returns the number of pages Bytes covers.
func (r *Request) Pages() int { return int((r.Bytes + PageSize - 1) / PageSize) }

// bodyLen is the fixed body length of each op; -1 for variable bodies.
var bodyLen = [numOps]int{
	OpHello: 40, OpAlloc: 16, OpFree: 0, OpMap: 24, OpUnmap: 16, OpTranslate: 16,
	OpLoad: 8, OpStore: -1, OpCAS: 16, OpFetchAdd: 8, OpAcquire: 8, OpRelease: 0,
	OpLock: 8, OpUnlock: 0, OpWhere: 0, OpSubscribe: 8, OpRings: 16, OpMaps: -1,
	OpClock: 0, OpBulk: 16, OpStoreBulk: 8, OpLoadBulk: 8,
}

// DecodeRequest decodes and checks the request in b. On success every field
// of r's op is in range; r.Data aliases b. It does not allocate.
func DecodeRequest(b []byte, r *Request) error {
	*r = Request{}
	if err := r.Header.Decode(b); err != nil {
		return err
	}
	if r.Kind != KindRequest {
		return fmt.Errorf("%w: kind %d in a request", ErrKind, r.Kind)
	}
	if r.Header.Flags != 0 || r.Status != 0 {
		return fmt.Errorf("%w: header flags %#x status %#x", ErrReserved, r.Header.Flags, r.Status)
	}
	body := b[HeaderLen:]
	le := binary.LittleEndian
	if r.Op.IsGPU() {
		if len(body) > MaxBody {
			return fmt.Errorf("%w: %s body of %d bytes", ErrLength, r.Op, len(body))
		}
		r.Data = body
		return nil
	}
	if r.Op == 0 || r.Op >= numOps {
		return fmt.Errorf("%w: %d", ErrUnknownOp, uint16(r.Op))
	}
	if want := bodyLen[r.Op]; want >= 0 && len(body) != want {
		return fmt.Errorf("%w: %s body of %d bytes, want %d", ErrLength, r.Op, len(body), want)
	}
	switch r.Op {
	case OpHello:
		r.Min, r.Max = le.Uint16(body[0:]), le.Uint16(body[2:])
		copy(r.Name[:], body[8:40])
		if le.Uint32(body[4:]) != 0 {
			return fmt.Errorf("%w: hello", ErrReserved)
		}
		if r.Min == 0 || r.Min > r.Max {
			return fmt.Errorf("%w: hello versions %d..%d", ErrField, r.Min, r.Max)
		}
		return needZeroGVA(r)
	case OpAlloc:
		r.Bytes, r.Mode, r.Flags = le.Uint64(body[0:]), le.Uint32(body[8:]), le.Uint32(body[12:])
		if r.Bytes == 0 || r.Bytes > MaxAllocBytes {
			return fmt.Errorf("%w: alloc of %d bytes", ErrField, r.Bytes)
		}
		if r.Mode&^ModeMask != 0 || r.Flags&^AllocHuge != 0 {
			return fmt.Errorf("%w: alloc mode %#o flags %#x", ErrField, r.Mode, r.Flags)
		}
		return needZeroGVA(r)
	case OpFree:
		return needPageStart(r)
	case OpMap:
		r.LVA, r.Bytes, r.Flags = le.Uint64(body[0:]), le.Uint64(body[8:]), le.Uint32(body[16:])
		if le.Uint32(body[20:]) != 0 {
			return fmt.Errorf("%w: map", ErrReserved)
		}
		if r.Flags&^MapNoFD != 0 || (r.Flags&MapNoFD != 0 && r.LVA != 0) {
			return fmt.Errorf("%w: map flags %#x with lva %#x", ErrField, r.Flags, r.LVA)
		}
		return checkRange(r)
	case OpUnmap:
		r.LVA, r.Bytes = le.Uint64(body[0:]), le.Uint64(body[8:])
		return checkRange(r)
	case OpTranslate:
		r.Dir, r.LVA = le.Uint32(body[0:]), le.Uint64(body[8:])
		if le.Uint32(body[4:]) != 0 {
			return fmt.Errorf("%w: translate", ErrReserved)
		}
		switch r.Dir {
		case TranslateToGVA:
			return needZeroGVA(r)
		case TranslateToLVA:
			if r.LVA != 0 {
				return fmt.Errorf("%w: translate to lva with lva %#x", ErrField, r.LVA)
			}
			return nil
		}
		return fmt.Errorf("%w: translate direction %d", ErrField, r.Dir)
	case OpLoad:
		r.Len = le.Uint32(body[0:])
		if le.Uint32(body[4:]) != 0 {
			return fmt.Errorf("%w: load", ErrReserved)
		}
		return checkInPage(r, int(r.Len))
	case OpStore:
		r.Data = body
		return checkInPage(r, len(body))
	case OpCAS:
		r.Expected, r.Desired = le.Uint64(body[0:]), le.Uint64(body[8:])
		return checkAligned8(r)
	case OpFetchAdd:
		r.Delta = le.Uint64(body[0:])
		return checkAligned8(r)
	case OpAcquire:
		r.TimeoutMS = le.Uint32(body[0:])
		if le.Uint32(body[4:]) != 0 {
			return fmt.Errorf("%w: acquire", ErrReserved)
		}
	case OpLock:
		r.TimeoutMS, r.Flags = le.Uint32(body[0:]), le.Uint32(body[4:])
		if r.Flags&^LockTry != 0 {
			return fmt.Errorf("%w: lock flags %#x", ErrField, r.Flags)
		}
	case OpSubscribe:
		r.Mask = le.Uint32(body[0:])
		if le.Uint32(body[4:]) != 0 {
			return fmt.Errorf("%w: subscribe", ErrReserved)
		}
		if r.Mask&^AllEvents != 0 {
			return fmt.Errorf("%w: subscribe mask %#x", ErrField, r.Mask)
		}
		return needZeroGVA(r)
	case OpRings:
		r.RingEntries, r.RingSlotSize = le.Uint32(body[0:]), le.Uint32(body[4:])
		if le.Uint64(body[8:]) != 0 {
			return fmt.Errorf("%w: rings", ErrReserved)
		}
		return needZeroGVA(r)
	case OpMaps:
		r.Data = body
		if _, err := DecodeMapsReport(body, nil); err != nil {
			return err
		}
		return needZeroGVA(r)
	case OpClock:
		return needZeroGVA(r)
	case OpBulk:
		r.Bytes = le.Uint64(body[0:])
		if le.Uint64(body[8:]) != 0 {
			return fmt.Errorf("%w: bulk", ErrReserved)
		}
		if r.Bytes == 0 || r.Bytes > MaxBulkArea || r.Bytes%PageSize != 0 {
			return fmt.Errorf("%w: bulk area of %d bytes (whole pages, up to %d)", ErrField, r.Bytes, MaxBulkArea)
		}
		return needZeroGVA(r)
	case OpStoreBulk, OpLoadBulk:
		r.Len, r.Off = le.Uint32(body[0:]), le.Uint32(body[4:])
		if r.Len == 0 || r.Len > MaxBulk {
			return fmt.Errorf("%w: %s of %d bytes (1..%d)", ErrField, r.Op, r.Len, MaxBulk)
		}
		if uint64(r.Off)+uint64(r.Len) > MaxBulkArea {
			return fmt.Errorf("%w: %s past the largest bulk area", ErrField, r.Op)
		}
		if r.GVA.Lo+uint64(r.Len) < r.GVA.Lo {
			return fmt.Errorf("%w: %s range wraps", ErrField, r.Op)
		}
	}
	return nil
}

func needZeroGVA(r *Request) error {
	if !r.GVA.IsZero() {
		return fmt.Errorf("%w: %s carries a gva", ErrReserved, r.Op)
	}
	return nil
}

func needPageStart(r *Request) error {
	if r.GVA.Offset() != 0 {
		return fmt.Errorf("%w: %s of %v: not a page start", ErrField, r.Op, r.GVA)
	}
	return nil
}

// checkRange checks the page range of MAP and UNMAP.
func checkRange(r *Request) error {
	if err := needPageStart(r); err != nil {
		return err
	}
	if r.Bytes == 0 || r.Bytes > MaxMapPages*PageSize {
		return fmt.Errorf("%w: %s of %d bytes (1..%d)", ErrField, r.Op, r.Bytes, MaxMapPages*PageSize)
	}
	if r.LVA%PageSize != 0 {
		return fmt.Errorf("%w: %s lva %#x not page aligned", ErrField, r.Op, r.LVA)
	}
	span := uint64(r.Pages()) * PageSize
	if r.GVA.Lo+span < r.GVA.Lo || (r.LVA != 0 && r.LVA+span < r.LVA) {
		return fmt.Errorf("%w: %s range wraps", ErrField, r.Op)
	}
	return nil
}

func checkInPage(r *Request, n int) error {
	if n < 1 || n > PageSize || int(r.GVA.Offset())+n > PageSize {
		return fmt.Errorf("%w: %s of %d bytes at offset %d crosses a page", ErrField, r.Op, n, r.GVA.Offset())
	}
	return nil
}

func checkAligned8(r *Request) error {
	if r.GVA.Offset()%8 != 0 {
		return fmt.Errorf("%w: %s at offset %d: not 8-byte aligned", ErrField, r.Op, r.GVA.Offset())
	}
	return nil
}

// AppendRequest appends the encoding of r (kind, flags and status are set
// by this function) to b. It does not check r; servers do.
func AppendRequest(b []byte, r *Request) []byte {
	h := r.Header
	h.Kind, h.Flags, h.Status = KindRequest, 0, 0
	b = h.Append(b)
	le := binary.LittleEndian
	switch {
	case r.Op == OpHello:
		b = le.AppendUint16(b, r.Min)
		b = le.AppendUint16(b, r.Max)
		b = le.AppendUint32(b, 0)
		b = append(b, r.Name[:]...)
	case r.Op == OpAlloc:
		b = le.AppendUint64(b, r.Bytes)
		b = le.AppendUint32(b, r.Mode)
		b = le.AppendUint32(b, r.Flags)
	case r.Op == OpMap:
		b = le.AppendUint64(b, r.LVA)
		b = le.AppendUint64(b, r.Bytes)
		b = le.AppendUint32(b, r.Flags)
		b = le.AppendUint32(b, 0)
	case r.Op == OpUnmap:
		b = le.AppendUint64(b, r.LVA)
		b = le.AppendUint64(b, r.Bytes)
	case r.Op == OpTranslate:
		b = le.AppendUint32(b, r.Dir)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, r.LVA)
	case r.Op == OpLoad:
		b = le.AppendUint32(b, r.Len)
		b = le.AppendUint32(b, 0)
	case r.Op == OpStore || r.Op == OpMaps || r.Op.IsGPU():
		b = append(b, r.Data...)
	case r.Op == OpCAS:
		b = le.AppendUint64(b, r.Expected)
		b = le.AppendUint64(b, r.Desired)
	case r.Op == OpFetchAdd:
		b = le.AppendUint64(b, r.Delta)
	case r.Op == OpAcquire:
		b = le.AppendUint32(b, r.TimeoutMS)
		b = le.AppendUint32(b, 0)
	case r.Op == OpLock:
		b = le.AppendUint32(b, r.TimeoutMS)
		b = le.AppendUint32(b, r.Flags)
	case r.Op == OpSubscribe:
		b = le.AppendUint32(b, r.Mask)
		b = le.AppendUint32(b, 0)
	case r.Op == OpBulk:
		b = le.AppendUint64(b, r.Bytes)
		b = le.AppendUint64(b, 0)
	case r.Op == OpStoreBulk || r.Op == OpLoadBulk:
		b = le.AppendUint32(b, r.Len)
		b = le.AppendUint32(b, r.Off)
	case r.Op == OpRings:
		b = le.AppendUint32(b, r.RingEntries)
		b = le.AppendUint32(b, r.RingSlotSize)
		b = le.AppendUint64(b, 0)
	}
	return b
}

// PageAt returns the GVA of the i-th page of the range starting at page g.
func PageAt(g gva.GVA, i int) gva.GVA {
	g.Lo += uint64(i) * PageSize
	return g
}
