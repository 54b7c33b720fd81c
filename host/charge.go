package host

import (
	"fmt"
	"sync"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/quota"
)

// Physical pages and the per-uid page quota. Every physical page of the
// node's store is one of: a page allocated here (charged to its
// allocator's uid by the host socket), a replica of another node's page
// that a host session maps (charged to the mapping uid here, once per
// session and page), or a backup copy kept for another node's page
// (charged to quota.Remote, with no per-uid limit but outside the
// reserve). So ordinary users and other nodes together never hold more
// than the ledger's Total minus its Reserve, and root's reserve holds
// whatever mix of owned, replica and backup pages they make.

// replicaCharges counts the replica pages each host session maps against
// its user's page quota.
type replicaCharges struct {
	self   gva.MachineIndex
	ledger func() *quota.Ledger

	mu   sync.Mutex
	sess map[coherence.SessionID]map[gva.GVA]*replicaCharge
}

type replicaCharge struct {
	uid  uint32
	refs int
}

func newReplicaCharges(self gva.MachineIndex, ledger func() *quota.Ledger) *replicaCharges {
	return &replicaCharges{self: self, ledger: ledger, sess: map[coherence.SessionID]map[gva.GVA]*replicaCharge{}}
}

// take charges uid for a ref of key by session s: one page on the
// session's first ref of a page homed on another node (a page homed here
// was charged when it was allocated). It refuses with the ledger's error
// (EDQUOT: the user's own quota; EBUSY: ordinary users hold all but the
// reserve).
func (rc *replicaCharges) take(s coherence.SessionID, uid uint32, key gva.GVA) error {
	if key.Machine() == rc.self {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := rc.sess[s]
	if ch := m[key]; ch != nil {
		ch.refs++
		return nil
	}
	if err := rc.ledger().Take(uid, quota.Pages, 1); err != nil {
		return fmt.Errorf("map %v: a replica counts against the page quota: %w", key, err)
	}
	if m == nil {
		m = map[gva.GVA]*replicaCharge{}
		rc.sess[s] = m
	}
	m[key] = &replicaCharge{uid: uid, refs: 1}
	return nil
}

// drop takes one ref of key by s off its charge; the last gives the page
// back to the quota.
func (rc *replicaCharges) drop(s coherence.SessionID, key gva.GVA) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ch := rc.sess[s][key]
	if ch == nil {
		return
	}
	if ch.refs--; ch.refs == 0 {
		delete(rc.sess[s], key)
		if len(rc.sess[s]) == 0 {
			delete(rc.sess, s)
		}
		rc.ledger().Release(ch.uid, quota.Pages, 1)
	}
}

// dropSession gives back every page session s was charged for (it closed:
// the core dropped its refs).
func (rc *replicaCharges) dropSession(s coherence.SessionID) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, ch := range rc.sess[s] {
		rc.ledger().Release(ch.uid, quota.Pages, 1)
	}
	delete(rc.sess, s)
}

// ReservedStore is the engine's page store with backup copies charged to
// quota.Remote: a copy that would take a page of the reserve (or one
// beyond what the ledger lets ordinary users hold) is refused as the
// capacity rule refuses it (ErrNoSpace), and its owner places it
// elsewhere.
type ReservedStore struct {
	coherence.PageStore
	Ledger func() *quota.Ledger
}

// isBackup reports whether key names a backup copy in the store: the
// engine keeps copies under the page's key with every bit of the ref index
// set (coherence's copyKey: WithRefIndex(^0), which keeps the field's
// width).
func isBackup(key gva.GVA) bool { return key.RefIndex() == backupRef }

var backupRef = gva.GVA{}.WithRefIndex(^uint32(0)).RefIndex()

// Alloc implements coherence.PageStore.
func (s ReservedStore) Alloc(key gva.GVA, huge bool) ([]byte, error) {
	if !isBackup(key) {
		return s.PageStore.Alloc(key, huge)
	}
	if p, ok := s.PageStore.Lookup(key); ok {
		return p, nil
	}
	if err := s.Ledger().Take(quota.Remote, quota.Pages, 1); err != nil {
		return nil, fmt.Errorf("backup of %v: %w: %w", key, coherence.ErrNoSpace, err)
	}
	p, err := s.PageStore.Alloc(key, huge)
	if err != nil {
		s.Ledger().Release(quota.Remote, quota.Pages, 1)
	}
	return p, err
}

// Release implements coherence.PageStore.
func (s ReservedStore) Release(key gva.GVA) {
	if isBackup(key) {
		if _, ok := s.PageStore.Lookup(key); ok {
			s.Ledger().Release(quota.Remote, quota.Pages, 1)
		}
	}
	s.PageStore.Release(key)
}

// Quota is the node's page ledger as the core's host layer charges it
// (coherence.PageQuota): an allocation's pages to the allocating user, in
// pages and in bytes.
type Quota struct {
	Ledger func() *quota.Ledger
}

var _ coherence.PageQuota = Quota{}

// Take implements coherence.PageQuota.
func (q Quota) Take(uid uint32, pages int) error {
	l := q.Ledger()
	if err := l.Take(uid, quota.Pages, pages); err != nil {
		return err
	}
	if err := l.Take(uid, quota.Bytes, pages*gva.PageSize); err != nil {
		l.Release(uid, quota.Pages, pages)
		return err
	}
	return nil
}

// Release implements coherence.PageQuota.
func (q Quota) Release(uid uint32, pages int) {
	l := q.Ledger()
	l.Release(uid, quota.Pages, pages)
	l.Release(uid, quota.Bytes, pages*gva.PageSize)
}
