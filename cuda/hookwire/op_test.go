package hookwire

import (
	"testing"

	"github.com/aitherion/dpu/hostif/wire"
)

// The op numbers are the host interface's: the hook sends them in its
// message headers.
func TestOpsAreHostInterfaceOps(t *testing.T) {
	for _, c := range []struct {
		op   Op
		host wire.Op
	}{{OpMemLimit, wire.OpGPUMemLimit}, {OpMemUpdate, wire.OpGPUMemUpdate}, {OpKernelQuota, wire.OpGPUKernelQuota}} {
		if uint16(c.op) != uint16(c.host) || !c.host.IsGPU() || c.op.String() != c.host.String() {
			t.Errorf("op %s (%d) is host op %s (%d)", c.op, c.op, c.host, c.host)
		}
	}
	if s := Op(79).String(); s != "gpu(79)" {
		t.Errorf("Op(79) = %q", s)
	}
}
