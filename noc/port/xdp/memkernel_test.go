package xdp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/aitherion/dpu/noc/port/ether"
	"golang.org/x/sys/unix"
)

// memKernel plays the kernel's side of a socket's four rings over ordinary
// memory, so the port's RX and TX paths run without root: it takes frames
// from the fill ring to deliver received frames (split into multi-buffer
// descriptors like a copy-mode socket with XDP_USE_SG) and drains the TX
// ring into completions.
type memKernel struct {
	u            *umem
	fill, comp   producerRing[uint64]       // kernel's view: it consumes fill, produces comp
	rx, tx       consumerRing[unix.XDPDesc] // kernel's view: it produces rx, consumes tx
	fillW, compW ringWords
	rxW, txW     ringWords
	fillE, compE []uint64
	rxE, txE     []unix.XDPDesc
	fillCons     uint32
	txCons       uint32
	rxProd       uint32
	compProd     uint32
	scratch      []byte // frame being assembled by transmit
}

// newMemPort returns a port over an in-memory kernel with rings of n
// entries whose indices start just below the wrap of uint32.
func newMemPort(t testing.TB, n uint32, own ether.MAC, mtu int) (*Port, *memKernel) {
	t.Helper()
	u, err := newUMEM(make([]byte, 2*int(n)*frameSize), frameSize, n, n)
	if err != nil {
		t.Fatal(err)
	}
	k := &memKernel{
		u:     u,
		fillW: words(nearWrap), compW: words(nearWrap), rxW: words(nearWrap), txW: words(nearWrap),
		fillE: make([]uint64, n), compE: make([]uint64, n),
		rxE: make([]unix.XDPDesc, n), txE: make([]unix.XDPDesc, n),
		fillCons: nearWrap, txCons: nearWrap, rxProd: nearWrap, compProd: nearWrap,
	}
	s := &socket{
		umem: u,
		fill: fillQueue{newProducerRing(k.fillE, k.fillW)},
		comp: completionQueue{newConsumerRing(k.compE, k.compW)},
		rx:   rxQueue{newConsumerRing(k.rxE, k.rxW)},
		tx:   txQueue{newProducerRing(k.txE, k.txW)},
		sg:   true,
	}
	s.fill.refill(u)
	p := &Port{
		name:    "mem",
		mtu:     mtu,
		nb:      ether.NewNeighbour(own, ether.MAC{}),
		sock:    s,
		txDescs: make([]unix.XDPDesc, 0, 4),
	}
	return p, k
}

// deliver receives frame: it takes UMEM frames from the fill ring, copies
// the frame behind XDP_PACKET_HEADROOM in chunks of rxFrameCapacity, and
// publishes the descriptors at once. It reports false (a drop) when the
// fill or RX ring is short.
func (k *memKernel) deliver(frame []byte) bool {
	need := uint32((len(frame) + rxFrameCapacity - 1) / rxFrameCapacity)
	if need == 0 {
		need = 1
	}
	mask := uint32(len(k.fillE) - 1)
	if k.fillW.producer.Load()-k.fillCons < need || uint32(len(k.rxE))-(k.rxProd-k.rxW.consumer.Load()) < need {
		return false
	}
	for i := range need {
		addr := k.fillE[k.fillCons&mask] + unix.XDP_PACKET_HEADROOM
		k.fillCons++
		chunk := frame[min(len(frame), int(i)*rxFrameCapacity):min(len(frame), int(i+1)*rxFrameCapacity)]
		copy(k.u.mem[addr:], chunk)
		d := unix.XDPDesc{Addr: addr, Len: uint32(len(chunk))}
		if i < need-1 {
			d.Options = unix.XDP_PKT_CONTD
		}
		k.rxE[k.rxProd&mask] = d
		k.rxProd++
	}
	k.fillW.consumer.Store(k.fillCons)
	k.rxW.producer.Store(k.rxProd)
	return true
}

// transmit drains the TX ring, calling sent with each whole frame, and
// completes the frames.
func (k *memKernel) transmit(sent func(frame []byte)) {
	mask := uint32(len(k.txE) - 1)
	frame := k.scratch[:0]
	defer func() { k.scratch = frame[:0] }()
	for prod := k.txW.producer.Load(); k.txCons != prod; k.txCons++ {
		d := k.txE[k.txCons&mask]
		if sent != nil {
			frame = append(frame, k.u.mem[d.Addr:d.Addr+uint64(d.Len)]...)
			if d.Options&unix.XDP_PKT_CONTD == 0 {
				sent(frame)
				frame = frame[:0]
			}
		}
		k.compE[k.compProd&mask] = d.Addr
		k.compProd++
	}
	k.txW.consumer.Store(k.txCons)
	k.compW.producer.Store(k.compProd)
}

var (
	macA = ether.MAC{2, 0, 0, 0, 0, 0xa}
	macB = ether.MAC{2, 0, 0, 0, 0, 0xb}
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func TestMemPortRoundTrip(t *testing.T) {
	const mtu = 4338
	a, ka := newMemPort(t, 8, macA, mtu)
	b, kb := newMemPort(t, 8, macB, mtu)
	buf := make([]byte, mtu)
	for i, size := range []int{0, 1, 46, 3826, 3827, 4095, mtu} {
		msg := pattern(size, byte(i))
		if err := a.WriteDatagram(msg); err != nil {
			t.Fatalf("write %d bytes: %v", size, err)
		}
		var frames [][]byte
		ka.transmit(func(f []byte) { frames = append(frames, bytes.Clone(f)) })
		if len(frames) != 1 {
			t.Fatalf("%d bytes: %d frames on the wire", size, len(frames))
		}
		h, err := ether.ParseHeader(frames[0])
		if err != nil || h.Src != macA || h.EtherType != ether.EtherType {
			t.Fatalf("%d bytes: header %+v %v", size, h, err)
		}
		wantDst := ether.Broadcast
		if i > 0 {
			wantDst = macB // learned from b's first reply
		}
		if h.Dst != wantDst {
			t.Fatalf("%d bytes: dst %v, want %v", size, h.Dst, wantDst)
		}
		if !kb.deliver(frames[0]) {
			t.Fatal("deliver dropped")
		}
		n, ok, err := b.TryReadDatagram(buf)
		if err != nil || !ok || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("%d bytes: read %d ok=%v err=%v", size, n, ok, err)
		}
		if _, ok, _ := b.TryReadDatagram(buf); ok {
			t.Fatal("one frame read twice")
		}
		// b answers, so a learns b's address.
		if err := b.WriteDatagram([]byte{1}); err != nil {
			t.Fatal(err)
		}
		kb.transmit(func(f []byte) { ka.deliver(bytes.Clone(f)) })
		if n, ok, _ := a.TryReadDatagram(buf); !ok || n != 1 {
			t.Fatalf("reply: %d %v", n, ok)
		}
	}
	if err := a.WriteDatagram(make([]byte, mtu+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
}

// Thousands of frames of random sizes through rings of 8 entries: every
// UMEM frame is recycled, indices wrap, nothing is lost or corrupted.
func TestMemPortRecyclesFrames(t *testing.T) {
	const mtu = 4338
	a, ka := newMemPort(t, 8, macA, mtu)
	b, kb := newMemPort(t, 8, macB, mtu)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, mtu)
	var inflight [][]byte
	sent, got := 0, 0
	for round := range 3000 {
		burst := 1 + rng.IntN(4)
		for range burst {
			msg := pattern(rng.IntN(mtu+1), byte(round))
			if err := a.WriteDatagram(msg); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			inflight = append(inflight, msg)
			sent++
		}
		ka.transmit(func(f []byte) {
			if !kb.deliver(bytes.Clone(f)) {
				t.Fatalf("round %d: receiver ring full", round)
			}
		})
		for {
			n, ok, err := b.TryReadDatagram(buf)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if !bytes.Equal(buf[:n], inflight[0]) {
				t.Fatalf("datagram %d corrupted (%d bytes, want %d)", got, n, len(inflight[0]))
			}
			inflight = inflight[1:]
			got++
		}
	}
	if got != sent {
		t.Fatalf("received %d of %d", got, sent)
	}
	a.sock.comp.reap(a.sock.umem)
	if l := len(a.sock.umem.txFree); l != 8 {
		t.Fatalf("sender holds %d free TX frames after reaping, want 8", l)
	}
}

func TestMemPortRefusesAndTruncates(t *testing.T) {
	b, kb := newMemPort(t, 8, macB, 1500)
	frame := func(dst ether.MAC, typ uint16, payload []byte) []byte {
		f := make([]byte, ether.HeaderLen+len(payload))
		ether.PutHeader(f, ether.Header{Dst: dst, Src: macA, EtherType: typ})
		copy(f[ether.HeaderLen:], payload)
		return f
	}
	kb.deliver(frame(ether.MAC{2, 0, 0, 0, 0, 0xc}, ether.EtherType, []byte("not for b")))
	kb.deliver(frame(macB, 0x0800, []byte("ipv4")))
	kb.deliver([]byte{1, 2, 3}) // runt
	kb.deliver(frame(macB, ether.EtherType, []byte("for b")))
	buf := make([]byte, 3)
	n, ok, err := b.TryReadDatagram(buf)
	if err != nil || !ok || string(buf[:n]) != "for" {
		t.Fatalf("read %q %v %v, want the truncated datagram for b", buf[:n], ok, err)
	}
	st := &b.stats
	if st.rxRefused.Load() != 2 || st.rxInvalid.Load() != 1 || st.rxTruncated.Load() != 1 || st.rxDatagrams.Load() != 1 {
		t.Fatalf("refused %d invalid %d truncated %d datagrams %d", st.rxRefused.Load(), st.rxInvalid.Load(),
			st.rxTruncated.Load(), st.rxDatagrams.Load())
	}
	// All four frames went back to the fill ring.
	if spare, inFill := len(b.sock.umem.rxSpare), kb.fillW.producer.Load()-kb.fillCons; int(spare)+int(inFill) != 8 {
		t.Fatalf("%d spare + %d in the fill ring, want 8", spare, inFill)
	}
}

// With nobody draining the TX ring, writes stop with ErrTxBusy after a
// bounded wait, and resume once the kernel completes the frames.
func TestMemPortTxBusy(t *testing.T) {
	a, ka := newMemPort(t, 4, macA, 1500)
	msg := pattern(100, 1)
	for i := range 4 {
		if err := a.WriteDatagram(msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := a.WriteDatagram(msg); !errors.Is(err, ErrTxBusy) {
		t.Fatalf("write to a full ring: %v, want ErrTxBusy", err)
	}
	ka.transmit(nil)
	if err := a.WriteDatagram(msg); err != nil {
		t.Fatalf("write after completions: %v", err)
	}
}

// The datagram paths allocate nothing.
func TestMemPortAllocs(t *testing.T) {
	a, ka := newMemPort(t, 8, macA, 4338)
	b, kb := newMemPort(t, 8, macB, 4338)
	msg := pattern(4000, 3)
	wire := make([]byte, 0, 8192)
	buf := make([]byte, 4338)
	keep := func(f []byte) { wire = append(wire[:0], f...) }
	allocs := testing.AllocsPerRun(200, func() {
		if err := a.WriteDatagram(msg); err != nil {
			t.Fatal(err)
		}
		ka.transmit(keep)
		kb.deliver(wire)
		if _, ok, _ := b.TryReadDatagram(buf); !ok {
			t.Fatal("nothing read")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per datagram, want 0", allocs)
	}
}
