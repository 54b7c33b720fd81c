package arbiter

import (
	"cmp"
	"math/bits"
	"slices"
	"time"
)

// Wheel is a hierarchical timing wheel: the "hardware timers" of the DPU.
// It bounds pins and queued requests here, and swaps, retransmissions and
// request deadlines in the coherence engine. T is the payload a timer
// carries back when it fires.
//
// Time is quantised to Granularity: a timer scheduled at `at` fires in the
// first Advance whose now is at or after FireTime(at) = at rounded up to a
// multiple of Granularity — never early, at most one granule late.
//
// The wheel has 11 levels of 64 slots over the 64-bit tick space, so any
// deadline fits without an overflow list. Schedule and Cancel are O(1);
// Advance does O(levels) work per occupied slot it passes plus O(1) per
// timer it fires or moves down a level (a timer moves down at most 10 times
// in its life). Timers live in a slab with a free list: in steady state
// nothing allocates.
//
// Fired timers are returned in order of FireTime, ties in the order they
// were scheduled. Every scheduled timer fires exactly once unless it is
// cancelled first; a TimerID is never reused, so cancelling a timer that
// already fired (or was cancelled) is a harmless no-op.
//
// A Wheel is a deterministic single-threaded state machine: it reads no
// clock and is not safe for concurrent use.
type Wheel[T any] struct {
	gran   time.Duration
	cur    uint64 // first tick not yet processed
	heads  [wheelLevels][wheelSlots]int32
	occ    [wheelLevels]uint64 // bit s: slot s of the level is not empty
	nodes  []timerNode[T]
	free   int32 // head of the free list, -1 if none
	live   int
	seq    uint64
	next   uint64 // cached earliest fire tick, valid if nextOK
	nextOK bool
}

const (
	wheelBits   = 6
	wheelSlots  = 1 << wheelBits
	wheelMask   = wheelSlots - 1
	wheelLevels = (64 + wheelBits - 1) / wheelBits
	noNode      = -1
)

type timerNode[T any] struct {
	at         time.Duration
	tick       uint64
	seq        uint64
	prev, next int32
	gen        uint32
	level      uint8
	slot       uint8
	active     bool
	value      T
}

// TimerID names a scheduled timer. The zero TimerID names no timer.
type TimerID uint64

// Fired is a timer returned by Advance.
type Fired[T any] struct {
	ID    TimerID
	At    time.Duration // the deadline it was scheduled for
	Value T
	seq   uint64
}

// NewWheel returns an empty wheel with the given granularity (> 0) whose
// clock starts at start.
func NewWheel[T any](granularity, start time.Duration) *Wheel[T] {
	if granularity <= 0 {
		panic("arbiter: wheel granularity must be positive")
	}
	w := &Wheel[T]{gran: granularity, free: noNode}
	if start > 0 {
		w.cur = uint64(start / granularity)
	}
	for l := range w.heads {
		for s := range w.heads[l] {
			w.heads[l][s] = noNode
		}
	}
	return w
}

// Granularity returns the wheel's time quantum.
func (w *Wheel[T]) Granularity() time.Duration { return w.gran }

// Len returns the number of pending timers.
func (w *Wheel[T]) Len() int { return w.live }

// FireTime returns when a timer scheduled now at `at` would fire: at rounded
// up to the granularity, and no earlier than the next tick the wheel has not
// processed yet.
func (w *Wheel[T]) FireTime(at time.Duration) time.Duration {
	return time.Duration(w.tickOf(at)) * w.gran
}

func (w *Wheel[T]) tickOf(at time.Duration) uint64 {
	var t uint64
	if at > 0 {
		t = uint64(at / w.gran)
		if at%w.gran != 0 {
			t++
		}
	}
	return max(t, w.cur)
}

// Schedule arms a timer that fires at `at` (see FireTime) carrying v.
func (w *Wheel[T]) Schedule(at time.Duration, v T) TimerID {
	i := w.alloc()
	n := &w.nodes[i]
	n.at = at
	n.tick = w.tickOf(at)
	n.seq = w.seq
	w.seq++
	n.value = v
	n.active = true
	w.live++
	w.place(i)
	if w.nextOK && n.tick < w.next {
		w.next = n.tick
	}
	return TimerID(uint64(n.gen)<<32 | uint64(i+1))
}

// Cancel disarms the timer id. It reports whether the timer was pending
// (false: already fired, already cancelled, or never scheduled).
func (w *Wheel[T]) Cancel(id TimerID) bool {
	i, ok := w.lookup(id)
	if !ok {
		return false
	}
	tick := w.nodes[i].tick
	w.unlink(i)
	w.release(i)
	if w.nextOK && tick == w.next {
		w.nextOK = false
	}
	return true
}

// Pending reports whether id is scheduled and has not fired yet, and when
// it was scheduled for.
func (w *Wheel[T]) Pending(id TimerID) (at time.Duration, ok bool) {
	i, ok := w.lookup(id)
	if !ok {
		return 0, false
	}
	return w.nodes[i].at, true
}

func (w *Wheel[T]) lookup(id TimerID) (int32, bool) {
	i := int64(uint32(id)) - 1
	if i < 0 || i >= int64(len(w.nodes)) {
		return 0, false
	}
	n := &w.nodes[i]
	if !n.active || n.gen != uint32(id>>32) {
		return 0, false
	}
	return int32(i), true
}

// NextDeadline returns the time at which Advance next fires a timer (exact,
// on the granularity grid); ok is false when no timer is pending.
func (w *Wheel[T]) NextDeadline() (at time.Duration, ok bool) {
	if w.live == 0 {
		return 0, false
	}
	if !w.nextOK {
		w.next = w.earliest()
		w.nextOK = true
	}
	return time.Duration(w.next) * w.gran, true
}

// earliest finds the smallest pending tick. Level-0 slots hold exact ticks;
// otherwise the lowest occupied level's first occupied slot holds the
// earliest timers, and only that slot is scanned.
func (w *Wheel[T]) earliest() uint64 {
	for l := range wheelLevels {
		if w.occ[l] == 0 {
			continue
		}
		s := bits.TrailingZeros64(w.occ[l])
		if l == 0 {
			return w.cur&^wheelMask | uint64(s)
		}
		best := ^uint64(0)
		for i := w.heads[l][s]; i != noNode; i = w.nodes[i].next {
			best = min(best, w.nodes[i].tick)
		}
		return best
	}
	return ^uint64(0)
}

// Advance moves the wheel's clock to now and appends to dst every timer
// whose FireTime is at or before now, in FireTime order (ties: schedule
// order). A now earlier than a previous one is a no-op.
func (w *Wheel[T]) Advance(now time.Duration, dst []Fired[T]) []Fired[T] {
	if now < 0 {
		return dst
	}
	end := uint64(now/w.gran) + 1 // process ticks < end
	for w.cur < end {
		ev, level := w.nextEvent()
		if ev >= end {
			w.cur = end
			if ev == end && level > 0 {
				w.cascade() // entering a higher-level slot: move it down now
			}
			break
		}
		w.cur = ev
		if level == 0 {
			dst = w.fireSlot(dst)
			w.cur++
		}
		w.cascade()
	}
	w.nextOK = false
	return dst
}

// nextEvent returns the next tick >= cur at which something happens: a
// level-0 slot fires, or a higher-level slot must be cascaded down. Occupied
// slots of level l ≥ 1 always lie after cur's own digit at that level.
func (w *Wheel[T]) nextEvent() (tick uint64, level int) {
	d0 := w.cur & wheelMask
	if m := w.occ[0] >> d0; m != 0 {
		return w.cur + uint64(bits.TrailingZeros64(m)), 0
	}
	for l := 1; l < wheelLevels; l++ {
		shift := uint(l * wheelBits)
		d := w.cur >> shift & wheelMask
		m := w.occ[l] &^ (1<<(d+1) - 1)
		if d == wheelMask {
			m = 0
		}
		if m == 0 {
			continue
		}
		s := uint64(bits.TrailingZeros64(m))
		base := w.cur &^ (1<<(shift+wheelBits) - 1)
		if shift+wheelBits >= 64 {
			base = 0
		}
		return base | s<<shift, l
	}
	return ^uint64(0), wheelLevels
}

// cascade moves down the timers of every higher-level slot that cur has just
// entered, highest level first.
func (w *Wheel[T]) cascade() {
	if w.cur&wheelMask != 0 {
		return
	}
	top := (bits.TrailingZeros64(w.cur) / wheelBits)
	if w.cur == 0 {
		top = wheelLevels - 1
	}
	top = min(top, wheelLevels-1)
	for l := top; l >= 1; l-- {
		s := w.cur >> uint(l*wheelBits) & wheelMask
		i := w.heads[l][s]
		if i == noNode {
			continue
		}
		w.heads[l][s] = noNode
		w.occ[l] &^= 1 << s
		for i != noNode {
			nx := w.nodes[i].next
			w.place(i)
			i = nx
		}
	}
}

// fireSlot appends the timers of level-0 slot cur to dst in (At, schedule
// order) and frees them.
func (w *Wheel[T]) fireSlot(dst []Fired[T]) []Fired[T] {
	s := w.cur & wheelMask
	i := w.heads[0][s]
	w.heads[0][s] = noNode
	w.occ[0] &^= 1 << s
	start := len(dst)
	for i != noNode {
		n := &w.nodes[i]
		nx := n.next
		dst = append(dst, Fired[T]{ID: TimerID(uint64(n.gen)<<32 | uint64(i+1)), At: n.at, Value: n.value, seq: n.seq})
		w.release(i)
		i = nx
	}
	if f := dst[start:]; len(f) > 1 {
		slices.SortFunc(f, func(a, b Fired[T]) int {
			if c := cmp.Compare(a.At, b.At); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
	}
	return dst
}

// place appends node i to the slot its tick belongs to relative to cur:
// the lowest level whose block holds both the tick and cur. The head's prev
// points at the tail, so appending is O(1).
func (w *Wheel[T]) place(i int32) {
	n := &w.nodes[i]
	if n.tick < w.cur {
		n.tick = w.cur
	}
	x := n.tick ^ w.cur
	level := 0
	if x != 0 {
		level = (63 - bits.LeadingZeros64(x)) / wheelBits
	}
	s := uint8(n.tick >> uint(level*wheelBits) & wheelMask)
	n.level, n.slot = uint8(level), s
	n.next = noNode
	head := &w.heads[level][s]
	if *head == noNode {
		*head = i
		n.prev = i
		w.occ[level] |= 1 << s
		return
	}
	tail := w.nodes[*head].prev
	n.prev = tail
	w.nodes[tail].next = i
	w.nodes[*head].prev = i
}

func (w *Wheel[T]) unlink(i int32) {
	n := &w.nodes[i]
	head := &w.heads[n.level][n.slot]
	if *head == i {
		*head = n.next
		if n.next == noNode {
			w.occ[n.level] &^= 1 << n.slot
		} else {
			w.nodes[n.next].prev = n.prev // keep the tail pointer
		}
		return
	}
	w.nodes[n.prev].next = n.next
	if n.next == noNode {
		w.nodes[*head].prev = n.prev
	} else {
		w.nodes[n.next].prev = n.prev
	}
}

func (w *Wheel[T]) alloc() int32 {
	if w.free != noNode {
		i := w.free
		w.free = w.nodes[i].next
		return i
	}
	w.nodes = append(w.nodes, timerNode[T]{})
	return int32(len(w.nodes) - 1)
}

func (w *Wheel[T]) release(i int32) {
	n := &w.nodes[i]
	var zero T
	n.value = zero
	n.active = false
	n.gen++
	n.next = w.free
	w.free = i
	w.live--
}
