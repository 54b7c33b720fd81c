package verbs

// The C decoders of the bytes peers read in fabric pages (src/wire.c),
// reached from Go so that the fuzz tests can run them; the library itself
// is C and has no Go code.

/*
#cgo CFLAGS: -std=c11 -Wall -Wextra -Werror
#include <stdlib.h>
#include "src/wire.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Slot is a mailbox slot's header.
type Slot struct {
	Seq         uint64
	Op, Flags   uint16
	Len, Imm    uint32
	Rkey        uint32
	Addr        uint64
	Total, SrcQ uint32
}

// QPEntry is a directory's QP entry.
type QPEntry struct {
	MboxLo                   uint64
	MboxHi, QPN, Slots, Live uint32
}

// MREntry is a directory's MR entry.
type MREntry struct {
	Vaddr, Length, GVALo uint64
	Rkey, Access         uint32
}

// DirHeader is a directory's header.
type DirHeader struct {
	Magic                        uint64
	Version, Pages, MaxQP, MaxMR uint32
}

// Sizes of the encodings.
const (
	SlotHeader    = C.SLOT_HDR
	QPEntrySize   = C.QP_ENTRY
	MREntrySize   = C.MR_ENTRY
	DirHeaderSize = C.DIR_HDR
	SlotData      = C.SLOT_DATA
	MaxMessage    = C.MAX_MSG
	MaxQP         = C.MAX_QP
)

func cbytes(b []byte) (*C.uint8_t, C.size_t, func()) {
	p := C.malloc(C.size_t(len(b)) + 1)
	copy(unsafe.Slice((*byte)(p), len(b)), b)
	return (*C.uint8_t)(p), C.size_t(len(b)), func() { C.free(p) }
}

func decodeErr(rc C.int) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("verbs: decode: errno %d", -int(rc))
}

// ParseSlot decodes a slot header with the library's decoder.
func ParseSlot(b []byte) (Slot, error) {
	p, n, free := cbytes(b)
	defer free()
	var s C.struct_vb_slot
	if err := decodeErr(C.vb_slot_get(p, n, &s)); err != nil {
		return Slot{}, err
	}
	return Slot{uint64(s.seq), uint16(s.op), uint16(s.flags), uint32(s.len), uint32(s.imm), uint32(s.rkey),
		uint64(s.addr), uint32(s.total), uint32(s.src_qpn)}, nil
}

// AppendSlot encodes a slot header with the library's encoder.
func AppendSlot(b []byte, s Slot) []byte {
	var out [C.SLOT_HDR]byte
	cs := C.struct_vb_slot{seq: C.uint64_t(s.Seq), op: C.uint16_t(s.Op), flags: C.uint16_t(s.Flags),
		len: C.uint32_t(s.Len), imm: C.uint32_t(s.Imm), rkey: C.uint32_t(s.Rkey), addr: C.uint64_t(s.Addr),
		total: C.uint32_t(s.Total), src_qpn: C.uint32_t(s.SrcQ)}
	C.vb_slot_put((*C.uint8_t)(unsafe.Pointer(&out[0])), &cs)
	return append(b, out[:]...)
}

// ParseQPEntry decodes a QP entry.
func ParseQPEntry(b []byte) (QPEntry, error) {
	p, n, free := cbytes(b)
	defer free()
	var e C.struct_vb_qp_entry
	if err := decodeErr(C.vb_qp_entry_get(p, n, &e)); err != nil {
		return QPEntry{}, err
	}
	return QPEntry{uint64(e.mbox_lo), uint32(e.mbox_hi), uint32(e.qpn), uint32(e.slots), uint32(e.live)}, nil
}

// AppendQPEntry encodes a QP entry.
func AppendQPEntry(b []byte, e QPEntry) []byte {
	var out [C.QP_ENTRY]byte
	ce := C.struct_vb_qp_entry{mbox_lo: C.uint64_t(e.MboxLo), mbox_hi: C.uint32_t(e.MboxHi), qpn: C.uint32_t(e.QPN),
		slots: C.uint32_t(e.Slots), live: C.uint32_t(e.Live)}
	C.vb_qp_entry_put((*C.uint8_t)(unsafe.Pointer(&out[0])), &ce)
	return append(b, out[:]...)
}

// ParseMREntry decodes an MR entry.
func ParseMREntry(b []byte) (MREntry, error) {
	p, n, free := cbytes(b)
	defer free()
	var e C.struct_vb_mr_entry
	if err := decodeErr(C.vb_mr_entry_get(p, n, &e)); err != nil {
		return MREntry{}, err
	}
	return MREntry{uint64(e.vaddr), uint64(e.length), uint64(e.gva_lo), uint32(e.rkey), uint32(e.access)}, nil
}

// AppendMREntry encodes an MR entry.
func AppendMREntry(b []byte, e MREntry) []byte {
	var out [C.MR_ENTRY]byte
	ce := C.struct_vb_mr_entry{vaddr: C.uint64_t(e.Vaddr), length: C.uint64_t(e.Length), gva_lo: C.uint64_t(e.GVALo),
		rkey: C.uint32_t(e.Rkey), access: C.uint32_t(e.Access)}
	C.vb_mr_entry_put((*C.uint8_t)(unsafe.Pointer(&out[0])), &ce)
	return append(b, out[:]...)
}

// ParseDirHeader decodes a directory header.
func ParseDirHeader(b []byte) (DirHeader, error) {
	p, n, free := cbytes(b)
	defer free()
	var h C.struct_vb_dir_hdr
	if err := decodeErr(C.vb_dir_hdr_get(p, n, &h)); err != nil {
		return DirHeader{}, err
	}
	return DirHeader{uint64(h.magic), uint32(h.version), uint32(h.pages), uint32(h.max_qp), uint32(h.max_mr)}, nil
}

// AppendDirHeader encodes a directory header.
func AppendDirHeader(b []byte, h DirHeader) []byte {
	var out [C.DIR_HDR]byte
	ch := C.struct_vb_dir_hdr{magic: C.uint64_t(h.Magic), version: C.uint32_t(h.Version), pages: C.uint32_t(h.Pages),
		max_qp: C.uint32_t(h.MaxQP), max_mr: C.uint32_t(h.MaxMR)}
	C.vb_dir_hdr_put((*C.uint8_t)(unsafe.Pointer(&out[0])), &ch)
	return append(b, out[:]...)
}
