package udp_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/udp"
)

// loopbackPair returns two ports on 127.0.0.1 sending to each other.
func loopbackPair(t testing.TB, mtu int) (a, b *udp.Port) {
	t.Helper()
	cb, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	a, err = udp.Open("127.0.0.1:0", cb.LocalAddr().String(), mtu)
	if err != nil {
		cb.Close()
		t.Fatal(err)
	}
	if b, err = udp.New(cb, a.LocalAddr(), mtu); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// poll waits, boundedly, for a datagram through TryReadDatagram.
func poll(t testing.TB, p *udp.Port, buf []byte) int {
	t.Helper()
	for range 5000 {
		n, ok, err := p.TryReadDatagram(buf)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return n
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no datagram within 5s")
	return 0
}

func TestRoundTrip(t *testing.T) {
	a, b := loopbackPair(t, 1500)
	buf := make([]byte, 2048)
	if n, ok, err := b.TryReadDatagram(buf); ok || err != nil {
		t.Fatalf("poll of an empty socket: %d %v %v", n, ok, err)
	}
	if err := a.WriteDatagram([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := b.ReadDatagram(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	if err := b.WriteDatagram([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if n := poll(t, a, buf); string(buf[:n]) != "pong" {
		t.Fatalf("polled %q", buf[:n])
	}
	// The largest datagram, and truncation into a short buffer.
	big := make([]byte, 1500)
	big[1499] = 7
	if err := a.WriteDatagram(big); err != nil {
		t.Fatal(err)
	}
	if n := poll(t, b, buf); n != 1500 || buf[1499] != 7 {
		t.Fatalf("polled %d bytes", n)
	}
	if err := a.WriteDatagram(big); err != nil {
		t.Fatal(err)
	}
	if n := poll(t, b, buf[:100]); n != 100 {
		t.Fatalf("truncated poll returned %d", n)
	}
	if err := a.WriteDatagram(make([]byte, 1501)); !errors.Is(err, udp.ErrTooLarge) {
		t.Errorf("oversized write: %v", err)
	}
}

func TestForeignDatagramsDropped(t *testing.T) {
	a, b := loopbackPair(t, 1500)
	stranger, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(b.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	if _, err := stranger.Write([]byte("stray")); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.Write([]byte("stray")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // loopback delivers at once; be generous
	if err := a.WriteDatagram([]byte("real")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := b.ReadDatagram(buf) // the first stray is skipped here
	if err != nil || string(buf[:n]) != "real" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	if s := b.Stats(); s.Foreign != 2 {
		t.Errorf("foreign %d, want 2", s.Foreign)
	}
	if _, err := stranger.Write([]byte("stray")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, ok, err := b.TryReadDatagram(buf); ok || err != nil {
		t.Errorf("poll returned a stray: %q %v", buf[:n], err)
	}
	if s := b.Stats(); s.Foreign != 3 {
		t.Errorf("foreign %d, want 3", s.Foreign)
	}
}

func TestDeadlineAndClose(t *testing.T) {
	_, b := loopbackPair(t, 1500)
	buf := make([]byte, 64)
	b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := b.ReadDatagram(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past deadline: %v", err)
	}
	b.SetReadDeadline(time.Time{})
	got := make(chan error, 1)
	go func() { _, err := b.ReadDatagram(buf); got <- err }()
	time.Sleep(10 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, noc.ErrPortClosed) {
			t.Errorf("read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
	if _, _, err := b.TryReadDatagram(buf); !errors.Is(err, noc.ErrPortClosed) {
		t.Errorf("poll after Close: %v", err)
	}
	if err := b.WriteDatagram([]byte("x")); !errors.Is(err, noc.ErrPortClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range [][2]string{
		{"127.0.0.1:0", "nonsense"},
		{"127.0.0.1:0", "0.0.0.0:9"},
		{"127.0.0.1:0", "127.0.0.1:0"},
		{"256.0.0.1:0", "127.0.0.1:9"},
	} {
		if p, err := udp.Open(tc[0], tc[1], 1500); err == nil {
			p.Close()
			t.Errorf("Open(%q, %q) succeeded", tc[0], tc[1])
		}
	}
	if p, err := udp.Open("127.0.0.1:0", "127.0.0.1:9", 0); !errors.Is(err, udp.ErrAddress) {
		if p != nil {
			p.Close()
		}
		t.Errorf("MTU 0: %v", err)
	}
}

func TestPollAllocatesNothing(t *testing.T) {
	a, b := loopbackPair(t, 1500)
	d := make([]byte, 128)
	buf := make([]byte, 1500)
	allocs := testing.AllocsPerRun(200, func() {
		if err := a.WriteDatagram(d); err != nil {
			t.Fatal(err)
		}
		poll(t, b, buf)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per write and poll", allocs)
	}
}

// TestLinkOverLoopback runs the reliable link over real sockets.
func TestLinkOverLoopback(t *testing.T) {
	pa, pb := loopbackPair(t, 1500)
	cfg := func(s uint64) link.Config {
		c := link.DefaultConfig()
		c.Session = s
		c.DeadInterval = 5 * time.Second
		return c
	}
	a, err := link.NewConn(pa, cfg(1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := link.NewConn(pb, cfg(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 500
	go func() {
		msg := make([]byte, 4096+noc.HeaderLen)
		for i := range n {
			msg[0], msg[len(msg)-1] = byte(i), byte(i>>8)
			if err := a.Send(ctx, msg); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	buf := make([]byte, 1<<16)
	for i := range n {
		k, err := b.Receive(ctx, buf)
		if err != nil {
			t.Fatal(err)
		}
		if k != 4096+noc.HeaderLen || buf[0] != byte(i) || buf[k-1] != byte(i>>8) {
			t.Fatalf("message %d: %d bytes, marks %d %d", i, k, buf[0], buf[k-1])
		}
	}
}

func TestPathMTU(t *testing.T) {
	mtu, err := udp.PathMTU("127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	// loopback's MTU is far above the jumbo cap
	if mtu != udp.JumboMTU {
		t.Fatalf("path MTU over loopback %d, want %d", mtu, udp.JumboMTU)
	}
	if _, err := udp.PathMTU("no such host:x"); err == nil {
		t.Fatal("path MTU to a bad address: no error")
	}
}
