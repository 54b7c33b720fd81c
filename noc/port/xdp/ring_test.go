package xdp

import (
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// words returns ring words starting at index start, as a kernel would have
// left them after start entries went through the ring.
func words(start uint32) ringWords {
	w := ringWords{producer: new(atomic.Uint32), consumer: new(atomic.Uint32), flags: new(atomic.Uint32)}
	w.producer.Store(start)
	w.consumer.Store(start)
	return w
}

// Start indices just below the wrap of uint32, so every test crosses it.
var nearWrap = ^uint32(0) - 5

func TestCheckRingSize(t *testing.T) {
	for _, n := range []uint32{1, 2, 64, 1024, 1 << 31} {
		if err := checkRingSize(n); err != nil {
			t.Errorf("checkRingSize(%d) = %v", n, err)
		}
	}
	for _, n := range []uint32{0, 3, 1000, 1<<31 + 1} {
		if err := checkRingSize(n); err == nil {
			t.Errorf("checkRingSize(%d) accepted", n)
		}
	}
}

func TestProducerRingWraps(t *testing.T) {
	w := words(nearWrap)
	r := newProducerRing(make([]uint64, 8), w)
	if got := r.free(1); got != 8 {
		t.Fatalf("empty ring free = %d, want 8", got)
	}
	for i := range 8 {
		r.put(uint64(100 + i))
	}
	if got := r.free(1); got != 0 {
		t.Fatalf("full ring free = %d, want 0", got)
	}
	if r.pending() != 8 || w.producer.Load() != nearWrap {
		t.Fatal("entries visible before submit")
	}
	r.submit()
	if w.producer.Load() != nearWrap+8 || r.pending() != 0 {
		t.Fatalf("producer %d after submit", w.producer.Load())
	}
	// The kernel reads three entries, in order, from the slots they were
	// written to, across the wrap.
	for i := range uint32(3) {
		if got := r.ring[(nearWrap+i)&r.mask]; got != uint64(100+i) {
			t.Fatalf("slot %d holds %d", i, got)
		}
	}
	w.consumer.Add(3)
	// The cache says 0 free; asking for 1 reloads the consumer index.
	if got := r.free(1); got != 3 {
		t.Fatalf("free after kernel consumed 3 = %d, want 3", got)
	}
	// Asking for no more than the cache knows does not reload.
	w.consumer.Add(5)
	if got := r.free(3); got != 3 {
		t.Fatalf("free(3) reloaded: %d", got)
	}
	if got := r.free(4); got != 8 {
		t.Fatalf("free(4) = %d, want 8", got)
	}
}

func TestConsumerRingWraps(t *testing.T) {
	w := words(nearWrap)
	r := newConsumerRing(make([]unix.XDPDesc, 4), w)
	if r.available() != 0 {
		t.Fatal("empty ring has entries")
	}
	// The kernel produces three descriptors across the wrap.
	for i := range uint32(3) {
		r.ring[(nearWrap+i)&r.mask] = unix.XDPDesc{Addr: uint64(i) * 4096, Len: 60 + i}
	}
	w.producer.Add(3)
	if got := r.available(); got != 3 {
		t.Fatalf("available = %d, want 3", got)
	}
	for i := range uint32(3) {
		if d := r.peek(i); d.Len != 60+i {
			t.Fatalf("peek(%d) = %+v", i, d)
		}
	}
	r.consume(2)
	if r.unreleased() != 2 || w.consumer.Load() != nearWrap {
		t.Fatal("slots handed back before release")
	}
	r.release()
	if w.consumer.Load() != nearWrap+2 || r.unreleased() != 0 {
		t.Fatalf("consumer %d after release", w.consumer.Load())
	}
	// One entry left in the cache: available does not reload.
	w.producer.Add(1)
	if got := r.available(); got != 1 {
		t.Fatalf("available = %d, want the cached 1", got)
	}
	if got := r.refresh(); got != 2 {
		t.Fatalf("refresh = %d, want 2", got)
	}
}

func TestPacketDescs(t *testing.T) {
	w := words(nearWrap)
	q := rxQueue{newConsumerRing(make([]unix.XDPDesc, 8), w)}
	put := func(opts ...uint32) {
		for _, o := range opts {
			q.ring[w.producer.Load()&q.mask] = unix.XDPDesc{Options: o}
			w.producer.Add(1)
		}
	}
	put(0, unix.XDP_PKT_CONTD, unix.XDP_PKT_CONTD, 0, unix.XDP_PKT_CONTD)
	avail := q.available()
	if n, ok := q.packetDescs(0, avail); !ok || n != 1 {
		t.Fatalf("single-buffer frame: %d %v", n, ok)
	}
	if n, ok := q.packetDescs(1, avail); !ok || n != 3 {
		t.Fatalf("three-buffer frame: %d %v", n, ok)
	}
	if _, ok := q.packetDescs(4, avail); ok {
		t.Fatal("frame whose last descriptor is missing reported whole")
	}
}

func TestUMEMBounds(t *testing.T) {
	u, err := newUMEM(make([]byte, 4*4096), 4096, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.rxSpare) != 2 || len(u.txFree) != 2 {
		t.Fatalf("spare %d free %d", len(u.rxSpare), len(u.txFree))
	}
	for _, a := range u.rxSpare {
		if !u.isRx(a) {
			t.Fatalf("rx frame %d outside the rx half", a)
		}
	}
	for _, a := range u.txFree {
		if u.isRx(a) {
			t.Fatalf("tx frame %d inside the rx half", a)
		}
	}
	cases := []struct {
		d  unix.XDPDesc
		ok bool
	}{
		{unix.XDPDesc{Addr: 256, Len: 3840}, true},
		{unix.XDPDesc{Addr: 4096, Len: 4096}, true},
		{unix.XDPDesc{Addr: 256, Len: 3841}, false},      // crosses into the next frame
		{unix.XDPDesc{Addr: 3 * 4096, Len: 4097}, false}, // past the end
		{unix.XDPDesc{Addr: ^uint64(0) - 10, Len: 100}, false},
	}
	for _, c := range cases {
		if _, ok := u.bytes(c.d); ok != c.ok {
			t.Errorf("bytes(%+v) ok=%v, want %v", c.d, ok, c.ok)
		}
	}
	if _, err := newUMEM(make([]byte, 4096), 4096, 1, 1); err == nil {
		t.Fatal("UMEM too small accepted")
	}
	if _, err := newUMEM(make([]byte, 3*3000), 3000, 1, 1); err == nil {
		t.Fatal("frame size 3000 accepted")
	}
}

// The fill ring takes no more spare frames than it has room for.
func TestRefillBoundedByRing(t *testing.T) {
	u, _ := newUMEM(make([]byte, 16*4096), 4096, 8, 8)
	w := words(nearWrap)
	q := fillQueue{newProducerRing(make([]uint64, 4), w)}
	if n := q.refill(u); n != 4 || len(u.rxSpare) != 4 {
		t.Fatalf("refill moved %d, %d spare left", n, len(u.rxSpare))
	}
	if n := q.refill(u); n != 0 {
		t.Fatalf("refill into a full ring moved %d", n)
	}
	w.consumer.Add(2)
	if n := q.refill(u); n != 2 || w.producer.Load() != nearWrap+6 {
		t.Fatalf("refill after kernel took 2: moved %d, producer %d", n, w.producer.Load())
	}
}
