package arbiter

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// BenchmarkWheelScheduleCancel arms and disarms one timer among 10k pending.
func BenchmarkWheelScheduleCancel(b *testing.B) {
	w := NewWheel[uint64](time.Microsecond, 0)
	for i := range 10_000 {
		w.Schedule(time.Duration(i)*time.Microsecond, uint64(i))
	}
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		id := w.Schedule(time.Duration(i%50_000)*time.Microsecond, i)
		if !w.Cancel(id) {
			b.Fatal("cancel")
		}
		i++
	}
}

// BenchmarkWheelAdvance is the steady state of a wheel holding 10k timers
// spread over 10ms: each op advances the clock 1µs, fires what is due and
// re-arms as many timers 10ms ahead (the cost per op includes Schedule).
func BenchmarkWheelAdvance(b *testing.B) {
	const n, span = 10_000, 10 * time.Millisecond
	w := NewWheel[uint64](time.Microsecond, 0)
	for i := range n {
		w.Schedule(time.Duration(i)*span/n, uint64(i))
	}
	var buf []Fired[uint64]
	now := time.Duration(0)
	fired := 0
	b.ReportAllocs()
	for b.Loop() {
		now += time.Microsecond
		buf = w.Advance(now, buf[:0])
		for _, f := range buf {
			w.Schedule(f.At+span, f.Value)
		}
		fired += len(buf)
	}
	b.ReportMetric(float64(fired)/float64(b.N), "fired/op")
	if w.Len() != n {
		b.Fatalf("lost timers: %d", w.Len())
	}
}

// BenchmarkWheelFarTimers schedules timers 1s..2s ahead (they cascade down
// several levels before firing) and advances through them.
func BenchmarkWheelFarTimers(b *testing.B) {
	w := NewWheel[uint64](time.Microsecond, 0)
	var buf []Fired[uint64]
	now := time.Duration(0)
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		w.Schedule(now+time.Second+time.Duration(i%1_000_000)*time.Microsecond, i)
		now += time.Microsecond
		buf = w.Advance(now, buf[:0])
		i++
	}
}

// BenchmarkArbiterDecide submits four competing requests per tick for a
// page set of 64 owned pages (acquires of pinned pages queue, writes are
// granted) and advances one tick: the per-op cost covers four Submits and
// the tick's decisions.
func BenchmarkArbiterDecide(b *testing.B) {
	a, err := New(Config{TickLen: time.Microsecond, MaxWait: 20 * time.Microsecond, QueueLen: 4, MaxPin: 1000 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	pages := make([]gva.GVA, 64)
	for i := range pages {
		pages[i] = gva.New(1, gva.PageNumber(i), 0, 0)
		a.Own(pages[i])
		if i%2 == 0 {
			if err := a.Pin(0, pages[i], 1, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	now := time.Duration(0)
	answers := 0
	var id uint64
	b.ReportAllocs()
	for b.Loop() {
		for k := range 4 {
			id++
			kind := KindWrite
			if k%2 == 0 {
				kind = KindAcquire
			}
			p := pages[(id*2)%64] // pinned pages: acquires queue
			if k == 3 {
				p = pages[(id*2+1)%64]
				kind = KindAtomic
			}
			a.Submit(now, Request{ID: id, Page: p, Kind: kind, Priority: uint8(k), Port: noc.PortID(k), Node: noc.NodeID(k)})
		}
		now += time.Microsecond
		ans, _ := a.Advance(now)
		answers += len(ans)
	}
	b.ReportMetric(float64(answers)/float64(b.N), "answers/op")
}
