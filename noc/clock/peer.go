package clock

import (
	"fmt"
	"math"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

// kept is the narrowest sample of one bucket: at x (this clock) the
// offset lay in [lo, hi].
type kept struct {
	num    int64 // the bucket's number: x / bucket length
	x      time.Duration
	lo, hi time.Duration
	ok     bool
}

// filter estimates one neighbour's clock from its samples: minimum-delay
// selection per bucket, the rate and offset intervals of the kept
// samples, a least-squares rate (see the package documentation).
type filter struct {
	cfg     *Config
	buckets []kept
	blen    time.Duration
	lastT3  time.Duration
	seen    bool // lastT3 is set
	line    Line
	valid   bool // line holds an estimate
	skipped uint64
}

func newFilter(cfg *Config) filter {
	return filter{cfg: cfg, buckets: make([]kept, cfg.Buckets), blen: cfg.Window / time.Duration(cfg.Buckets)}
}

// reset forgets every sample.
func (f *filter) reset() {
	clear(f.buckets)
	f.seen, f.valid = false, false
}

// add checks sample s and takes it in. A non-empty reason says why the
// neighbour must be excluded; the sample then counted for nothing.
func (f *filter) add(s link.ClockSample) (reason string) {
	switch {
	case s.T3 < s.T2:
		return fmt.Sprintf("timestamps go backwards: answered at %v, before the request arrived at %v", s.T3, s.T2)
	case f.seen && s.T2 < f.lastT3:
		return fmt.Sprintf("clock went backwards by %v between two answers", f.lastT3-s.T2)
	case s.T4 < s.T1:
		f.skipped++ // this clock's own times are out of order: not the neighbour's doing
		return ""
	case s.T2 > s.T1+maxOffset || s.T2 < s.T1-maxOffset || s.T3 > s.T4+maxOffset || s.T3 < s.T4-maxOffset:
		return fmt.Sprintf("claims a clock more than %v away", maxOffset)
	}
	f.lastT3, f.seen = s.T3, true
	d := s.T4 - s.T1
	slack := ceilDur(f.cfg.MaxRate * float64(d) / 2)
	lo, hi := s.T3-s.T4-slack, s.T2-s.T1+slack
	if lo > hi {
		return fmt.Sprintf("claims a negative round trip of %v", (d - (s.T3 - s.T2)))
	}
	if bugsCompiled && f.cfg.Bug == BugSymmetric {
		l, h := symmetric(int64(lo), int64(hi))
		lo, hi = time.Duration(l), time.Duration(h)
	}
	if d-(s.T3-s.T2) > f.cfg.MaxDelay {
		f.skipped++
		return ""
	}
	x := s.T1 + d/2
	if f.valid {
		plo, phi := f.line.Eval(x)
		switch {
		case hi < plo:
			return fmt.Sprintf("clock jumped back by at least %v within %v (more than ±%.0f ppm allows)", plo-hi, x-f.line.At, f.cfg.MaxRate*1e6)
		case lo > phi:
			return fmt.Sprintf("clock jumped ahead by at least %v within %v (more than ±%.0f ppm allows)", lo-phi, x-f.line.At, f.cfg.MaxRate*1e6)
		}
	}
	num := floorDiv(x, f.blen)
	b := &f.buckets[mod(num, int64(len(f.buckets)))]
	if !b.ok || b.num != num || hi-lo < b.hi-b.lo {
		*b = kept{num: num, x: x, lo: lo, hi: hi, ok: true}
	}
	return f.fit(num, x)
}

// fit recomputes the line at x from the buckets within the window ending
// at bucket cur.
func (f *filter) fit(cur int64, x time.Duration) (reason string) {
	rho := f.cfg.MaxRate
	rlo, rhi := -rho, rho
	n := int64(len(f.buckets))
	live := func(b *kept) bool { return b.ok && b.num > cur-n && b.num <= cur }
	for i := range f.buckets {
		bi := &f.buckets[i]
		if !live(bi) {
			continue
		}
		for j := range f.buckets {
			bj := &f.buckets[j]
			if !live(bj) || bj.x <= bi.x {
				continue
			}
			dx := float64(bj.x - bi.x)
			rlo = max(rlo, float64(bj.lo-bi.hi)/dx)
			rhi = min(rhi, float64(bj.hi-bi.lo)/dx)
		}
	}
	if rlo > rhi {
		return fmt.Sprintf("claims an impossible rate: its samples need a rate outside ±%.0f ppm", rho*1e6)
	}
	l := Line{At: x, Lo: math.MinInt64, Hi: math.MaxInt64, RLo: rlo, RHi: rhi}
	// Least squares of the midpoints against x, weighted by 1/width².
	var sw, sx, sy, sxx, sxy float64
	for i := range f.buckets {
		b := &f.buckets[i]
		if !live(b) {
			continue
		}
		dt := float64(x - b.x)
		a, c := rlo*dt, rhi*dt
		if a > c {
			a, c = c, a
		}
		l.Lo = max(l.Lo, b.lo+floorDur(a))
		l.Hi = min(l.Hi, b.hi+ceilDur(c))
		w := float64(b.hi-b.lo) + 1
		wt := 1 / (w * w)
		px, py := -dt, float64(b.lo+(b.hi-b.lo)/2)
		sw += wt
		sx += wt * px
		sy += wt * py
		sxx += wt * px * px
		sxy += wt * px * py
	}
	if l.Lo > l.Hi {
		return fmt.Sprintf("claims an impossible rate: no rate within ±%.0f ppm joins its samples", rho*1e6)
	}
	l.Rate = (rlo + rhi) / 2
	if den := sw*sxx - sx*sx; den > 0 {
		l.Rate = min(max((sw*sxy-sx*sy)/den, rlo), rhi)
	}
	f.line, f.valid = l, true
	return ""
}

// maxOffset is the farthest apart two clocks of a fabric may be believed
// (13 days): it keeps every sum of offsets far from overflowing.
const maxOffset = time.Duration(1) << 50

func floorDiv(a, b time.Duration) int64 {
	q := int64(a / b)
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mod(a, n int64) int64 { return (a%n + n) % n }
