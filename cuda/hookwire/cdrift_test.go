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
	for name, v := range map[string]int64{
		"GPU_OP_MEM_LIMIT": int64(OpMemLimit), "GPU_OP_MEM_UPDATE": int64(OpMemUpdate), "GPU_OP_KERNEL_QUOTA": int64(OpKernelQuota),
		"GPU_DEVICE_LEN": DeviceLen, "GPU_LIMIT_REQ_LEN": LimitRequest, "GPU_UPDATE_REQ_LEN": UpdateRequest,
		"GPU_QUOTA_REQ_LEN": QuotaRequest, "GPU_LIMITS_LEN": LimitsLen, "GPU_TOKEN_LEN": TokenLen,
	} {
		c, ok := m[name]
		switch {
		case !ok:
			t.Errorf("%s: not defined in gpu_wire.h", name)
		case c != v:
			t.Errorf("%s: gpu_wire.h says %d, the Go wire %d", name, c, v)
		}
	}
}
