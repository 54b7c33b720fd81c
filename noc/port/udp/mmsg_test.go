package udp_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"
)

// TestBatches: 150 datagrams (more than one sendmmsg batch) written with
// WriteDatagrams arrive whole and in order through TryReadDatagrams; a
// datagram from a foreign address among them is dropped and counted; an
// empty socket reads 0 at once.
func TestBatches(t *testing.T) {
	a, b := loopbackPair(t, 1500)
	bufs := make([][]byte, 16)
	lens := make([]int, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 1500)
	}
	if n, err := b.TryReadDatagrams(bufs, lens); n != 0 || err != nil {
		t.Fatalf("empty socket: %d, %v", n, err)
	}
	var out [][]byte
	for i := range 150 {
		out = append(out, []byte(fmt.Sprintf("datagram %03d %s", i, bytes.Repeat([]byte{'x'}, i))))
	}
	if err := a.WriteDatagrams(out[:70]); err != nil {
		t.Fatal(err)
	}
	foreign, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(b.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	if _, err := foreign.Write([]byte("not from the remote")); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteDatagrams(out[70:]); err != nil {
		t.Fatal(err)
	}
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got < len(out) && time.Now().Before(deadline) {
		n, err := b.TryReadDatagrams(bufs, lens)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if !bytes.Equal(bufs[i][:lens[i]], out[got]) {
				t.Fatalf("datagram %d: got %q", got, bufs[i][:min(lens[i], 20)])
			}
			got++
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if got != len(out) {
		t.Fatalf("%d of %d datagrams arrived", got, len(out))
	}
	if f := b.Stats().Foreign; f != 1 {
		t.Fatalf("foreign datagrams counted %d, want 1", f)
	}
	if err := a.WriteDatagrams([][]byte{make([]byte, 1501)}); err == nil {
		t.Fatal("a datagram beyond the MTU was written")
	}
}

// TestSegmentedBatches: runs of datagrams of one size (which WriteDatagrams
// sends as UDP GSO messages where the kernel has it), each run ended by a
// shorter one, and runs longer than a GSO message takes, arrive whole, one
// datagram each, and in order.
func TestSegmentedBatches(t *testing.T) {
	a, b := loopbackPair(t, 9000)
	var out [][]byte
	for i := range 300 {
		n := 4200
		switch {
		case i%37 == 36:
			n = 100 + i // a shorter one ends a run
		case i >= 200:
			n = 1000
		}
		d := bytes.Repeat([]byte{byte(i)}, n)
		d[0], d[1] = byte(i>>8), byte(i)
		out = append(out, d)
	}
	bufs := make([][]byte, 64)
	lens := make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 9000)
	}
	got := 0
	for sent := 0; sent < len(out); sent += 50 {
		if err := a.WriteDatagrams(out[sent:min(sent+50, len(out))]); err != nil {
			t.Fatal(err)
		}
		// read as we go: the receive buffer holds a few hundred KiB
		for deadline := time.Now().Add(5 * time.Second); got < min(sent+50, len(out)); {
			n, err := b.TryReadDatagrams(bufs, lens)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if !bytes.Equal(bufs[i][:lens[i]], out[got]) {
					t.Fatalf("datagram %d: %d bytes, first %x, want %d bytes", got, lens[i], bufs[i][:2], len(out[got]))
				}
				got++
			}
			if n == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d datagrams arrived", got, len(out))
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}
