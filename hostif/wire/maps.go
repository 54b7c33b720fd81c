package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/aitherion/dpu/gva"
)

// MAPS (op 18) carries what dpu_mmap keeps in a process: its areas and
// their fault counts. The library sends a report (a non-empty body: every
// area the process maps now, MapsEntryLen bytes each; the last report of a
// connection replaces the one before, and it ends with the connection);
// dpuctl mem maps sends an empty body and gets the host's reports back:
//
//	reply: u32 total entries, u32 n in this reply, n × {u32 pid, u32 uid, entry}
//
// Entry (MapsEntryLen = 72 bytes, little-endian):
//
//	0  u64 lva         8  u64 bytes       16 u64 gva hi     24 u64 gva lo
//	32 u32 prot (PROT_READ 1 | PROT_WRITE 2)  36 u32 reserved, 0
//	40 u64 read faults 48 u64 write faults 56 u64 write-backs 64 u64 drops
const (
	MapsEntryLen    = 72
	MapsListedLen   = 8 + MapsEntryLen
	MaxMapsReported = MaxBody / MapsEntryLen        // entries in one report
	MaxMapsListed   = (MaxBody - 8) / MapsListedLen // entries in one list reply
	mapsProtMask    = 3
)

// MapsEntry is one dpu_mmap area of a process.
type MapsEntry struct {
	LVA, Bytes                                 uint64
	GVA                                        gva.GVA
	Prot                                       uint32
	ReadFaults, WriteFaults, Writebacks, Drops uint64
}

// MapsListed is an entry of a list reply: the area and its process.
type MapsListed struct {
	PID, UID uint32
	MapsEntry
}

// AppendMapsEntry appends the encoding of e.
func AppendMapsEntry(b []byte, e MapsEntry) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, e.LVA)
	b = le.AppendUint64(b, e.Bytes)
	b = le.AppendUint64(b, e.GVA.Hi)
	b = le.AppendUint64(b, e.GVA.Lo)
	b = le.AppendUint32(b, e.Prot)
	b = le.AppendUint32(b, 0)
	for _, v := range []uint64{e.ReadFaults, e.WriteFaults, e.Writebacks, e.Drops} {
		b = le.AppendUint64(b, v)
	}
	return b
}

func decodeMapsEntry(b []byte) (MapsEntry, error) {
	le := binary.LittleEndian
	e := MapsEntry{LVA: le.Uint64(b[0:]), Bytes: le.Uint64(b[8:]), GVA: gva.GVA{Hi: le.Uint64(b[16:]), Lo: le.Uint64(b[24:])},
		Prot: le.Uint32(b[32:]), ReadFaults: le.Uint64(b[40:]), WriteFaults: le.Uint64(b[48:]),
		Writebacks: le.Uint64(b[56:]), Drops: le.Uint64(b[64:])}
	switch {
	case le.Uint32(b[36:]) != 0:
		return e, fmt.Errorf("%w: maps entry", ErrReserved)
	case e.Prot&^mapsProtMask != 0 || e.Prot == 0:
		return e, fmt.Errorf("%w: maps prot %#x", ErrField, e.Prot)
	case e.Bytes == 0 || e.LVA%PageSize != 0 || e.GVA.Offset() != 0 || e.LVA+e.Bytes < e.LVA:
		return e, fmt.Errorf("%w: maps area of %d bytes at lva %#x gva %v", ErrField, e.Bytes, e.LVA, e.GVA)
	}
	return e, nil
}

// DecodeMapsReport decodes a MAPS request body (a report; empty: a list
// request) and appends its entries to dst.
func DecodeMapsReport(b []byte, dst []MapsEntry) ([]MapsEntry, error) {
	if len(b)%MapsEntryLen != 0 || len(b) > MaxMapsReported*MapsEntryLen {
		return dst, fmt.Errorf("%w: maps body of %d bytes", ErrLength, len(b))
	}
	for ; len(b) > 0; b = b[MapsEntryLen:] {
		e, err := decodeMapsEntry(b)
		if err != nil {
			return dst, err
		}
		dst = append(dst, e)
	}
	return dst, nil
}

// AppendMapsList appends a list reply body: total, then the entries (at
// most MaxMapsListed of them).
func AppendMapsList(b []byte, total int, entries []MapsListed) []byte {
	if len(entries) > MaxMapsListed {
		entries = entries[:MaxMapsListed]
	}
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(total))
	b = le.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = le.AppendUint32(b, e.PID)
		b = le.AppendUint32(b, e.UID)
		b = AppendMapsEntry(b, e.MapsEntry)
	}
	return b
}

// DecodeMapsList decodes a list reply body.
func DecodeMapsList(b []byte) (total int, entries []MapsListed, err error) {
	le := binary.LittleEndian
	if len(b) < 8 {
		return 0, nil, fmt.Errorf("%w: maps list of %d bytes", ErrLength, len(b))
	}
	total, n := int(le.Uint32(b)), int(le.Uint32(b[4:]))
	b = b[8:]
	if n > MaxMapsListed || len(b) != n*MapsListedLen || n > total {
		return 0, nil, fmt.Errorf("%w: maps list of %d entries in %d bytes", ErrLength, n, len(b))
	}
	for ; len(b) > 0; b = b[MapsListedLen:] {
		e, err := decodeMapsEntry(b[8:])
		if err != nil {
			return 0, nil, err
		}
		entries = append(entries, MapsListed{PID: le.Uint32(b), UID: le.Uint32(b[4:]), MapsEntry: e})
	}
	return total, entries, nil
}
