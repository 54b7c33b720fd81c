package secure

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// sealRaw seals plaintext as a message of type typ in a's current session,
// as a's peer would receive it.
func sealRaw(t testing.TB, p *Port, typ byte, plaintext []byte) []byte {
	t.Helper()
	p.mu.Lock()
	s := p.cur
	p.mu.Unlock()
	if s == nil {
		t.Fatal("no session")
	}
	n := s.counter.Add(1) - 1
	w := make([]byte, dataHeader, dataHeader+len(plaintext)+tagLen)
	w[0] = typ
	binary.BigEndian.PutUint32(w[1:], s.remote)
	binary.BigEndian.PutUint64(w[5:], n)
	return s.send.Encrypt(w, n, w[:dataHeader], plaintext)
}

// readAll reads what b has waiting (bounded by n datagrams).
func readAll(t testing.TB, p *Port, n int) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, 2048)
	for range n {
		_ = p.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		k, err := p.ReadDatagram(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]byte(nil), buf[:k]...))
	}
	return got
}

func TestWriteDatagramsBundles(t *testing.T) {
	pr, _ := established(t)
	_ = readAll(t, pr.b, 100) // what the handshake left
	var bufs [][]byte
	for i := range 40 {
		bufs = append(bufs, []byte(fmt.Sprintf("datagram %02d %s", i, bytes.Repeat([]byte{'x'}, i*5))))
	}
	before := pr.a.Stats()
	if err := pr.a.WriteDatagrams(bufs); err != nil {
		t.Fatal(err)
	}
	after := pr.a.Stats()
	sealed := after.Sealed - before.Sealed
	if sealed < 2 || sealed >= 10 {
		t.Fatalf("40 small datagrams took %d sealed datagrams", sealed)
	}
	if after.Bundled-before.Bundled < 30 {
		t.Fatalf("only %d datagrams were bundled", after.Bundled-before.Bundled)
	}
	got := readAll(t, pr.b, 100)
	if len(got) != len(bufs) {
		t.Fatalf("read %d of %d datagrams", len(got), len(bufs))
	}
	for i := range bufs {
		if !bytes.Equal(got[i], bufs[i]) {
			t.Fatalf("datagram %d: %q, want %q", i, got[i], bufs[i])
		}
	}
	// a lone datagram goes as plain data, and a full-MTU one alone too
	full := bytes.Repeat([]byte{7}, pr.a.MTU())
	before = pr.a.Stats()
	if err := pr.a.WriteDatagrams([][]byte{[]byte("one"), full, []byte("two")}); err != nil {
		t.Fatal(err)
	}
	after = pr.a.Stats()
	if after.Sealed-before.Sealed != 3 || after.Bundled != before.Bundled {
		t.Fatalf("%d sealed, %d bundled for three datagrams that fit with no neighbour",
			after.Sealed-before.Sealed, after.Bundled-before.Bundled)
	}
	got = readAll(t, pr.b, 10)
	if len(got) != 3 || string(got[0]) != "one" || !bytes.Equal(got[1], full) || string(got[2]) != "two" {
		t.Fatalf("got %d datagrams", len(got))
	}
}

func TestBundleReplayedIsRefused(t *testing.T) {
	pr, _ := established(t)
	_ = readAll(t, pr.b, 100)
	b := sealRaw(t, pr.a, msgBundle, []byte{0, 1, 'a', 0, 2, 'b', 'c'})
	buf := make([]byte, 64)
	n, ok := pr.b.input(append([]byte(nil), b...), buf)
	if !ok || string(buf[:n]) != "a" {
		t.Fatalf("first datagram of the bundle: %q %v", buf[:n], ok)
	}
	if n, ok := pr.b.pending(buf); !ok || string(buf[:n]) != "bc" {
		t.Fatalf("second datagram of the bundle: %q %v", buf[:n], ok)
	}
	replayed := pr.b.Stats().Replayed
	if _, ok := pr.b.input(append([]byte(nil), b...), buf); ok || pr.b.Stats().Replayed != replayed+1 {
		t.Fatal("a replayed bundle was accepted")
	}
	// the type is authenticated: the same bytes relabelled data do not open
	d := append([]byte(nil), sealRaw(t, pr.a, msgBundle, []byte{0, 1, 'a', 0, 1, 'b'})...)
	d[0] = msgData
	if _, ok := pr.b.input(d, buf); ok {
		t.Fatal("a bundle relabelled as data opened")
	}
}

func TestMalformedBundleIsDroppedWhole(t *testing.T) {
	pr, _ := established(t)
	_ = readAll(t, pr.b, 100)
	buf := make([]byte, 64)
	for _, plain := range [][]byte{
		{0, 1, 'a'},               // one datagram: not a bundle
		{0, 1, 'a', 0, 3, 'b'},    // the second overruns
		{0, 1, 'a', 0, 0},         // an empty one
		{0, 1, 'a', 0, 1, 'b', 9}, // a trailing byte
		{},                        // nothing
	} {
		malformed := pr.b.Stats().Malformed
		if _, ok := pr.b.input(sealRaw(t, pr.a, msgBundle, plain), buf); ok {
			t.Fatalf("bundle %x delivered", plain)
		}
		if _, ok := pr.b.pending(buf); ok {
			t.Fatalf("bundle %x left datagrams to read", plain)
		}
		if pr.b.Stats().Malformed != malformed+1 {
			t.Fatalf("bundle %x not counted malformed", plain)
		}
	}
}

// FuzzBundle feeds arbitrary bundle plaintexts, sealed in the session as
// a listed (perhaps compromised) neighbour could, to a port: it never
// panics, delivers a bundle only when it is well formed, and then exactly
// its datagrams, in order.
func FuzzBundle(f *testing.F) {
	pr, _ := established(f)
	for range 3 { // let any handshake still on its way finish
		_, _ = readAll(f, pr.b, 100), readAll(f, pr.a, 100)
	}
	f.Add([]byte{0, 1, 'a', 0, 2, 'b', 'c'})
	f.Add([]byte{0, 1, 'a'})
	f.Add([]byte{0, 5, 'a'})
	f.Add([]byte{})
	buf := make([]byte, 2048)
	f.Fuzz(func(t *testing.T, plain []byte) {
		if len(plain) > pr.a.MTU() {
			return
		}
		for { // nothing left over from an earlier input
			if _, ok := pr.b.pending(buf); !ok {
				break
			}
		}
		var want [][]byte
		if checkBundle(plain) {
			for rest := plain; len(rest) > 0; {
				var d []byte
				d, rest = nextInBundle(rest)
				want = append(want, d)
			}
		}
		var got [][]byte
		if n, ok := pr.b.input(sealRaw(t, pr.a, msgBundle, plain), buf); ok {
			got = append(got, append([]byte(nil), buf[:n]...))
			for {
				n, ok := pr.b.pending(buf)
				if !ok {
					break
				}
				got = append(got, append([]byte(nil), buf[:n]...))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("delivered %d datagrams, want %d (%+v)", len(got), len(want), pr.b.Stats())
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("datagram %d: %x, want %x", i, got[i], want[i])
			}
		}
	})
}

// TestBatchReadOfBundles: a batch read with room for fewer datagrams than
// a bundle holds keeps the rest (and the sealed datagrams read with it)
// for the next reads, single or batched: nothing is lost or reordered.
func TestBatchReadOfBundles(t *testing.T) {
	a, b, _ := udpPair(t)
	if !exchange(t, a, b, []byte("up"), 2*time.Second) {
		t.Fatal("no session")
	}
	for drained := false; !drained; { // late copies of "up"
		n, err := b.TryReadDatagrams([][]byte{make([]byte, 64)}, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		drained = n == 0
	}
	var want []string
	for burst := range 3 {
		var bufs [][]byte
		for i := range 30 {
			bufs = append(bufs, []byte(fmt.Sprintf("burst %d datagram %02d", burst, i)))
			want = append(want, string(bufs[len(bufs)-1]))
		}
		if err := a.WriteDatagrams(bufs); err != nil {
			t.Fatal(err)
		}
	}
	if a.Stats().Bundled < 60 {
		t.Fatalf("only %d datagrams bundled", a.Stats().Bundled)
	}
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 64)
	for k := 0; len(got) < len(want) && time.Now().Before(deadline); k++ {
		if k%3 == 2 { // now and then a single read
			n, ok, err := b.TryReadDatagram(buf)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				got = append(got, string(buf[:n]))
			}
			continue
		}
		bufs := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}
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
		t.Fatalf("read %d of %d datagrams within 5s", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("datagram %d: %q, want %q", i, got[i], want[i])
		}
	}
}
