package remote

import (
	"encoding/binary"
	"hash/crc32"
)

// The staging page format of src/wire.h (held to it by TestCWire): the Go
// side reads pages the remoting left in fabric memory (tools, tests).
const (
	Version      = 4    // RW_VERSION
	Page         = 4096 // RW_PAGE
	StageHdr     = 16   // sizeof(struct rw_stage_hdr): u64 seq, u64 token
	StageTail    = 8    // RW_STAGE_TRAILER: u32 CRC-32C, u32 index
	StageData    = Page - StageHdr - StageTail
	ChunkPages   = 64   // RW_CHUNK_PAGES
	CorruptMS    = 2000 // RW_CORRUPT_MS
	XferPaged    = 1    // RW_XFER_PAGED
	StagingPages = 1024 // STAGING_PAGES_DEFAULT
)

// Page check verdicts (mbox.h's PAGE_OK, PAGE_STALE, PAGE_BAD).
const (
	PageOK    = 0
	PageStale = 1
	PageBad   = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func pageSum(page []byte, m int, index uint32) uint32 {
	var ix [4]byte
	binary.LittleEndian.PutUint32(ix[:], index)
	return crc32.Update(crc32.Update(0, castagnoli, page[:StageHdr+m]), castagnoli, ix[:])
}

// FormatPage returns the staging page (header, data, trailer) that holds
// data (at most StageData bytes) as page index of message seq of the
// session token.
func FormatPage(seq, token uint64, index uint32, data []byte) []byte {
	if len(data) > StageData {
		panic("remote: staging page data too long")
	}
	p := make([]byte, StageHdr+len(data)+StageTail)
	binary.LittleEndian.PutUint64(p, seq)
	binary.LittleEndian.PutUint64(p[8:], token)
	copy(p[StageHdr:], data)
	binary.LittleEndian.PutUint32(p[StageHdr+len(data):], pageSum(p, len(data), index))
	binary.LittleEndian.PutUint32(p[StageHdr+len(data)+4:], index)
	return p
}

// CheckPage says whether page holds m data bytes as page index of message
// seq of the session token, as mbox.c's page_check does: PageOK, PageStale
// (another message's or session's, or too short to hold them) or PageBad
// (this message's header, a wrong checksum or index). On PageOK the data
// is page[StageHdr:StageHdr+m].
func CheckPage(page []byte, m int, seq, token uint64, index uint32) int {
	if m < 0 || m > StageData || len(page) < StageHdr+m+StageTail {
		return PageStale
	}
	if binary.LittleEndian.Uint64(page) != seq || binary.LittleEndian.Uint64(page[8:]) != token {
		return PageStale
	}
	crc := binary.LittleEndian.Uint32(page[StageHdr+m:])
	ix := binary.LittleEndian.Uint32(page[StageHdr+m+4:])
	if crc == pageSum(page, m, index) && ix == index {
		return PageOK
	}
	return PageBad
}
