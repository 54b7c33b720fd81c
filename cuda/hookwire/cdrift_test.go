package hookwire

import (
	"testing"

	"github.com/aitherion/dpu/internal/cconst"
)

// TestCHookWire holds the CUDA hook's copy of the GPU accounting wire
// (cuda/hook/src/gpu_wire.h) to this package's.
func TestCHookWire(t *testing.T) {
	m, err := cconst.File("../hook/src/gpu_wire.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cconst.Drift(m, map[string]int64{
		"GPU_OP_MEM_LIMIT": int64(OpMemLimit), "GPU_OP_MEM_UPDATE": int64(OpMemUpdate), "GPU_OP_KERNEL_QUOTA": int64(OpKernelQuota),
		"GPU_OP_MEM_PROCS": int64(OpMemProcs), "GPU_PROCS_REQ_LEN": ProcsRequest, "GPU_PROCS_HEAD_LEN": ProcsHeadLen,
		"GPU_PROC_LEN": ProcLen, "GPU_MAX_PROCS": MaxProcs,
		"GPU_DEVICE_LEN": DeviceLen, "GPU_LIMIT_REQ_LEN": LimitRequest, "GPU_UPDATE_REQ_LEN": UpdateRequest,
		"GPU_QUOTA_REQ_LEN": QuotaRequest, "GPU_LIMITS_LEN": LimitsLen, "GPU_TOKEN_LEN": TokenLen,
	}, "gpu_wire.h") {
		t.Error(d)
	}
}
