package quota

import (
	"errors"
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
