//go:build dpubug

package coherence

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// bugsCompiled: this build carries the planted bugs (tests of the
// simulator's checkers build with -tags dpubug; the product never does).
const bugsCompiled = true

// staleCAS is the planted bug BugStaleCAS: compare against the local
// replica, then write through as a plain store.
func (e *Engine) staleCAS(now time.Duration, r *request) bool {
	pg := e.pages[r.key]
	if pg == nil || pg.owner || !pg.has {
		return false
	}
	off := int(r.hr.GVA.Offset())
	cur := binary.LittleEndian.Uint64(e.pageBytes(pg)[off:])
	if cur != r.hr.Expected {
		e.complete(now, r, Completion{Value: cur, Version: pg.version})
		return true
	}
	r.hr.Op = HostStore
	r.data = binary.LittleEndian.AppendUint64(nil, r.hr.Operand)
	r.min = gva.Version(cur) // remembered for the completion below
	r.hr.Expected = cur
	r.hr.Op = HostCAS
	p := appendUpHead(e.hostPay[:0], 0, r.hr.Cred)
	p = append(p, r.data...)
	f := newFrame(noc.ClassStore, OpStore, noc.FlagPath, e.self, e.guessOwner(r.key), r.id, r.hr.GVA, 0, p)
	e.handleUp(now, noc.LocalPort, &f)
	return true
}

var bugSkip sync.Map // noc.NodeID -> true

// BugSkipHostChecks makes the host layer of node id vouch for its users
// without checking them (as Config.Unchecked does), at run time, as a
// modified node would: the nodes that serve its requests must refuse what
// its users may not do. on=false restores the checks.
func BugSkipHostChecks(id noc.NodeID, on bool) {
	if on {
		bugSkip.Store(id, true)
	} else {
		bugSkip.Delete(id)
	}
}

func bugSkipHostChecks(id noc.NodeID) bool {
	_, ok := bugSkip.Load(id)
	return ok
}
