package quota

import (
	"errors"
	"slices"
	"syscall"
	"testing"
)

func TestPerUIDAndReserve(t *testing.T) {
	l := New(map[Kind]Limit{Conns: {PerUID: 3, Total: 8, Reserve: 2}}, 1000)
	for range 3 {
		if err := l.Take(500, Conns, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Take(500, Conns, 1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("fourth conn of uid 500: %v, want EDQUOT", err)
	}
	for range 3 {
		if err := l.Take(501, Conns, 1); err != nil {
			t.Fatal(err)
		}
	}
	// 6 ordinary of 8, 2 reserved: uid 502 is refused, root is not
	if err := l.Take(502, Conns, 1); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("past the reserve: %v, want EBUSY", err)
	}
	if err := l.Take(0, Conns, 1); err != nil {
		t.Fatalf("root in the reserve: %v", err)
	}
	if err := l.Take(1000, Conns, 1); err != nil {
		t.Fatalf("the agent's user in the reserve: %v", err)
	}
	if err := l.Take(0, Conns, 1); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("past the total: %v, want EBUSY", err)
	}
	l.Release(500, Conns, 1)
	if err := l.Take(502, Conns, 1); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	l.Release(500, Conns, 99) // more than held: clamped
	if u := l.Usage(); len(u) != 4 || u[0].UID != 0 {
		t.Fatalf("usage %+v", u)
	}
}

func TestSetLimitAndPages(t *testing.T) {
	l := New(map[Kind]Limit{Pages: {PerUID: 100}})
	if err := l.Take(7, Pages, 100); err != nil {
		t.Fatal(err)
	}
	l.SetLimit(7, Pages, 10)
	if err := l.Take(7, Pages, 1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("over a lowered limit: %v", err)
	}
	l.Release(7, Pages, 95)
	if err := l.Take(7, Pages, 5); err != nil {
		t.Fatal(err)
	}
	var nilLedger *Ledger
	if err := nilLedger.Take(7, Pages, 1); err != nil {
		t.Fatal("a nil ledger limits nothing")
	}
}

func TestMoreThanExistIsENOMEM(t *testing.T) {
	l := New(map[Kind]Limit{Pages: {Total: 10}})
	if err := l.Take(0, Pages, 11); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("11 of 10: %v", err)
	}
}

// TestAllThatExistMayBeTaken: asking for exactly Total, with nothing in
// use, is granted (ENOMEM is for more than exist); then nothing is left.
func TestAllThatExistMayBeTaken(t *testing.T) {
	l := New(map[Kind]Limit{Pages: {Total: 10}})
	if err := l.Take(0, Pages, 10); err != nil {
		t.Fatalf("10 of 10: %v", err)
	}
	if err := l.Take(0, Pages, 1); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("one more: %v, want EBUSY", err)
	}
}

// TestReleaseOfNothingChangesNothing: a release of zero or a negative
// count, and any release on a nil ledger, is a no-op.
func TestReleaseOfNothingChangesNothing(t *testing.T) {
	l := New(map[Kind]Limit{Conns: {PerUID: 2, Total: 4}})
	if err := l.Take(5, Conns, 1); err != nil {
		t.Fatal(err)
	}
	l.Release(5, Conns, 0)
	l.Release(5, Conns, -3)
	if got := l.Used(5, Conns); got != 1 {
		t.Fatalf("uid 5 holds %d after releasing nothing, want 1", got)
	}
	var nilLedger *Ledger
	nilLedger.Release(5, Conns, 1) // must not panic
}

// TestOverrideAndKindNames: Override reports a uid's own limit, not the
// default; every kind has its name.
func TestOverrideAndKindNames(t *testing.T) {
	l := New(map[Kind]Limit{Pages: {PerUID: 100}})
	if got := l.Override(9, Pages); got != 0 {
		t.Fatalf("override before SetLimit: %d", got)
	}
	l.SetLimit(9, Pages, 7)
	if got, def := l.Override(9, Pages), l.Default(Pages); got != 7 || def != 100 {
		t.Fatalf("override %d default %d, want 7 and 100", got, def)
	}
	for k, want := range map[Kind]string{Conns: "conns", Subs: "subs", Pages: "pages", Bytes: "bytes", Files: "files", Kind(5): "kind(5)", Kind(9): "kind(9)", Kind(-1): "kind(-1)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// TestLedgerBookkeeping: what Used, Usage and UIDs report as uids take,
// release and get overrides; the edges of the limits.
func TestLedgerBookkeeping(t *testing.T) {
	l := New(map[Kind]Limit{Pages: {PerUID: 4}, Conns: {PerUID: 2}}, 1000)
	// Nothing held, nothing listed: a take of zero and a release by a uid
	// that holds nothing leave no trace.
	if err := l.Take(3, Pages, 0); err != nil {
		t.Fatal(err)
	}
	l.Release(4, Pages, 1)
	if u := l.UIDs(); len(u) != 0 {
		t.Fatalf("UIDs of an empty ledger: %v", u)
	}
	// A kind without a PerUID limit is unlimited for an ordinary uid.
	if err := l.Take(3, Bytes, 1<<20); err != nil {
		t.Fatalf("bytes, no limit: %v", err)
	}
	// An override above the default lets a uid take more; 0 restores the
	// default.
	l.SetLimit(3, Pages, 6)
	if err := l.Take(3, Pages, 6); err != nil {
		t.Fatalf("6 pages with an override of 6: %v", err)
	}
	l.Release(3, Pages, 6)
	l.SetLimit(3, Pages, 0)
	if err := l.Take(3, Pages, 5); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("5 pages back on the default of 4: %v", err)
	}
	if err := l.Take(3, Pages, 2); err != nil {
		t.Fatal(err)
	}
	if err := l.Take(1000, Conns, 5); err != nil {
		t.Fatalf("a privileged uid past the per-uid limit: %v", err)
	}
	if err := l.Take(2, Conns, 1); err != nil {
		t.Fatal(err)
	}
	l.SetLimit(8, Conns, 1) // an override, nothing held
	want := []Usage{
		{UID: 2, Kind: Conns, Used: 1, Limit: 2},
		{UID: 3, Kind: Pages, Used: 2, Limit: 4},
		{UID: 3, Kind: Bytes, Used: 1 << 20, Limit: 0},
		{UID: 1000, Kind: Conns, Used: 5, Limit: 0},
	}
	if got := l.Usage(); !slices.Equal(got, want) {
		t.Fatalf("usage\n%+v\nwant\n%+v", got, want)
	}
	if got := l.UIDs(); !slices.Equal(got, []uint32{2, 3, 8, 1000}) {
		t.Fatalf("UIDs %v", got)
	}
	// A partial release keeps the rest; releasing everything drops the
	// uid (it had no override).
	l.Release(3, Pages, 1)
	if got := l.Used(3, Pages); got != 1 {
		t.Fatalf("uid 3 holds %d pages, want 1", got)
	}
	l.Release(3, Pages, 1)
	l.Release(3, Bytes, 1<<20)
	l.Release(2, Conns, 1)
	if got := l.UIDs(); !slices.Equal(got, []uint32{8, 1000}) {
		t.Fatalf("UIDs after the releases %v", got)
	}
}
