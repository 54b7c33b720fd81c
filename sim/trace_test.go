package sim

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// The completion trace line written without fmt is byte for byte the
// line tracef writes, so a seed's trace hash does not depend on which.
func TestTraceCompletionLine(t *testing.T) {
	var got, want []string
	w := &World{cfg: Config{Trace: func(l string) { got = append(got, l) }}}
	w.trace = fakeHash{}
	g := gva.New(3, 77, 0, 0).WithOffset(24)
	for i, tc := range []struct {
		now     time.Duration
		n       noc.NodeID
		op      coherence.HostOp
		errno   syscall.Errno
		v       gva.Version
		x       uint64
		swapped bool
	}{
		{0, 0, coherence.HostRef, 0, 0, 0, false},
		{1234567 * time.Nanosecond, 1023, coherence.HostCAS, syscall.ETIMEDOUT, 42, 1<<64 - 1, true},
		{3*time.Second + 5, 7, coherence.HostOp(200), syscall.EACCES, 9, 3, false},
	} {
		w.now = tc.now
		w.traceCompletion(tc.n, tc.op, g, tc.errno, tc.v, tc.x, tc.swapped)
		w.tracef("n%d %v %v e=%d v=%d x=%d s=%v", tc.n, tc.op, g, tc.errno, tc.v, tc.x, tc.swapped)
		want = append(want, fmt.Sprintf("%v ", tc.now)+fmt.Sprintf("n%d %v %v e=%d v=%d x=%d s=%v", tc.n, tc.op, g, tc.errno, tc.v, tc.x, tc.swapped))
		if got[2*i] != want[i] || got[2*i+1] != want[i] {
			t.Errorf("line %d: traceCompletion %q, tracef %q, want %q", i, got[2*i], got[2*i+1], want[i])
		}
	}
}

type fakeHash struct{}

func (fakeHash) Write(b []byte) (int, error) { return len(b), nil }
func (fakeHash) Sum(b []byte) []byte         { return b }
func (fakeHash) Reset()                      {}
func (fakeHash) Size() int                   { return 8 }
func (fakeHash) BlockSize() int              { return 1 }
func (fakeHash) Sum64() uint64               { return 0 }
