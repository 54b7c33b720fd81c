package coherence

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// countSink counts completions without keeping them: all of them, the
// errors, and of the CAS the ones that swapped and the ones whose previous
// value was not their ID (the chains below expect ID).
type countSink struct{ n, errs, swapped, prevNotID int }

func (s *countSink) Complete(c Completion) {
	s.n++
	if c.Err != nil {
		s.errs++
	}
	if c.Op == HostCAS {
		if c.Swapped {
			s.swapped++
		}
		if c.Value != c.ID {
			s.prevNotID++
		}
	}
}
func (s *countSink) Event(Event) {}

// BenchmarkLocalCAS is a CAS by the owner's own host, through the whole
// engine: host request, arbiter order (its tick closes on the next Tick),
// execution, completion. The CAS form a chain (i -> i+1): every one must
// swap and see i. Run with the page traits' accounting off and on
// (traits.go): each CAS is one write access, at a new time (the decay is
// computed every time).
func BenchmarkLocalCAS(b *testing.B) {
	b.Run("traits=off", func(b *testing.B) { benchLocalCAS(b, PlacementConfig{NoTraits: true}) })
	b.Run("traits=on", func(b *testing.B) { benchLocalCAS(b, PlacementConfig{}) })
	b.Run("placement=auto", func(b *testing.B) { benchLocalCAS(b, PlacementConfig{Mode: PlacementAuto}) })
}

func benchLocalCAS(b *testing.B, pc PlacementConfig) {
	s := &countSink{}
	e, err := New(Config{Self: 1, Sink: s, Pages: 4, Placement: pc})
	if err != nil {
		b.Fatal(err)
	}
	out := &fakeSender{self: 1}
	e.Submit(0, Request{ID: 1, Op: HostAlloc}, out)
	out.take(e)
	g := gva.New(1, 1, 8, 0)
	tick := e.arb.AnswerBound()
	now := time.Duration(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now += tick
		e.Submit(now, Request{ID: uint64(i), Op: HostCAS, GVA: g, Expected: uint64(i), Operand: uint64(i + 1)}, out)
		out.take(e)
		now += tick
		e.Tick(now, out)
		out.take(e)
	}
	b.StopTimer()
	if s.n != b.N+1 || s.errs != 0 || s.swapped != b.N || s.prevNotID != 0 {
		b.Fatalf("%d CAS: %d completions (alloc included), %d errors, %d swapped, %d saw another previous value",
			b.N, s.n, s.errs, s.swapped, s.prevNotID)
	}
}

// BenchmarkUpdatePropagation is a small write at the owner propagated down
// four branches (one frame each).
func BenchmarkUpdatePropagation(b *testing.B) {
	s := &countSink{}
	e, err := New(Config{Self: 1, Sink: s, Pages: 4})
	if err != nil {
		b.Fatal(err)
	}
	out := &fakeSender{self: 1}
	e.Submit(0, Request{ID: 1, Op: HostAlloc}, out)
	out.take(e)
	g := gva.New(1, 1, 64, 0)
	ent, _ := e.cache.Peek(g.Key())
	for p := range noc.PortID(4) {
		ent.Down, _ = ent.Down.Add(p)
	}
	data := []byte("12345678")
	now := time.Duration(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now += time.Microsecond
		e.Submit(now, Request{ID: uint64(i), Op: HostStore, GVA: g, Data: data}, out)
		out.take(e)
		now += time.Microsecond
		e.Tick(now, out)
		out.take(e)
	}
	b.StopTimer()
	if out.sent != 4*b.N {
		b.Fatalf("%d frames for %d writes on 4 branches", out.sent, b.N)
	}
}

// BenchmarkHostsLocalCAS is BenchmarkLocalCAS through the session layer,
// with 64 sessions open on the node: the cost of finding the request's
// session and bookkeeping it there on top of the engine's.
func BenchmarkHostsLocalCAS(b *testing.B) {
	s := &countSink{}
	h, err := NewHosts(Config{Self: 1, Pages: 4}, s)
	if err != nil {
		b.Fatal(err)
	}
	for id := range SessionID(64) {
		if err := h.Open(id + 1); err != nil {
			b.Fatal(err)
		}
	}
	out := &fakeSender{self: 1}
	h.Submit(0, 1, Request{ID: 1, Op: HostAlloc, Pages: 1}, out)
	out.take(h.e)
	g := gva.New(1, 1, 8, 0)
	tick := h.e.arb.AnswerBound()
	now := time.Duration(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now += tick
		h.Submit(now, SessionID(1+i%64), Request{ID: uint64(i), Op: HostCAS, GVA: g, Expected: uint64(i), Operand: uint64(i + 1)}, out)
		out.take(h.e)
		now += tick
		h.Tick(now, out)
		out.take(h.e)
	}
	b.StopTimer()
	if s.n != b.N+1 || s.errs != 0 || s.swapped != b.N || s.prevNotID != 0 {
		b.Fatalf("%d CAS: %d completions (alloc included), %d errors, %d swapped, %d saw another previous value",
			b.N, s.n, s.errs, s.swapped, s.prevNotID)
	}
}
