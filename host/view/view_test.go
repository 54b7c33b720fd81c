package view

import (
	"syscall"
	"testing"
)

// TestViewRules: the rules of a host's copy, step by step.
func TestViewRules(t *testing.T) {
	var w View
	if w.Loaded(3) || w.State != Valid || w.Version != 3 {
		t.Fatalf("after the first load at 3: %+v", w)
	}
	// the next version applies in place
	if apply, reload := w.Update(8, 8, 4); !apply || reload || w.Version != 4 {
		t.Fatalf("update to 4: apply %v reload %v %+v", apply, reload, w)
	}
	// an old one changes nothing
	if apply, reload := w.Update(0, 8, 4); apply || reload || w.State != Valid {
		t.Fatalf("repeated update: %+v", w)
	}
	// a gap: stale, one reload
	if apply, reload := w.Update(0, 8, 6); apply || !reload || w.State != Stale {
		t.Fatalf("a gap: apply %v reload %v %+v", apply, reload, w)
	}
	if w.Invalidate(7, false) {
		t.Fatal("a second reload started while one runs")
	}
	if install, next := w.Reloaded(6, 0); !install || next != ReloadRetry || w.Version != 6 {
		t.Fatalf("a reload that read 6 of 7: install %v next %v %+v", install, next, w)
	}
	if install, next := w.Reloaded(7, 0); !install || next != ReloadDone || w.State != Valid || w.Reloading {
		t.Fatalf("a reload that caught up: install %v next %v %+v", install, next, w)
	}
	// the core says its replica left the tree, at the version the copy
	// holds: stale all the same, until a reload reads a newer version
	if !w.Invalidate(7, true) || w.State != Stale {
		t.Fatalf("a forced invalidation at the version held: %+v", w)
	}
	if _, next := w.Reloaded(7, 0); next == ReloadDone || w.State != Stale {
		t.Fatalf("a reload that read the version held again: next %v %+v", next, w)
	}
	if _, next := w.Reloaded(8, 0); next != ReloadDone || w.State != Valid {
		t.Fatalf("a reload that read a newer version: next %v %+v", next, w)
	}
	// a reload that fails and gives up leaves the copy stale; a kick
	// starts another
	w.Invalidate(9, false)
	if _, next := w.Reloaded(0, syscall.EIO); next != ReloadRetry {
		t.Fatalf("a failed attempt ended the reload: %v", next)
	}
	w.GaveUp()
	if w.State != Stale || !w.Kick() {
		t.Fatalf("after giving up: %+v", w)
	}
}

// TestAgainBoundsAReload: a reload tries again after an older version or
// an error another attempt may not repeat, up to Tries attempts, and not
// after an answer another would repeat.
func TestAgainBoundsAReload(t *testing.T) {
	for tries := 1; tries < Tries; tries++ {
		for _, errno := range []syscall.Errno{0, syscall.ETIMEDOUT, syscall.EAGAIN, syscall.EHOSTUNREACH} {
			if !again(tries, errno) {
				t.Fatalf("attempt %d ended with %v: no other", tries, errno)
			}
		}
		for _, errno := range []syscall.Errno{syscall.ESTALE, syscall.EHOSTDOWN, syscall.EBADF} {
			if again(tries, errno) {
				t.Fatalf("attempt %d ended with %v: another", tries, errno)
			}
		}
	}
	if again(Tries, 0) {
		t.Fatalf("attempt %d of %d: another", Tries, Tries)
	}
	// Reloaded counts the attempts: a reload that never catches up gives
	// up after Tries of them, and the next one counts from one again.
	w := View{Version: 1, Want: 2, State: Stale, Reloading: true}
	for round := range 2 {
		for i := 1; i < Tries; i++ {
			if _, next := w.Reloaded(0, syscall.ETIMEDOUT); next != ReloadRetry {
				t.Fatalf("round %d, attempt %d: %v, want another", round, i, next)
			}
		}
		if _, next := w.Reloaded(0, syscall.ETIMEDOUT); next != ReloadGaveUp || w.Reloading || w.State != Stale {
			t.Fatalf("round %d, attempt %d: %v %+v, want given up and stale", round, Tries, next, w)
		}
		if !w.Kick() {
			t.Fatalf("round %d: a kick after giving up started no reload", round)
		}
	}
	if _, next := w.Reloaded(0, syscall.ESTALE); next != ReloadGaveUp {
		t.Fatalf("an attempt that found the content lost: %v, want given up", next)
	}
}
