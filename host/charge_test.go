package host

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/quota"
)

// TestRootReserveHoldsUnderAnyMixOfPages (hole 4, property): under random
// sequences of owned pages (allocations), replicas (maps of pages homed
// elsewhere) and backup copies kept for other nodes, taken and given back
// by three ordinary users, root and other nodes, with the agent's own
// ledger, replica charges and store: whatever the ledger admits finds a
// physical page, ordinary users and other nodes together never hold more
// than the capacity less the reserve, and root can always take the rest
// of its reserve.
func TestRootReserveHoldsUnderAnyMixOfPages(t *testing.T) {
	const capacity, userPages = 64, 32
	const self, other = gva.MachineIndex(0), gva.MachineIndex(1)
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 0x5ec))
		ledger := testLedger(capacity, userPages)
		ledgerOf := func() *quota.Ledger { return ledger }
		reserve := capacity / 16
		store := ReservedStore{PageStore: coherence.NewMemStore(capacity), Ledger: ledgerOf}
		charges := newReplicaCharges(self, ledgerOf)

		type held struct {
			uid  uint32
			key  gva.GVA
			kind int // 0 owned, 1 replica (sess), 2 backup
			sess coherence.SessionID
		}
		var all []held
		next := uint64(1)
		key := func(m gva.MachineIndex) gva.GVA {
			next++
			return gva.New(m, gva.PageNumber(next), 0, 0)
		}
		rootHeld := 0
		uids := []uint32{0, 1001, 1002, 1003}
		for step := range 400 {
			switch op := rng.IntN(7); {
			case op <= 1: // an allocation of 1..4 pages
				uid, n := uids[rng.IntN(len(uids))], 1+rng.IntN(4)
				if ledger.Take(uid, quota.Pages, n) != nil {
					continue
				}
				for range n {
					k := key(self)
					if _, err := store.Alloc(k, false); err != nil {
						t.Fatalf("seed %d step %d: uid %d's admitted allocation found no page: %v", seed, step, uid, err)
					}
					all = append(all, held{uid: uid, key: k})
					if uid == 0 {
						rootHeld++
					}
				}
			case op <= 3: // a session maps a page homed on another node
				uid := uids[rng.IntN(len(uids))]
				sess := coherence.SessionID(1 + rng.IntN(6))
				k := key(other)
				if charges.take(sess, uid, k) != nil {
					continue
				}
				if _, err := store.Alloc(k, false); err != nil {
					t.Fatalf("seed %d step %d: uid %d's admitted replica found no page: %v (ledger %+v, held %d)", seed, step, uid, err, ledger.Usage(), len(all))
				}
				all = append(all, held{uid: uid, key: k, kind: 1, sess: sess})
				if uid == 0 {
					rootHeld++
				}
			case op == 4: // another node's owner places a backup copy here
				k := key(other).WithRefIndex(^uint32(0))
				if _, err := store.Alloc(k, false); err != nil {
					if !errors.Is(err, coherence.ErrNoSpace) {
						t.Fatalf("seed %d step %d: a refused backup: %v, want ErrNoSpace", seed, step, err)
					}
					continue
				}
				all = append(all, held{uid: quota.Remote, key: k, kind: 2})
			default: // something held goes away
				if len(all) == 0 {
					continue
				}
				i := rng.IntN(len(all))
				h := all[i]
				all[i] = all[len(all)-1]
				all = all[:len(all)-1]
				switch h.kind {
				case 0:
					ledger.Release(h.uid, quota.Pages, 1)
				case 1:
					charges.drop(h.sess, h.key)
				}
				store.Release(h.key)
				if h.uid == 0 {
					rootHeld--
				}
			}
			if others := store.Len() - rootHeld; others > capacity-reserve {
				t.Fatalf("seed %d step %d: ordinary users and other nodes hold %d pages, more than %d (capacity %d less the reserve %d)",
					seed, step, others, capacity-reserve, capacity, reserve)
			}
		}
		// root takes what is left of its reserve
		for i := rootHeld; i < reserve; i++ {
			if err := ledger.Take(0, quota.Pages, 1); err != nil {
				t.Fatalf("seed %d: root's page %d of its reserve: %v", seed, i, err)
			}
			if _, err := store.Alloc(key(self), false); err != nil {
				t.Fatalf("seed %d: root's page %d of its reserve: %v", seed, i, err)
			}
		}
	}
}

// testLedger is a node's page ledger as the agent sets it up: users share
// the node but its reserve, and backup copies are bounded by the node.
func testLedger(capacity, userPages int) *quota.Ledger {
	l := quota.New(map[quota.Kind]quota.Limit{
		quota.Pages: {PerUID: userPages, Total: capacity, Reserve: capacity / 16},
	}, 0)
	l.SetLimit(quota.Remote, quota.Pages, capacity)
	return l
}
