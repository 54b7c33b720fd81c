package ether

import (
	"bytes"
	"errors"
	"net"
	"testing"
)

var (
	macA = MAC{0x02, 0, 0, 0, 0, 0xa}
	macB = MAC{0x02, 0, 0, 0, 0, 0xb}
	macC = MAC{0x02, 0, 0, 0, 0, 0xc}
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Dst: macB, Src: macA, EtherType: EtherType}
	b := make([]byte, HeaderLen+3)
	PutHeader(b, h)
	want := []byte{2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0xb5}
	if !bytes.Equal(b[:HeaderLen], want) {
		t.Fatalf("header bytes % x, want % x", b[:HeaderLen], want)
	}
	got, err := ParseHeader(b)
	if err != nil || got != h {
		t.Fatalf("ParseHeader = %+v, %v; want %+v", got, err, h)
	}
	if _, err := ParseHeader(b[:HeaderLen-1]); !errors.Is(err, ErrShort) {
		t.Fatalf("short frame: err %v, want ErrShort", err)
	}
}

func TestMACFrom(t *testing.T) {
	m, err := MACFrom(net.HardwareAddr{2, 0, 0, 0, 0, 0xa})
	if err != nil || m != macA {
		t.Fatalf("MACFrom = %v, %v", m, err)
	}
	if _, err := MACFrom(net.HardwareAddr{1, 2, 3}); err == nil {
		t.Fatal("MACFrom accepted a 3-byte address")
	}
	if m.String() != "02:00:00:00:00:0a" {
		t.Fatalf("String = %s", m)
	}
}

func TestNeighbourLearns(t *testing.T) {
	n := NewNeighbour(macA, MAC{})
	if _, ok := n.Peer(); ok {
		t.Fatal("peer known before any frame")
	}
	if n.Dst() != Broadcast || n.Header().Dst != Broadcast {
		t.Fatal("unknown neighbour is not addressed by broadcast")
	}
	cases := []struct {
		name string
		h    Header
		ok   bool
	}{
		{"other ethertype", Header{Dst: macA, Src: macB, EtherType: 0x0800}, false},
		{"for another station", Header{Dst: macC, Src: macB, EtherType: EtherType}, false},
		{"own frame reflected", Header{Dst: Broadcast, Src: macA, EtherType: EtherType}, false},
		{"multicast source", Header{Dst: macA, Src: Broadcast, EtherType: EtherType}, false},
		{"broadcast from B", Header{Dst: Broadcast, Src: macB, EtherType: EtherType}, true},
	}
	for _, c := range cases {
		if got := n.Accept(c.h); got != c.ok {
			t.Errorf("%s: Accept = %v, want %v", c.name, got, c.ok)
		}
	}
	if p, ok := n.Peer(); !ok || p != macB || n.Dst() != macB {
		t.Fatalf("after a frame from B: peer %v %v", p, ok)
	}
	// The neighbour changes (a new NIC at the far end): it is relearned.
	if !n.Accept(Header{Dst: macA, Src: macC, EtherType: EtherType}) {
		t.Fatal("unicast frame from C refused")
	}
	if n.Dst() != macC {
		t.Fatalf("Dst = %v after C spoke, want %v", n.Dst(), macC)
	}
	if h := n.Header(); h.Src != macA || h.EtherType != EtherType {
		t.Fatalf("Header = %+v", h)
	}
}

func TestNeighbourFixed(t *testing.T) {
	n := NewNeighbour(macA, macB)
	if n.Dst() != macB {
		t.Fatalf("fixed neighbour Dst = %v", n.Dst())
	}
	if n.Accept(Header{Dst: macA, Src: macC, EtherType: EtherType}) {
		t.Fatal("fixed neighbour accepted a frame from a stranger")
	}
	if !n.Accept(Header{Dst: macA, Src: macB, EtherType: EtherType}) {
		t.Fatal("fixed neighbour refused its peer")
	}
	if n.Dst() != macB {
		t.Fatal("fixed neighbour changed")
	}
}

func BenchmarkAccept(b *testing.B) {
	n := NewNeighbour(macA, MAC{})
	h := Header{Dst: macA, Src: macB, EtherType: EtherType}
	for b.Loop() {
		if !n.Accept(h) {
			b.Fatal("refused")
		}
	}
}
