package secure

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/port/mem"
)

// drain reads p until its inner port is empty and reports whether one of
// the datagrams it opened was want.
func drain(t *testing.T, p *Port, want []byte) bool {
	t.Helper()
	got := false
	buf := make([]byte, 2048)
	for {
		n, ok, err := p.TryReadDatagram(buf)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got = got || bytes.Equal(buf[:n], want)
	}
}

// discard empties an inner port (what a dead node was sent).
func discard(t *testing.T, p *mem.Port) {
	buf := make([]byte, 2048)
	for {
		_, ok, err := p.TryReadDatagram(buf)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
	}
}

// forgedInit is an init anyone can send: a random sender index and a
// random ephemeral key.
func forgedInit() []byte {
	b := make([]byte, initLen)
	b[0] = msgInit
	_, _ = rand.Read(b[1:])
	binary.BigEndian.PutUint32(b[1:], binary.BigEndian.Uint32(b[1:])|1)
	return b
}

// TestRehandshakeUnderAnInitFlood: forged inits arrive at 1,000 (and
// 10,000) a second from the neighbour's address; after 2 s of it the
// neighbour restarts (same key, no state), and its first datagram through
// a new session arrives within 1 s. Time is the ports' clock, stepped by the test a
// millisecond at a time: the forger's inits of each millisecond arrive
// before the neighbour's.
func TestRehandshakeUnderAnInitFlood(t *testing.T) {
	for _, perMs := range []int{1, 10} {
		t.Run(fmt.Sprintf("%d/s", perMs*1000), func(t *testing.T) {
			ma, mb, err := mem.Pair(mem.Config{Queue: 1 << 16})
			if err != nil {
				t.Fatal(err)
			}
			ka, kb := keyPair(t), keyPair(t)
			fab := NewFabric()
			fab.Add("a", ka.Public)
			fab.Add("b", kb.Public)
			now := time.Unix(1000, 0)
			clock := func() time.Time { return now }
			cfg := func(k KeyPair) Config { return Config{Static: k, Fabric: fab, Now: clock} }
			a, err := New(ma, cfg(ka))
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(mb, cfg(kb))
			if err != nil {
				t.Fatal(err)
			}
			hello := []byte("from a")
			up := false
			for range 1000 {
				now = now.Add(time.Millisecond)
				_ = a.WriteDatagram(hello)
				got := drain(t, b, hello)
				if drain(t, a, nil); got || drain(t, b, hello) {
					up = true
					break
				}
			}
			if !up {
				t.Fatal("no session before the flood")
			}
			// a dies; the flood runs for 2 s before a comes back
			forge := func() {
				for range perMs {
					if err := ma.WriteDatagram(forgedInit()); err != nil {
						t.Fatal(err)
					}
				}
			}
			for range 2000 {
				now = now.Add(time.Millisecond)
				forge()
				drain(t, b, nil)
				discard(t, ma)
			}
			// a restarts: a new port, same key, same address, no state
			a2, err := New(ma, cfg(ka))
			if err != nil {
				t.Fatal(err)
			}
			again := []byte("from a again")
			start := now
			for now.Sub(start) < 5*time.Second {
				now = now.Add(time.Millisecond)
				forge()
				_ = a2.WriteDatagram(again)
				_ = b.WriteDatagram([]byte("from b"))
				got := drain(t, b, again)
				drain(t, a2, nil)
				if got || drain(t, b, again) {
					break
				}
			}
			took := now.Sub(start)
			t.Logf("re-handshake under %d forged inits/s: %v (b: %+v)", perMs*1000, took, b.Stats())
			if took > time.Second {
				t.Fatalf("the restarted neighbour got through after %v, want within 1s", took)
			}
		})
	}
}
