package xdp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/aitherion/dpu/noc/port/ether"
	"golang.org/x/sys/unix"
)

// FuzzReceive hands the receive path what a kernel (or a peer) could put
// in front of it: arbitrary frame bytes, and arbitrary descriptors. The
// port never panics, never returns bytes that were not the frame's
// datagram, and never loses a UMEM frame.
func FuzzReceive(f *testing.F) {
	hdr := make([]byte, ether.HeaderLen)
	ether.PutHeader(hdr, ether.Header{Dst: macB, Src: macA, EtherType: ether.EtherType})
	f.Add(append(hdr, "datagram"...), []byte{})
	f.Add([]byte{1, 2, 3}, []byte{})
	f.Add(append(hdr, make([]byte, 5000)...), []byte{})
	// desc: addr (8 bytes), len (4), options (4), repeated.
	bad := binary.LittleEndian.AppendUint64(nil, 100)
	bad = binary.LittleEndian.AppendUint32(bad, 5000)
	bad = binary.LittleEndian.AppendUint32(bad, unix.XDP_PKT_CONTD)
	f.Add(hdr, bad)
	f.Fuzz(runFuzzReceive)
}

// runFuzzReceive is FuzzReceive's body.
func runFuzzReceive(t *testing.T, frame, rawDescs []byte) {
	// The frame arrives as the kernel would put it in the ring.
	p, k := newMemPort(t, 8, macB, 4338)
	buf := make([]byte, 4338)
	if len(frame) <= 2*rxFrameCapacity && k.deliver(frame) {
		n, ok, err := p.TryReadDatagram(buf)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dgram := frame[ether.HeaderLen:]
			if n != min(len(dgram), len(buf)) || !bytes.Equal(buf[:n], dgram[:n]) {
				t.Fatalf("read %d bytes that are not the frame's datagram (%d bytes)", n, len(dgram))
			}
		}
	}
	// Garbage descriptors straight into the RX ring.
	mask := uint32(len(k.rxE) - 1)
	for len(rawDescs) >= 16 && k.rxProd-k.rxW.consumer.Load() < uint32(len(k.rxE)) {
		d := unix.XDPDesc{
			Addr:    binary.LittleEndian.Uint64(rawDescs),
			Len:     binary.LittleEndian.Uint32(rawDescs[8:]),
			Options: binary.LittleEndian.Uint32(rawDescs[12:]),
		}
		rawDescs = rawDescs[16:]
		k.rxE[k.rxProd&mask] = d
		k.rxProd++
	}
	k.rxW.producer.Store(k.rxProd)
	for range 16 {
		if _, ok, err := p.TryReadDatagram(buf); err != nil || !ok {
			break
		}
	}
	// The spare stack never outgrows the receiving half of the UMEM.
	if held := len(p.sock.umem.rxSpare); held > 8 {
		t.Fatalf("%d spare frames of 8", held)
	}
}
