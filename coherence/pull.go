package coherence

import (
	"fmt"
	"time"

	"github.com/aitherion/dpu/gva"
)

// Pulled pages. An acquire or a lock moves a page's ownership, and so the
// page itself, to this node: a page homed elsewhere then takes one of the
// node's physical pages for as long as it stays. It is charged to the page
// quota of the user whose request brought it (Config.Quota), from the
// request until the page leaves again (another node takes it, or its
// allocator takes it back to free it): a user cannot fill the node with
// other nodes' pages past its quota by acquiring them. The charge is taken
// before the request starts (EDQUOT, or EBUSY where ordinary users hold all
// but the root reserve) and kept when the request leaves the page owned
// here; otherwise (it failed, or the page was owned here already, or
// another request brought it first) it is given back.

// chargePull takes the charge for the page r (an Acquire or a Lock) may
// bring here; it answers r and reports false when the quota refuses.
func (h *Hosts) chargePull(now time.Duration, r *hostReq) bool {
	q := h.e.cfg.Quota
	key := r.hr.GVA.Key()
	if q == nil || key.Machine() == gva.MachineIndex(h.e.self) || h.owned(key) {
		return true
	}
	if _, ok := h.pulled[key]; ok {
		return true // here already, charged to whoever brought it
	}
	if err := q.Take(r.hr.Cred.UID, 1); err != nil {
		h.fail(now, r, quotaErrno(err), fmt.Sprintf("%v: the page would come here, a page of uid %d's quota: %v", r.hr.Op, r.hr.Cred.UID, err))
		return false
	}
	r.pulls = true
	return true
}

// settlePull keeps r's charge for its page if r leaves it owned here and
// charged to nobody yet, and gives it back otherwise.
func (h *Hosts) settlePull(r *hostReq, ok bool) {
	r.pulls = false
	key := r.hr.GVA.Key()
	if _, charged := h.pulled[key]; ok && !charged && h.owned(key) {
		h.pulled[key] = r.hr.Cred.UID
		return
	}
	h.e.cfg.Quota.Release(r.hr.Cred.UID, 1)
}

// pullGone gives back the charge of a pulled page that left this node.
func (h *Hosts) pullGone(key gva.GVA) {
	if uid, ok := h.pulled[key]; ok {
		delete(h.pulled, key)
		h.e.cfg.Quota.Release(uid, 1)
	}
}
