package secure

import (
	"strings"
	"testing"
	"time"
)

// established returns two ports with a session, and the datagrams that
// built it (seeds for the fuzzers).
func established(t testing.TB) (*pair, [][]byte) {
	pr := newPair(t, nil, KeyPair{})
	if !exchange(t, pr.a, pr.b, []byte("seed datagram"), 2*time.Second) {
		t.Fatal("no session")
	}
	var seeds [][]byte
	for _, typ := range []byte{msgInit, msgResponse, msgFinish, msgData} {
		if d := pr.ra.last(typ); d != nil {
			seeds = append(seeds, d)
		}
		if d := pr.rb.last(typ); d != nil {
			seeds = append(seeds, d)
		}
	}
	return pr, seeds
}

// FuzzSealedFrame feeds arbitrary datagrams to a port with an established
// session, as a neighbour (or anyone on the wire) could: the decoder and
// the opener never panic, never deliver what did not authenticate, and the
// session survives.
func FuzzSealedFrame(f *testing.F) {
	pr, seeds := established(f)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{msgData, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	buf := make([]byte, 64)
	f.Fuzz(func(t *testing.T, d []byte) {
		var m message
		err := decode(d, &m)
		if err == nil {
			switch m.typ {
			case msgInit, msgResponse, msgFinish, msgData, msgBundle:
			default:
				t.Fatalf("decoded type %d", m.typ)
			}
		}
		if what, ok := Describe(d); ok != (err == nil) || ok == (what == "") {
			t.Fatalf("Describe: %q %v, decode: %v", what, ok, err)
		}
		before := pr.b.Stats().Opened
		n, ok := pr.b.input(append([]byte(nil), d...), buf)
		if ok {
			// only a byte-exact copy of a sealed datagram authenticates,
			// and the window accepts it at most once
			if pr.b.Stats().Opened != before+1 || n > len(buf) {
				t.Fatalf("delivered %d bytes without counting", n)
			}
		}
	})
}

// FuzzHandshake feeds arbitrary handshake messages to ports in every
// handshake state: nothing panics, and no session is made with a key the
// fabric does not list.
func FuzzHandshake(f *testing.F) {
	pr, seeds := established(f)
	for _, s := range seeds {
		f.Add(s, uint8(0))
	}
	f.Add(make([]byte, initLen), uint8(1))
	f.Add(make([]byte, responseLen), uint8(2))
	f.Add(make([]byte, finishLen), uint8(3))
	f.Add(make([]byte, initMACLen), uint8(1))
	f.Add(append([]byte{msgCookie}, make([]byte, cookieMsgLen-1)...), uint8(1))
	f.Fuzz(func(t *testing.T, d []byte, state uint8) {
		p := pr.b
		p.mu.Lock()
		switch state % 3 {
		case 1: // an initiation of ours pending
			_ = p.startHandshake(time.Now().Add(time.Hour))
		case 2: // a response of ours pending
			p.hs = nil
		}
		if len(d) > 1 && state&4 != 0 {
			d = append([]byte(nil), d...)
			d[0] = msgInit + state%3
		}
		p.tokens = float64(p.cfg.HandshakeRate)
		p.mu.Unlock()
		_, _ = p.input(append([]byte(nil), d...), make([]byte, 64))
		if k, ok := p.Peer(); ok {
			if _, listed := p.cfg.Fabric.Lookup(k); !listed {
				t.Fatalf("session with unlisted key %v", k)
			}
		}
	})
}

// TestDescribe: the datagrams of a real handshake and session are
// described by their type, and a few bytes are not taken for one.
func TestDescribe(t *testing.T) {
	_, seeds := established(t)
	want := map[byte]string{msgInit: "handshake 1/3", msgResponse: "handshake 2/3", msgFinish: "handshake 3/3", msgData: "sealed data ("}
	seen := map[byte]bool{}
	for _, d := range seeds {
		what, ok := Describe(d)
		if !ok || !strings.HasPrefix(what, want[d[0]]) {
			t.Errorf("a datagram of type %d: %q %v, want %q…", d[0], what, ok, want[d[0]])
		}
		seen[d[0]] = true
	}
	if len(seen) != len(want) {
		t.Errorf("the session's datagrams had types %v, want all of %v", seen, want)
	}
	if what, ok := Describe(append([]byte{msgCookie}, make([]byte, cookieMsgLen-1)...)); !ok || what != "handshake cookie" {
		t.Errorf("a cookie message described as %q %v", what, ok)
	}
	if what, ok := Describe([]byte{1, 2, 3}); ok {
		t.Errorf("three bytes described as %q", what)
	}
}
