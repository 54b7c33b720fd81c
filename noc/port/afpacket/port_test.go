package afpacket

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/aitherion/dpu/noc/port/ether"
)

func TestHtons(t *testing.T) {
	// In memory, the result holds the bytes in network order.
	b := binary.NativeEndian.AppendUint16(nil, htons(0x88B5))
	if b[0] != 0x88 || b[1] != 0xB5 {
		t.Fatalf("htons(0x88B5) lays out as % x", b)
	}
}

func TestAccept(t *testing.T) {
	own := ether.MAC{2, 0, 0, 0, 0, 0xb}
	peer := ether.MAC{2, 0, 0, 0, 0, 0xa}
	p := &Port{nb: ether.NewNeighbour(own, ether.MAC{})}
	frame := func(dst ether.MAC, typ uint16, payload string) []byte {
		f := make([]byte, ether.HeaderLen+len(payload))
		ether.PutHeader(f, ether.Header{Dst: dst, Src: peer, EtherType: typ})
		copy(f[ether.HeaderLen:], payload)
		return f
	}
	buf := make([]byte, 5)
	if _, ok := p.accept(frame(ether.MAC{2, 0, 0, 0, 0, 0xc}, ether.EtherType, "x"), buf); ok {
		t.Fatal("accepted a frame for another station")
	}
	if _, ok := p.accept([]byte{1, 2}, buf); ok {
		t.Fatal("accepted a runt")
	}
	n, ok := p.accept(frame(own, ether.EtherType, "hello, neighbour"), buf)
	if !ok || !bytes.Equal(buf[:n], []byte("hello")) {
		t.Fatalf("accept = %q %v, want the truncated datagram", buf[:n], ok)
	}
	if p.rxRefused.Load() != 2 || p.rxTruncated.Load() != 1 || p.rxDatagrams.Load() != 1 {
		t.Fatalf("refused %d truncated %d datagrams %d", p.rxRefused.Load(), p.rxTruncated.Load(), p.rxDatagrams.Load())
	}
	if m, known := p.nb.Peer(); !known || m != peer {
		t.Fatalf("neighbour %v %v, want %v", m, known, peer)
	}
}
