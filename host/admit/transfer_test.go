package admit

import (
	"syscall"
	"testing"

	"github.com/aitherion/dpu/hostif/wire"
)

// cutTransfer cuts a transfer of n bytes from offset off of page.
func cutTransfer(t *testing.T, op wire.Op, off, n int) *Transfer {
	t.Helper()
	r := wire.Request{Header: wire.Header{Op: op, GVA: page.WithOffset(uint16(off))}, Len: uint32(n)}
	tr := &Transfer{}
	if err := tr.Cut(&r, testCred, testBounds); err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTransfersKeepTheBudget: a session's transfers go into the core
// oldest first, never more than Budget pieces at once, and each answers
// once its last piece completed.
func TestTransfersKeepTheBudget(t *testing.T) {
	var ts Transfers
	a := cutTransfer(t, wire.OpStoreBulk, 0, 100*wire.PageSize)
	b := cutTransfer(t, wire.OpLoadBulk, 0, 60*wire.PageSize)
	ts.Queue(a)
	ts.Queue(b)
	type piece struct {
		t *Transfer
		i int
	}
	var in []piece
	take := func() {
		for {
			tr, i, ok := ts.Next()
			if !ok {
				return
			}
			if len(in) > 0 && in[len(in)-1].t == b && tr == a {
				t.Fatalf("a piece of the older transfer went in after the newer's")
			}
			in = append(in, piece{tr, i})
			ts.Take()
		}
	}
	take()
	if ts.Live() != Budget || len(in) != Budget {
		t.Fatalf("%d pieces in the core (%d taken), want the budget %d", ts.Live(), len(in), Budget)
	}
	if in[99].t != a || in[100].t != b || in[100].i != 0 {
		t.Fatalf("the second transfer did not follow the first's last piece")
	}
	for _, p := range in[:100] {
		last, err := ts.Done(p.t, p.i, 0)
		if err != nil {
			t.Fatal(err)
		}
		if last != (p.i == 99) {
			t.Fatalf("piece %d of the first transfer: last %v", p.i, last)
		}
	}
	if done, errno := a.Answer(); done != 100*wire.PageSize || errno != 0 {
		t.Fatalf("the first transfer answers %d bytes, %v", done, errno)
	}
	in = in[100:]
	take()
	if ts.Live() != 60 || ts.Waiting() != 0 {
		t.Fatalf("after the first transfer: %d live, %d waiting; want 60, 0", ts.Live(), ts.Waiting())
	}
}

// TestTransferAnswersTheFirstFailure: the answer counts the bytes of the
// pieces before the first that failed, whatever order they completed in,
// with that piece's errno; a second completion of a piece, or one of a
// piece not let in, is refused and changes nothing.
func TestTransferAnswersTheFirstFailure(t *testing.T) {
	var ts Transfers
	tr := cutTransfer(t, wire.OpStoreBulk, 96, 3*wire.PageSize+5) // 4000 + 4096 + 4096 + 101
	ts.Queue(tr)
	for range 3 {
		ts.Next()
		ts.Take()
	}
	if _, err := ts.Done(tr, 3, 0); err == nil {
		t.Fatal("a piece not let into the core completed")
	}
	for _, c := range []struct {
		i     int
		errno syscall.Errno
	}{{2, syscall.EACCES}, {0, 0}, {1, syscall.ETIMEDOUT}} {
		if _, err := ts.Done(tr, c.i, c.errno); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ts.Done(tr, 1, 0); err == nil {
		t.Fatal("a piece completed twice")
	}
	ts.Next()
	ts.Take()
	last, err := ts.Done(tr, 3, 0)
	if err != nil || !last {
		t.Fatalf("the last piece: last %v, %v", last, err)
	}
	if done, errno := tr.Answer(); done != wire.PageSize-96 || errno != syscall.ETIMEDOUT {
		t.Fatalf("answer %d bytes, %v; want %d, ETIMEDOUT (piece 1 is the first that failed)", done, errno, wire.PageSize-96)
	}
	if ts.Live() != 0 {
		t.Fatalf("%d pieces still counted in the core", ts.Live())
	}
}
