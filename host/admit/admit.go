package admit

import (
	"fmt"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Bounds are what a node puts on the requests it admits.
type Bounds struct {
	// Op bounds every request but the data path's (which the core bounds
	// itself) and LOCK and ACQUIRE.
	Op time.Duration
	// Lock is the wait of a LOCK or ACQUIRE that names none; MaxLock caps
	// the ones that do.
	Lock, MaxLock time.Duration
	// DefaultMode is the mode of the pages an ALLOC with mode 0 makes.
	DefaultMode uint32
}

// Timeout is the bound of request r: b.Op, or for a LOCK or an ACQUIRE
// its own timeout (capped by b.MaxLock) or b.Lock.
func (b Bounds) Timeout(r *wire.Request) time.Duration {
	if r.Op == wire.OpLock || r.Op == wire.OpAcquire {
		if r.TimeoutMS > 0 {
			return min(time.Duration(r.TimeoutMS)*time.Millisecond, b.MaxLock)
		}
		return b.Lock
	}
	return b.Op
}

// AllocAttr is the owner and mode of the pages ALLOC r of user cred
// makes.
func (b Bounds) AllocAttr(r *wire.Request, cred coherence.Cred) gva.Attr {
	mode := r.Mode
	if mode == 0 {
		mode = b.DefaultMode
	}
	return gva.Attr{UID: cred.UID, GID: cred.GID, Mode: mode}
}

// coreOps is the one table from the wire's operations to the core's.
var coreOps = [...]coherence.HostOp{
	wire.OpAlloc: coherence.HostAlloc, wire.OpFree: coherence.HostFree,
	wire.OpLoad: coherence.HostLoad, wire.OpStore: coherence.HostStore, wire.OpCAS: coherence.HostCAS,
	wire.OpFetchAdd: coherence.HostFetchAdd, wire.OpWhere: coherence.HostWhere,
	wire.OpAcquire: coherence.HostAcquire, wire.OpRelease: coherence.HostRelease,
	wire.OpLock: coherence.HostLock, wire.OpUnlock: coherence.HostUnlock,
}

// Core is the core's operation of wire operation o (0: the core has
// none; the server serves o itself).
func Core(o wire.Op) coherence.HostOp {
	if int(o) < len(coreOps) {
		return coreOps[o]
	}
	return 0
}

// Request is the core's request of the decoded (wire.DecodeRequest) r of
// user cred, bounded by b; its ID and Tag are the caller's to set. r's op
// must be one of the core's (Core(r.Op) != 0). The request's data aliases
// r's.
func Request(r *wire.Request, cred coherence.Cred, b Bounds) (coherence.Request, error) {
	cr := coherence.Request{Op: Core(r.Op), GVA: r.GVA, Cred: admitted(cred)}
	switch r.Op {
	case wire.OpAlloc:
		if r.Flags&wire.AllocHuge != 0 {
			return coherence.Request{}, fmt.Errorf("alloc: huge pages: %w", syscall.EOPNOTSUPP)
		}
		cr.Pages, cr.Attr, cr.GVA = r.Pages(), b.AllocAttr(r, cred), gva.GVA{}
	case wire.OpLock:
		cr.Try, cr.GVA = r.Flags&wire.LockTry != 0, r.GVA.Key()
	case wire.OpFree, wire.OpAcquire, wire.OpRelease, wire.OpUnlock:
		cr.GVA = r.GVA.Key()
	case wire.OpLoad:
		cr.Len = int(r.Len)
		return cr, nil // the data path: the core's own request bound
	case wire.OpStore:
		cr.Data = r.Data
		return cr, nil
	case wire.OpCAS:
		cr.Expected, cr.Operand = r.Expected, r.Desired
		return cr, nil
	case wire.OpFetchAdd:
		cr.Operand = r.Delta
		return cr, nil
	case wire.OpWhere:
		return cr, nil
	default:
		return coherence.Request{}, fmt.Errorf("admit: %s is not an operation of the core: %w", r.Op, syscall.EINVAL)
	}
	cr.Timeout = b.Timeout(r)
	return cr, nil
}
