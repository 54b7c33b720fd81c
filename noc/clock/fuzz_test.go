package clock_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/clock"
	"github.com/aitherion/dpu/noc/link"
)

// reportSeeds are well-formed reports (testdata/fuzz/FuzzReportDecode has
// these and a few broken ones).
func reportSeeds() [][]byte {
	r := clock.Report{Origin: 3, At: 5 * time.Second, Links: []clock.LinkReport{
		{Node: 1, Line: clock.Line{Lo: -20 * time.Microsecond, Hi: 30 * time.Microsecond, RLo: -1e-6, RHi: 2e-6, Rate: 1e-6}},
		{Node: 7, Line: clock.Line{Lo: time.Second, Hi: time.Second + time.Microsecond, RLo: -500e-6, RHi: 500e-6}},
	}}
	empty := clock.Report{Origin: 9, At: -time.Millisecond}
	lined := clock.Report{Origin: 4, At: time.Second, HasTimeline: true, Timeline: clock.Timeline{Origin: 0, Ref: 2, K: -3 * time.Millisecond},
		Links: []clock.LinkReport{{Node: 2, Line: clock.Line{Lo: -time.Microsecond, Hi: time.Microsecond, RLo: -1e-6, RHi: 1e-6}}}}
	return [][]byte{r.AppendTo(nil), empty.AppendTo(nil), lined.AppendTo(nil)}
}

// FuzzReportDecode: Decode never panics, refuses with ErrReport, and what
// it accepts encodes back to a report that decodes to the same links with
// rate intervals no narrower.
func FuzzReportDecode(f *testing.F) {
	for _, s := range reportSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r clock.Report
		if err := r.Decode(b); err != nil {
			if !errors.Is(err, clock.ErrReport) {
				t.Fatalf("error %v does not wrap ErrReport", err)
			}
			return
		}
		var again clock.Report
		if err := again.Decode(r.AppendTo(nil)); err != nil {
			t.Fatalf("re-encoded report refused: %v", err)
		}
		if again.Origin != r.Origin || again.At != r.At || len(again.Links) != len(r.Links) ||
			again.HasTimeline != r.HasTimeline || again.Timeline != r.Timeline {
			t.Fatalf("round trip: %+v, then %+v", r, again)
		}
		for i := range r.Links {
			a, b := r.Links[i].Line, again.Links[i].Line
			if a.Lo != b.Lo || a.Hi != b.Hi || b.RLo > a.RLo || b.RHi < a.RHi {
				t.Fatalf("link %d: %+v, then %+v", i, a, b)
			}
		}
	})
}

// TestReportRoundTrip: a report decodes to what was encoded, rates within
// a unit and never narrower; damaged reports are refused.
func TestReportRoundTrip(t *testing.T) {
	good := reportSeeds()[0]
	var r clock.Report
	if err := r.Decode(good); err != nil {
		t.Fatal(err)
	}
	if r.Origin != 3 || len(r.Links) != 2 || r.Links[1].Line.Lo != time.Second || r.Links[0].Line.RHi < 2e-6 {
		t.Fatalf("decoded %+v", r)
	}
	for name, edit := range map[string]func([]byte) []byte{
		"short":                 func(b []byte) []byte { return b[:10] },
		"version":               func(b []byte) []byte { b[0] = 3; return b },
		"count":                 func(b []byte) []byte { b[1] = 3; return b },
		"trailing":              func(b []byte) []byte { return append(b, 0) },
		"flags":                 func(b []byte) []byte { b[2] = 2; return b },
		"reserved":              func(b []byte) []byte { b[3] = 1; return b },
		"timeline without flag": func(b []byte) []byte { b[19] = 1; return b },
		"self link":             func(b []byte) []byte { copy(b[32:36], b[4:8]); return b },
		"lo above hi":           func(b []byte) []byte { b[40] = 0x7f; return b },
		"rate too large":        func(b []byte) []byte { b[64] = 0x7f; return b },
		"neighbour twice":       func(b []byte) []byte { copy(b[80:84], b[32:36]); return b },
		"version 1 with flags":  func(b []byte) []byte { b[0], b[2] = 1, 1; return append(b[:16], b[32:]...) },
	} {
		if err := new(clock.Report).Decode(edit(bytes.Clone(good))); !errors.Is(err, clock.ErrReport) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// a version 1 report (no timeline fields) is one of an origin that
	// follows no timeline
	v1 := append([]byte{1, good[1], 0, 0}, good[4:16]...)
	v1 = append(v1, good[32:]...)
	var old clock.Report
	if err := old.Decode(v1); err != nil || old.HasTimeline || len(old.Links) != 2 || old.Links[1].Line.Lo != time.Second {
		t.Fatalf("version 1: %+v %v", old, err)
	}
	lined := reportSeeds()[2]
	var l clock.Report
	if err := l.Decode(lined); err != nil || !l.HasTimeline || l.Timeline != (clock.Timeline{Origin: 0, Ref: 2, K: -3 * time.Millisecond}) {
		t.Fatalf("a report with a timeline: %+v %v", l, err)
	}
	huge := bytes.Clone(lined)
	huge[24] = 0x7f // K beyond the farthest offset
	if err := new(clock.Report).Decode(huge); !errors.Is(err, clock.ErrReport) {
		t.Errorf("timeline K beyond bounds: %v", err)
	}
}

// FuzzHostileNeighbour feeds a clock samples of any timestamps and reports
// of any bytes: it never panics, and every estimate it gives has a bound
// of at least zero.
func FuzzHostileNeighbour(f *testing.F) {
	f.Add(int64(0), int64(1000), int64(1000), int64(2000), int64(10_000_000), reportSeeds()[0])
	f.Add(int64(-5), int64(1<<62), int64(-1<<62), int64(7), int64(1), []byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, t1, t2, t3, t4, step int64, report []byte) {
		c, err := clock.New(clock.Config{Self: 3}, 0)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Duration(0)
		for i := range 8 {
			d := time.Duration(i) * time.Duration(step)
			c.Sample(now, 0, 1, link.ClockSample{T1: time.Duration(t1) + d, T2: time.Duration(t2) + d, T3: time.Duration(t3) + d, T4: time.Duration(t4) + d})
			_ = c.HandleReport(now, 0, report)
			now += 10 * time.Millisecond
		}
		c.Tick(now + 2*time.Second)
		v := c.View(now)
		for _, e := range v.Estimates {
			if e.Bound < 0 {
				t.Fatalf("estimate %+v with a negative bound", e)
			}
		}
	})
}
