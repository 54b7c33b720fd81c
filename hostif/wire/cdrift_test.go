package wire

import (
	"path/filepath"
	"testing"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/cconst"
)

// TestCLibraryConstants holds the C library's copy of the host wire
// (hostif/c: dpu.h and dpu.c) to this package's definitions: a constant
// changed on one side only fails here.
func TestCLibraryConstants(t *testing.T) {
	want := map[string]int64{
		// dpu.c
		"HDR": HeaderLen, "PAGE": PageSize, "MAX_BODY": MaxBody, "MAX_MSG": MaxMessage, "MAX_MAP_PAGES": MaxMapPages,
		"SLOT_SIZE": SlotSize, "HELLO_LEN": HelloLen, "PROTO_MIN": VersionMin, "PROTO_MAX": VersionMax,
		"KIND_REQUEST": int64(KindRequest), "KIND_REPLY": int64(KindReply), "KIND_EVENT": int64(KindEvent),
		"OP_HELLO": int64(OpHello), "OP_ALLOC": int64(OpAlloc), "OP_FREE": int64(OpFree), "OP_MAP": int64(OpMap),
		"OP_UNMAP": int64(OpUnmap), "OP_TRANSLATE": int64(OpTranslate), "OP_LOAD": int64(OpLoad), "OP_STORE": int64(OpStore),
		"OP_CAS": int64(OpCAS), "OP_FETCH_ADD": int64(OpFetchAdd), "OP_ACQUIRE": int64(OpAcquire), "OP_RELEASE": int64(OpRelease),
		"OP_LOCK": int64(OpLock), "OP_UNLOCK": int64(OpUnlock), "OP_WHERE": int64(OpWhere), "OP_SUBSCRIBE": int64(OpSubscribe),
		"OP_RINGS": int64(OpRings), "OP_CLOCK": int64(OpClock), "OP_BULK": int64(OpBulk), "OP_STORE_BULK": int64(OpStoreBulk),
		"OP_LOAD_BULK": int64(OpLoadBulk), "SLOT_VALID": int64(SlotValid), "LOCK_TRY": int64(LockTry),
		// dpu.h
		"DPU_PAGE_SIZE": PageSize, "DPU_GVA_TEXT_LEN": int64(len(gva.GVA{}.String())),
		"DPU_TIER_LOCAL": int64(gva.TierLocal), "DPU_TIER_MACHINE": int64(gva.TierMachine),
		"DPU_TIER_NEIGHBOUR": int64(gva.TierNeighbour), "DPU_TIER_REMOTE": int64(gva.TierRemote),
		"DPU_SPEED_MEMORY": int64(gva.SpeedMemory), "DPU_SPEED_FAST_DISK": int64(gva.SpeedFastDisk), "DPU_SPEED_SLOW_DISK": int64(gva.SpeedSlowDisk),
		"DPU_EVENT_INVALIDATED": int64(EventInvalidated), "DPU_EVENT_UPDATED": int64(EventUpdated),
		"DPU_EVENT_HOST_FAULT": int64(EventHostFault), "DPU_EVENT_OWNERSHIP_LOST": int64(EventOwnershipLost),
		"DPU_EVENT_FREED": int64(EventFreed), "DPU_EVENT_LOST": int64(EventLost), "DPU_EVENTS_ALL": int64(AllEvents),
	}
	got, err := cconst.File(filepath.FromSlash("../c/include/dpu.h"), filepath.FromSlash("../c/src/dpu.c"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cconst.Drift(got, want, "the C library") {
		t.Error(d)
	}
}
