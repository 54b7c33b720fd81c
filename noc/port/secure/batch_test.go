package secure

import (
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/port/udp"
)

// udpPair is two sealed ports over UDP on loopback: the inner ports read
// in batches (recvmmsg).
func udpPair(t *testing.T) (a, b *Port, ua *udp.Port) {
	t.Helper()
	ua, err := udp.Open("127.0.0.1:0", "127.0.0.1:9", 1500)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := udp.Open("127.0.0.1:0", ua.LocalAddr().String(), 1500)
	if err != nil {
		t.Fatal(err)
	}
	ua.Close()
	if ua, err = udp.Open(ua.LocalAddr().String(), ub.LocalAddr().String(), 1500); err != nil {
		t.Fatal(err)
	}
	ka, kb := keyPair(t), keyPair(t)
	fab := NewFabric()
	fab.Add("a", ka.Public)
	fab.Add("b", kb.Public)
	if a, err = New(ua, Config{Static: ka, Fabric: fab, HandshakeRetry: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if b, err = New(ub, Config{Static: kb, Fabric: fab, HandshakeRetry: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, ua
}

func TestBatchReadOpensEachAndDropsForgeries(t *testing.T) {
	a, b, ua := udpPair(t)
	if !exchange(t, a, b, []byte("up"), 2*time.Second) {
		t.Fatal("no session")
	}
	for drained := false; !drained; { // late copies of "up"
		bufs, lens := [][]byte{make([]byte, 64)}, []int{0}
		n, err := b.TryReadDatagrams(bufs, lens)
		if err != nil {
			t.Fatal(err)
		}
		drained = n == 0
	}
	if err := a.WriteDatagram([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := ua.WriteDatagram([]byte("forged: not sealed by anyone")); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteDatagrams([][]byte{[]byte("two"), []byte("three")}); err != nil {
		t.Fatal(err)
	}
	want := []string{"one", "two", "three"}
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		bufs := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
		lens := make([]int, len(bufs))
		n, err := b.TryReadDatagrams(bufs, lens)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got = append(got, string(bufs[i][:lens[i]]))
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %q within 5s, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if m := b.Stats().Malformed; m == 0 {
		t.Fatalf("the forged datagram was not counted: %+v", b.Stats())
	}
}
