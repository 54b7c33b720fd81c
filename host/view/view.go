package view

import (
	"syscall"

	"github.com/aitherion/dpu/gva"
)

// State is a view's state, as published to the host.
type State uint8

// States.
const (
	Loading State = iota // the first load has not ended
	Valid                // the copy holds the newest version known
	Stale                // a newer version exists: a reload runs or will
)

// View is the host's copy of one mapped page, as decided: the caller
// holds the bytes and applies what the methods say, under its own lock.
type View struct {
	Version gva.Version // the version the copy holds
	Want    gva.Version // the newest version known to exist
	State   State
	// Reloading: a reload of the whole page runs (at most one at a time).
	Reloading bool
	tries     int // attempts of the reload running that ended
}

// Loaded ends the first load, which read version v; it reports whether a
// reload must start (versions newer than v were heard meanwhile).
func (w *View) Loaded(v gva.Version) (reload bool) {
	w.Version = v
	w.Want = max(w.Want, v)
	return w.settle()
}

// Update hears a write of n bytes at off that made version v. apply: the
// caller writes the bytes into the copy, which now holds v. reload: the
// view went stale and a reload must start.
func (w *View) Update(off, n int, v gva.Version) (apply, reload bool) {
	w.Want = max(w.Want, v)
	if w.State == Loading || w.Version >= v {
		return false, false // a load in flight checks Want when it ends
	}
	if w.State == Valid && w.Version+1 == v && off >= 0 && off+n <= gva.PageSize {
		w.Version = v
		return true, false
	}
	return false, w.settle()
}

// Invalidate hears that version v exists (a write the core did not send
// the bytes of); force makes the view stale even without a newer version
// known: events were lost, or the core said its replica is no longer
// current (its branch was cut from the owner: later versions will not
// reach it). It reports whether a reload must start.
func (w *View) Invalidate(v gva.Version, force bool) (reload bool) {
	w.Want = max(w.Want, v)
	if force && w.Want <= w.Version {
		w.Want = w.Version + 1
	}
	if w.State == Loading {
		return false
	}
	return w.settle()
}

// Kick asks a stale view with no reload running to start one (a read
// found it stale).
func (w *View) Kick() (reload bool) {
	if w.State != Stale {
		return false
	}
	return w.settle()
}

// Next is what a reload does after one of its attempts (Reloaded).
type Next uint8

// What a reload does next.
const (
	// ReloadDone: the view caught up; the reload is over.
	ReloadDone Next = iota
	// ReloadRetry: the caller sends another attempt.
	ReloadRetry
	// ReloadGaveUp: the reload is over and the view stays stale; the
	// next event or Kick starts another.
	ReloadGaveUp
)

// Reloaded ends one attempt of a reload, which read version v, or failed
// with errno (non-zero; v is then not read). install: the caller copies
// the page it read into the copy, which now holds v. next: the reload is
// done, sends another attempt, or gave up (see again).
func (w *View) Reloaded(v gva.Version, errno syscall.Errno) (install bool, next Next) {
	if errno == 0 && v > w.Version {
		w.Version = v
		install = true
	}
	w.tries++
	switch {
	case w.Version >= w.Want:
		w.Reloading, w.tries = false, 0
		w.settle()
		return install, ReloadDone
	case again(w.tries, errno):
		return install, ReloadRetry
	}
	w.GaveUp()
	return install, ReloadGaveUp
}

// Tries bounds the attempts of one reload.
const Tries = 6

// again reports whether a reload whose tries-th attempt did not catch up,
// ending with errno (0: it read an older version), sends another attempt:
// up to Tries, and none after an answer that another would repeat
// (ESTALE: the content was lost with its owner; EHOSTDOWN: no node can
// serve the page now; EBADF: the session that reloads is closed).
func again(tries int, errno syscall.Errno) bool {
	return tries < Tries && errno != syscall.ESTALE && errno != syscall.EHOSTDOWN && errno != syscall.EBADF
}

// GaveUp ends a reload that did not catch up: the view stays stale, and
// the next event or Kick starts another.
func (w *View) GaveUp() { w.Reloading, w.tries = false, 0 }

// settle sets the state from the versions and reports whether a reload
// must start (stale, with none running: it is marked running).
func (w *View) settle() (reload bool) {
	w.State = Valid
	if w.Version < w.Want {
		w.State = Stale
	}
	if w.State == Stale && !w.Reloading {
		w.Reloading = true
		return true
	}
	return false
}
