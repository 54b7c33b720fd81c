package admit

import (
	"fmt"
	"syscall"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/hostif/wire"
)

// Budget is the most pieces of one session's bulk transfers in the core at
// once; the others wait in the session's Transfers, in order, and go in as
// earlier ones complete. It keeps one client's transfers from filling the
// links' queues (past a few milliseconds of them, answers come after the
// requests' re-sends) and bounds what one session holds of the core.
const Budget = 128

// Transfer is one bulk transfer (STORE_BULK or LOAD_BULK) cut into its
// pages' core requests (Cut), admitted, and what became of each. A
// Transfer's requests are the caller's to tag, number and (a store's) fill
// with bytes as they enter the core; the Transfer keeps the count of its
// pieces and their outcomes, and answers once the last completed.
type Transfer struct {
	Op     wire.Op
	Pieces []Piece
	Reqs   []coherence.Request
	errs   []syscall.Errno
	done   []bool // the piece completed
	next   int    // the first piece not yet in the core
	left   int    // pieces not yet completed
}

// Cut makes t the transfer r of user cred, admitted under b (Bulk), reusing
// t's storage. A refused piece refuses the whole transfer: t is then
// empty.
func (t *Transfer) Cut(r *wire.Request, cred coherence.Cred, b Bounds) error {
	var err error
	t.Pieces, t.Reqs, err = Bulk(r, cred, b, t.Pieces[:0], t.Reqs[:0])
	t.Op, t.next, t.left = r.Op, 0, len(t.Pieces)
	t.errs, t.done = t.errs[:0], t.done[:0]
	if err != nil {
		t.left = 0
		return err
	}
	for range t.Pieces {
		t.errs, t.done = append(t.errs, 0), append(t.done, false)
	}
	return nil
}

// Reset empties t for reuse, keeping its storage.
func (t *Transfer) Reset() {
	clear(t.Reqs)
	t.Pieces, t.Reqs, t.errs, t.done = t.Pieces[:0], t.Reqs[:0], t.errs[:0], t.done[:0]
	t.Op, t.next, t.left = 0, 0, 0
}

// Answer is what the transfer answers once its last piece completed: the
// bytes done from its start, in whole pieces before the first that
// failed, and that piece's errno (0 when every piece was done).
func (t *Transfer) Answer() (done int, errno syscall.Errno) {
	for i, e := range t.errs {
		if e != 0 && errno == 0 {
			errno = e
			if !answerPastFailure() {
				return done, errno
			}
		}
		if e == 0 {
			done += t.Pieces[i].Len
		}
	}
	return done, errno
}

// Transfers is one session's bulk transfers in flight: those with pieces
// not yet in the core, oldest first, and how many pieces are in the core,
// at most Limit. It does no locking: the session's owner serialises its
// calls.
type Transfers struct {
	// Limit is the most pieces in the core at once; 0 is Budget.
	Limit int
	q     []*Transfer
	live  int
}

func (ts *Transfers) limit() int {
	if ts.Limit > 0 {
		return ts.Limit
	}
	return Budget
}

// Queue adds t, cut, behind the session's other transfers.
func (ts *Transfers) Queue(t *Transfer) {
	if t.next < len(t.Reqs) {
		ts.q = append(ts.q, t)
	}
}

// Next is the next piece the budget lets into the core, oldest transfer
// first: its transfer and index. It stays next until Take lets it in.
func (ts *Transfers) Next() (t *Transfer, i int, ok bool) {
	if len(ts.q) == 0 || ts.live >= ts.limit() && !ignoreBudget() {
		return nil, 0, false
	}
	t = ts.q[0]
	return t, t.next, true
}

// Take lets the piece Next named into the core.
func (ts *Transfers) Take() {
	t := ts.q[0]
	t.next++
	ts.live++
	if t.next == len(t.Reqs) {
		ts.q[0] = nil
		ts.q = ts.q[1:]
	}
}

// Done takes the outcome of piece i of t, which was in the core (errno 0:
// it was done), and reports whether it was t's last. A piece's second
// outcome, or one of a piece not let in, is an error and changes nothing:
// the core completes each request once.
func (ts *Transfers) Done(t *Transfer, i int, errno syscall.Errno) (last bool, err error) {
	if i < 0 || i >= t.next || t.done[i] {
		return false, fmt.Errorf("admit: piece %d of a transfer of %d (%d let into the core) completed again or before it went in: %w", i, len(t.Pieces), t.next, syscall.EINVAL)
	}
	ts.live--
	t.errs[i], t.done[i] = errno, true
	t.left--
	return t.left == 0, nil
}

// Live is how many pieces of the session's transfers are in the core.
func (ts *Transfers) Live() int { return ts.live }

// Waiting is how many transfers have pieces not yet in the core.
func (ts *Transfers) Waiting() int { return len(ts.q) }
