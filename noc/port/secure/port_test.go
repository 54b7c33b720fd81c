package secure

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/mem"
)

func keyPair(t testing.TB) KeyPair {
	t.Helper()
	kp, err := GenerateKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// recorder remembers the datagrams written through it.
type recorder struct {
	noc.Port
	mu  sync.Mutex
	out [][]byte
}

func (r *recorder) WriteDatagram(b []byte) error {
	r.mu.Lock()
	r.out = append(r.out, append([]byte(nil), b...))
	r.mu.Unlock()
	return r.Port.WriteDatagram(b)
}

func (r *recorder) last(typ byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.out) - 1; i >= 0; i-- {
		if r.out[i][0] == typ {
			return r.out[i]
		}
	}
	return nil
}

type pair struct {
	a, b   *Port
	ra, rb *recorder
	ka, kb KeyPair
	fab    *Fabric
	ma, mb *mem.Port
}

func newPair(t testing.TB, fabB *Fabric, kb KeyPair) *pair {
	t.Helper()
	ma, mb, err := mem.Pair(mem.Config{Queue: 4096})
	if err != nil {
		t.Fatal(err)
	}
	pr := &pair{ka: keyPair(t), kb: kb, ma: ma, mb: mb}
	if pr.kb.Public.IsZero() {
		pr.kb = keyPair(t)
	}
	pr.fab = NewFabric()
	pr.fab.Add("a", pr.ka.Public)
	pr.fab.Add("b", pr.kb.Public)
	if fabB == nil {
		fabB = pr.fab
	}
	pr.ra, pr.rb = &recorder{Port: ma}, &recorder{Port: mb}
	if pr.a, err = New(pr.ra, Config{Static: pr.ka, Fabric: pr.fab, HandshakeRetry: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if pr.b, err = New(pr.rb, Config{Static: pr.kb, Fabric: fabB, HandshakeRetry: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.a.Close(); pr.b.Close() })
	return pr
}

// exchange writes msg from w until r reads it (bounded); r's reads run
// with a short deadline, and w's peer answers handshakes meanwhile.
func exchange(t testing.TB, w, r *Port, msg []byte, bound time.Duration) bool {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // w's reader: answers handshakes, drops data
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = w.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
			_, _ = w.ReadDatagram(buf)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(bound)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		if err := w.WriteDatagram(msg); err != nil {
			t.Fatal(err)
		}
		_ = r.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		n, err := r.ReadDatagram(buf)
		if err == nil && bytes.Equal(buf[:n], msg) {
			return true
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
	}
	return false
}

func TestSessionCarriesDatagramsBothWays(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	if !exchange(t, pr.a, pr.b, []byte("hello b"), 2*time.Second) {
		t.Fatal("a→b never delivered")
	}
	if !exchange(t, pr.b, pr.a, []byte("hello a"), 2*time.Second) {
		t.Fatal("b→a never delivered")
	}
	if k, ok := pr.a.Peer(); !ok || k != pr.kb.Public {
		t.Fatalf("a's peer: %v %v", k, ok)
	}
	if name, ok := pr.b.PeerName(); !ok || name != "a" {
		t.Fatalf("b's peer name: %q %v", name, ok)
	}
	// nothing travels in the clear
	if d := pr.ra.last(msgData); d == nil || bytes.Contains(d, []byte("hello b")) {
		t.Fatalf("sealed datagram %x shows the plaintext", d)
	}
	if pr.a.MTU() != pr.ma.MTU()-Overhead {
		t.Fatalf("MTU %d", pr.a.MTU())
	}
}

// TestUnlistedKeyIsNeverANeighbour is the rogue node: a node with a valid
// key pair of its own that the fabric does not list completes no
// handshake, and nothing it sends is delivered.
func TestUnlistedKeyIsNeverANeighbour(t *testing.T) {
	rogue := keyPair(t)
	own := NewFabric() // the rogue accepts anyone it knows: the real node's key
	pr := newPair(t, own, rogue)
	own.Add("a", pr.ka.Public)
	// a's fabric lists a and some other b, not the rogue
	fab := NewFabric()
	fab.Add("a", pr.ka.Public)
	fab.Add("b", keyPair(t).Public)
	pr.a.cfg.Fabric = fab
	if exchange(t, pr.b, pr.a, []byte("let me in"), 300*time.Millisecond) {
		t.Fatal("the rogue's datagram was delivered")
	}
	if exchange(t, pr.a, pr.b, []byte("secret"), 300*time.Millisecond) {
		t.Fatal("the rogue read a's datagram")
	}
	if _, ok := pr.a.Peer(); ok {
		t.Fatal("a has a session with the rogue")
	}
	if pr.a.Stats().Refused == 0 {
		t.Fatal("no refusal counted")
	}
}

func TestReplayedDatagramIsRefused(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	if !exchange(t, pr.a, pr.b, []byte("once"), 2*time.Second) {
		t.Fatal("no session")
	}
	d := pr.ra.last(msgData)
	before := pr.b.Stats().Replayed
	if err := pr.ma.WriteDatagram(d); err != nil { // the attacker replays it
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	_ = pr.b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := pr.b.ReadDatagram(buf); err == nil {
		t.Fatalf("replay delivered %q", buf[:n])
	}
	if pr.b.Stats().Replayed != before+1 {
		t.Fatalf("replays counted: %d", pr.b.Stats().Replayed-before)
	}
	// a flipped bit is refused as unauthentic
	d2 := append([]byte(nil), pr.ra.last(msgData)...)
	d2[len(d2)-1] ^= 1
	binaryCounterBump(d2)
	_ = pr.ma.WriteDatagram(d2)
	_ = pr.b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := pr.b.ReadDatagram(buf); err == nil {
		t.Fatal("forged datagram delivered")
	}
	if pr.b.Stats().Unauthentic == 0 {
		t.Fatal("no unauthentic datagram counted")
	}
}

// binaryCounterBump moves a data message's counter forward so that the
// replay window does not hide the forgery.
func binaryCounterBump(d []byte) { d[12] += 100 }

// TestRestartedPeerRehandshakes: a peer that lost its state (restarted,
// same key) gets a new session; the old one's datagrams are not accepted
// by the new incarnation.
func TestRestartedPeerRehandshakes(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	if !exchange(t, pr.a, pr.b, []byte("before"), 2*time.Second) {
		t.Fatal("no session")
	}
	old := pr.ra.last(msgData)
	nb, err := New(pr.rb, Config{Static: pr.kb, Fabric: pr.fab, HandshakeRetry: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !exchange(t, pr.a, nb, []byte("after"), 2*time.Second) {
		t.Fatal("a→restarted b never delivered")
	}
	if !exchange(t, nb, pr.a, []byte("back"), 2*time.Second) {
		t.Fatal("restarted b→a never delivered")
	}
	_ = pr.ma.WriteDatagram(old)
	buf := make([]byte, 2048)
	_ = nb.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := nb.ReadDatagram(buf); err == nil {
		t.Fatal("the restarted peer accepted the old session's datagram")
	}
}

func TestRekeyKeepsTraffic(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	pr.a.cfg.RekeyAfter, pr.a.cfg.RejectAfter = 20*time.Millisecond, time.Hour
	pr.b.cfg.RekeyAfter, pr.b.cfg.RejectAfter = 20*time.Millisecond, time.Hour
	deadline := time.Now().Add(3 * time.Second)
	for pr.a.Stats().Handshakes < 3 && time.Now().Before(deadline) {
		if !exchange(t, pr.a, pr.b, []byte("x"), time.Second) || !exchange(t, pr.b, pr.a, []byte("y"), time.Second) {
			t.Fatal("traffic stopped across a rekey")
		}
	}
	if pr.a.Stats().Handshakes < 3 {
		t.Fatalf("handshakes: %d", pr.a.Stats().Handshakes)
	}
}

func TestHandshakeRateIsBounded(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	now := time.Unix(0, 0)
	pr.b.cfg.Now = func() time.Time { return now }
	init := func() []byte {
		st := &Port{cfg: pr.a.cfg}
		return st.startHandshake(now)
	}
	for range 200 {
		pr.b.input(init(), nil)
	}
	// each init beyond the rate is dropped or answered with a cookie,
	// never with public-key work
	if st := pr.b.Stats(); st.RateLimited+st.CookiesSent < 200-uint64(pr.b.cfg.HandshakeRate) {
		t.Fatalf("rate limited %d and sent %d cookies for 200 inits at one instant", st.RateLimited, st.CookiesSent)
	}
}

func TestWindow(t *testing.T) {
	var w window
	take := func(c uint64) bool {
		if !w.check(c) {
			return false
		}
		w.accept(c)
		return true
	}
	for _, c := range []uint64{0, 1, 5, 3, 2} {
		if !take(c) {
			t.Fatalf("fresh %d refused", c)
		}
	}
	for _, c := range []uint64{0, 1, 5, 3} {
		if take(c) {
			t.Fatalf("replayed %d accepted", c)
		}
	}
	if !take(4) || !take(10000) {
		t.Fatal("fresh refused")
	}
	if take(10000 - windowBits - 1) {
		t.Fatal("counter behind the window accepted")
	}
	if !take(10000 - 100) {
		t.Fatal("counter inside the window refused")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	kp := keyPair(t)
	p := dir + "/node.key"
	if err := WriteKeyFile(p, kp, -1, -1); err != nil {
		t.Fatal(err)
	}
	got, err := LoadKeyFile(p)
	if err != nil || got != kp {
		t.Fatalf("load: %v", err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(p); err == nil {
		t.Fatal("loaded a key file others can read")
	}
	f := NewFabric()
	f.Add("n0", kp.Public)
	parsed, err := ParseFabric(f.Format([]PublicKey{kp.Public}))
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := parsed.Lookup(kp.Public); !ok || name != "n0" {
		t.Fatalf("lookup: %q %v", name, ok)
	}
}

// batcher is an inner port with a batch write.
type batcher struct {
	noc.Port
	batches int
}

func (b *batcher) WriteDatagrams(bufs [][]byte) error {
	b.batches++
	for _, d := range bufs {
		if err := b.Port.WriteDatagram(d); err != nil {
			return err
		}
	}
	return nil
}

func TestBatchWriteSealsEach(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	if !exchange(t, pr.a, pr.b, []byte("up"), 2*time.Second) {
		t.Fatal("no session")
	}
	bw := &batcher{Port: pr.a.inner}
	pr.a.inner = bw
	msgs := [][]byte{[]byte("one"), []byte("two"), []byte("three")}
	if err := pr.a.WriteDatagrams(msgs); err != nil {
		t.Fatal(err)
	}
	if bw.batches != 1 {
		t.Fatalf("%d batches", bw.batches)
	}
	buf := make([]byte, 64)
	for _, want := range msgs {
		_ = pr.b.SetReadDeadline(time.Now().Add(time.Second))
		n, err := pr.b.ReadDatagram(buf)
		if err != nil || string(buf[:n]) != string(want) {
			t.Fatalf("got %q %v, want %q", buf[:n], err, want)
		}
	}
}

func TestExpiredSessionIsRefused(t *testing.T) {
	pr := newPair(t, nil, KeyPair{})
	if !exchange(t, pr.a, pr.b, []byte("x"), 2*time.Second) {
		t.Fatal("no session")
	}
	d := pr.ra.last(msgData)
	later := time.Now().Add(time.Hour)
	pr.b.cfg.Now = func() time.Time { return later }
	pr.b.mu.Lock()
	s := pr.b.cur
	pr.b.mu.Unlock()
	s.rmu.Lock()
	s.opens = expiryCheck - 1 // the next datagram reads the clock
	s.rmu.Unlock()
	binaryCounterBump(d)
	before := pr.b.Stats().NoSession
	_ = pr.ma.WriteDatagram(d)
	buf := make([]byte, 64)
	_ = pr.b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, _ = pr.b.ReadDatagram(buf)
	if pr.b.Stats().NoSession != before+1 || !s.expired.Load() {
		t.Fatalf("a datagram of a session past RejectAfter was not refused as such")
	}
}

// TestFabricBindsKeysToNodes: node=ID binds a key to a node id, a list
// without it binds nothing, Format writes what ParseFabric reads, and a
// key listed twice or a bad id is refused; rebinding a key is a change.
func TestFabricBindsKeysToNodes(t *testing.T) {
	a, b := keyPair(t).Public, keyPair(t).Public
	f, err := ParseFabric([]byte("# c\nn1 " + a.String() + " node=1\nloose " + b.String() + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n, bound := f.Node(a); !bound || n != 1 {
		t.Fatalf("a: node %d bound %v, want 1", n, bound)
	}
	if _, bound := f.Node(b); bound {
		t.Fatal("b is bound")
	}
	if u := f.Unbound(); len(u) != 1 || u[0] != "loose" {
		t.Fatalf("unbound %q", u)
	}
	g, err := ParseFabric(f.Format([]PublicKey{a, b}))
	if err != nil {
		t.Fatal(err)
	}
	if n, bound := g.Node(a); !bound || n != 1 {
		t.Fatalf("round trip: node %d bound %v", n, bound)
	}
	for _, bad := range []string{
		"x " + a.String() + " node=1\ny " + a.String() + " node=2\n",
		"x " + a.String() + " node=-1\n",
		"x " + a.String() + " node=4294967295\n",
		"x " + a.String() + " 1\n",
	} {
		if _, err := ParseFabric([]byte(bad)); !errors.Is(err, ErrFabricFile) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	h := NewFabric()
	h.AddNode("n1", a, 2)
	h.Add("loose", b)
	added, removed := f.Replace(h)
	if len(added) != 1 || len(removed) != 1 || added[0].Key != a || removed[0].Key != a {
		t.Fatalf("rebinding: added %v removed %v", added, removed)
	}
}
