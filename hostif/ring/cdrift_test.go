package ring

import (
	"testing"

	"github.com/aitherion/dpu/internal/cconst"
)

// TestCRingLayout holds the C library's copy of the ring layout
// (hostif/c/src/ring.c) to this package's.
func TestCRingLayout(t *testing.T) {
	m, err := cconst.File("../c/src/ring.c")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cconst.Drift(m, map[string]int64{
		"MAGIC": Magic, "LAYOUT_VERSION": LayoutVersion,
		"OFF_MAGIC": offMagic, "OFF_VERSION": offVersion, "OFF_ENTRIES": offEntries, "OFF_SLOT_SIZE": offSlotSize, "OFF_MAP_SIZE": offMapSize,
		"OFF_SQ_PRODUCER": offSQProducer, "OFF_SQ_CONSUMER": offSQConsumer, "OFF_SQ_FLAGS": offSQFlags,
		"OFF_CQ_PRODUCER": offCQProducer, "OFF_CQ_CONSUMER": offCQConsumer, "OFF_CQ_FLAGS": offCQFlags,
		"CONTROL_SIZE": ControlSize, "SLOT_HEADER": SlotHeader, "SLOT_SEQ": slotSeq,
		"MIN_ENTRIES": MinEntries, "MAX_ENTRIES": MaxEntries, "MIN_SLOT": MinSlotSize, "MAX_SLOT": MaxSlotSize,
		"NEED_WAKEUP": int64(NeedWakeup), "HOST_WAITING": int64(HostWaiting),
	}, "ring.c") {
		t.Error(d)
	}
}
