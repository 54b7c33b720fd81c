package coherence

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// countSink counts completions without keeping them.
type countSink struct{ n, errs int }

func (s *countSink) Complete(c Completion) {
	s.n++
	if c.Err != nil {
		s.errs++
	}
}
func (s *countSink) Event(Event) {}

// BenchmarkLocalCAS is a CAS by the owner's own host, through the whole
// engine: host request, arbiter order (its tick closes on the next Tick),
// execution, completion.
func BenchmarkLocalCAS(b *testing.B) {
	s := &countSink{}
	e, err := New(Config{Self: 1, Sink: s, Pages: 4})
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
	if s.n != b.N+1 || s.errs != 0 {
		b.Fatalf("%d completions, %d errors for %d CAS", s.n, s.errs, b.N)
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
