package clock

import (
	"math"
	"time"
)

// Line is what is known of one offset as time goes on: at At (the
// measuring clock's time) the offset lies in [Lo, Hi], and it moves at a
// rate in [RLo, RHi] (seconds per second of the measuring clock); Rate is
// the point estimate of that rate.
type Line struct {
	At       time.Duration
	Lo, Hi   time.Duration
	RLo, RHi float64
	Rate     float64
}

// Eval returns the offset interval at t, carried from At with the slowest
// and fastest rate allowed, rounded outward.
func (l *Line) Eval(t time.Duration) (lo, hi time.Duration) {
	dt := float64(t - l.At)
	a, b := l.RLo*dt, l.RHi*dt
	if a > b {
		a, b = b, a
	}
	return l.Lo + floorDur(a), l.Hi + ceilDur(b)
}

// Slope is the largest rate the line allows, in magnitude: how much an
// error in the time it is evaluated at can move it.
func (l *Line) Slope() float64 { return max(math.Abs(l.RLo), math.Abs(l.RHi)) }

func floorDur(f float64) time.Duration { return time.Duration(math.Floor(f)) }
func ceilDur(f float64) time.Duration  { return time.Duration(math.Ceil(f)) }

// mid returns the middle of [lo, hi] and half its width rounded up, so
// that [mid-half, mid+half] covers [lo, hi].
func mid(lo, hi time.Duration) (m, half time.Duration) {
	m = lo + (hi-lo)/2
	return m, max(m-lo, hi-m)
}
