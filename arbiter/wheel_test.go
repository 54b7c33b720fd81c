package arbiter

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestWheelFiresInOrderNeverEarly(t *testing.T) {
	w := NewWheel[int](time.Microsecond, 0)
	ats := []time.Duration{5 * time.Microsecond, 1500 * time.Nanosecond, 64 * time.Microsecond, 65 * time.Microsecond,
		4096 * time.Microsecond, time.Hour, 5 * time.Microsecond, 0}
	ids := make([]TimerID, len(ats))
	for i, at := range ats {
		ids[i] = w.Schedule(at, i)
	}
	if w.Len() != len(ats) {
		t.Fatalf("Len %d", w.Len())
	}
	var got []Fired[int]
	for now := time.Duration(0); w.Len() > 0; {
		next, ok := w.NextDeadline()
		if !ok {
			t.Fatal("NextDeadline not ok with pending timers")
		}
		if next < now {
			t.Fatalf("NextDeadline %v before now %v", next, now)
		}
		if before := w.Advance(next-1, nil); len(before) != 0 && next > 0 {
			t.Fatalf("fired %v before NextDeadline %v", before, next)
		}
		now = next
		batch := w.Advance(now, nil)
		if len(batch) == 0 {
			t.Fatalf("nothing fired at NextDeadline %v", now)
		}
		for _, f := range batch {
			if f.At > now {
				t.Fatalf("timer %d at %v fired early at %v", f.Value, f.At, now)
			}
			if now-f.At >= time.Microsecond && f.At > 0 {
				t.Fatalf("timer %d at %v fired late at %v", f.Value, f.At, now)
			}
		}
		got = append(got, batch...)
	}
	var order []int
	for _, f := range got {
		order = append(order, f.Value)
	}
	want := []int{7, 1, 0, 6, 2, 3, 4, 5}
	if !slices.Equal(order, want) {
		t.Fatalf("fire order %v, want %v", order, want)
	}
	if w.Cancel(ids[0]) {
		t.Fatal("Cancel of a fired timer reported pending")
	}
}

func TestWheelCancel(t *testing.T) {
	w := NewWheel[string](time.Millisecond, 0)
	a := w.Schedule(10*time.Millisecond, "a")
	b := w.Schedule(10*time.Millisecond, "b")
	c := w.Schedule(10*time.Second, "c")
	if !w.Cancel(b) || w.Cancel(b) {
		t.Fatal("Cancel b twice")
	}
	if !w.Cancel(c) {
		t.Fatal("Cancel c")
	}
	if at, ok := w.NextDeadline(); !ok || at != 10*time.Millisecond {
		t.Fatalf("NextDeadline %v %v", at, ok)
	}
	f := w.Advance(time.Minute, nil)
	if len(f) != 1 || f[0].ID != a || f[0].Value != "a" {
		t.Fatalf("fired %+v", f)
	}
	if _, ok := w.NextDeadline(); ok || w.Len() != 0 {
		t.Fatal("wheel not empty")
	}
	// ids are never reused: the slot of a is reused with a new generation
	d := w.Schedule(2*time.Minute, "d")
	if d == a || w.Cancel(a) {
		t.Fatal("stale id cancelled a new timer")
	}
	if _, ok := w.Pending(d); !ok {
		t.Fatal("d not pending")
	}
	if w.Cancel(0) || w.Cancel(TimerID(1<<40|999)) {
		t.Fatal("bogus ids cancelled")
	}
}

// TestWheelProperty runs seeded random schedules, cancels and time jumps
// against a brute-force model: every timer fires exactly once (unless
// cancelled first), never before its deadline, and in the first Advance at
// or after its FireTime.
func TestWheelProperty(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		gran := time.Duration(1+rng.IntN(1000)) * time.Nanosecond
		w := NewWheel[int](gran, 0)
		type model struct {
			at, fire time.Duration
			id       TimerID
			done     bool
		}
		var ms []*model
		now := time.Duration(0)
		var buf []Fired[int]
		for step := 0; step < 3000; step++ {
			switch r := rng.IntN(10); {
			case r < 5:
				var d time.Duration
				switch rng.IntN(4) {
				case 0:
					d = time.Duration(rng.IntN(int(64 * gran)))
				case 1:
					d = time.Duration(rng.Int64N(int64(1 << 20 * gran)))
				case 2:
					d = time.Duration(rng.Int64N(int64(1 << 40)))
				default:
					d = -time.Duration(rng.IntN(1000)) // in the past
				}
				at := now + d
				m := &model{at: at, fire: w.FireTime(at)}
				m.id = w.Schedule(at, len(ms))
				ms = append(ms, m)
			case r < 7 && len(ms) > 0:
				m := ms[rng.IntN(len(ms))]
				if got := w.Cancel(m.id); got != !m.done {
					t.Fatalf("seed %d: Cancel(%d) = %v, done %v", seed, m.id, got, m.done)
				}
				m.done = true
			default:
				var jump time.Duration
				if rng.IntN(3) == 0 {
					if at, ok := w.NextDeadline(); ok {
						jump = max(0, at-now)
					}
				} else {
					jump = time.Duration(rng.Int64N(int64(1 << (10 + rng.IntN(30)))))
				}
				now += jump
				buf = w.Advance(now, buf[:0])
				for i, f := range buf {
					m := ms[f.Value]
					if m.done {
						t.Fatalf("seed %d: timer %d fired twice or after cancel", seed, f.Value)
					}
					if m.id != f.ID || m.at != f.At {
						t.Fatalf("seed %d: fired %+v, model %+v", seed, f, m)
					}
					if m.fire > now {
						t.Fatalf("seed %d: timer %d fire time %v fired at %v", seed, f.Value, m.fire, now)
					}
					if i > 0 && (buf[i-1].At > f.At) {
						t.Fatalf("seed %d: out of order %v then %v", seed, buf[i-1].At, f.At)
					}
					m.done = true
				}
				live := 0
				var earliest time.Duration = -1
				for i, m := range ms {
					if m.done {
						continue
					}
					live++
					if m.fire <= now {
						t.Fatalf("seed %d: timer %d (fire %v) lost at now %v", seed, i, m.fire, now)
					}
					if earliest < 0 || m.fire < earliest {
						earliest = m.fire
					}
				}
				if live != w.Len() {
					t.Fatalf("seed %d: Len %d, model %d", seed, w.Len(), live)
				}
				if at, ok := w.NextDeadline(); ok != (live > 0) || (ok && at != earliest) {
					t.Fatalf("seed %d: NextDeadline %v %v, model %v", seed, at, ok, earliest)
				}
			}
		}
	}
}
