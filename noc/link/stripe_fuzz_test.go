package link_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

// resealChannel gives a channel datagram a valid trailer, so the fuzzer
// reaches the logic behind the checksum.
func resealChannel(d []byte) {
	if len(d) < link.ChannelOverhead {
		return
	}
	end := link.ChannelHeaderLen + int(binary.BigEndian.Uint16(d[34:]))
	if end+link.TrailerLen > len(d) {
		return
	}
	binary.BigEndian.PutUint32(d[end:], crc32.Checksum(d[:end], crc32.MakeTable(crc32.Castagnoli)))
}

// stripeFuzzSeeds returns inputs in FuzzStripeInput's format (each
// datagram is a channel byte and a 16-bit length before it) made from what
// a real peer sends.
func stripeFuzzSeeds(tb testing.TB) [][]byte {
	a, b := stripePair(tb, 3)
	frame := func(ws []wire) []byte {
		var in []byte
		for _, w := range ws {
			in = append(in, byte(w.c))
			in = binary.BigEndian.AppendUint16(in, uint16(len(w.b)))
			in = append(in, w.b...)
		}
		return in
	}
	ws := sendN(tb, b, 0, 0, 6)
	rev := append([]wire(nil), ws...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	buf := make([]byte, 1500)
	var ctl []wire
	for c := range 3 {
		if n, ok := b.Output(time.Second, c, buf); ok {
			ctl = append(ctl, wire{c, append([]byte(nil), buf[:n]...)})
		}
	}
	_ = a
	return [][]byte{frame(ws), frame(rev), frame(ctl), frame(ws[1:]), []byte("\x01\x00\x05garbage"), nil}
}

// TestStripeFuzzCorpus keeps testdata/fuzz/FuzzStripeInput in step with
// stripeFuzzSeeds (go test -run StripeFuzzCorpus -update-corpus).
func TestStripeFuzzCorpus(t *testing.T) {
	checkCorpus(t, "FuzzStripeInput", "StripeFuzzCorpus", stripeFuzzSeeds(t))
}

// FuzzStripeInput feeds channel datagrams to a stripe whose channels are
// up, strict and with SharedMedium. Input never panics; a refused datagram
// delivers nothing; what is delivered fits the MTU; the stripe's own output
// always decodes.
func FuzzStripeInput(f *testing.F) {
	for _, s := range stripeFuzzSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	out := make([]byte, 1500)
	f.Fuzz(func(t *testing.T, input []byte, seal bool) {
		for _, shared := range []bool{false, true} {
			fuzzStripe(t, bytes.Clone(input), seal, shared, out)
		}
	})
}

func fuzzStripe(t *testing.T, in []byte, seal, shared bool, out []byte) {
	a, _ := stripePairShared(t, 3, shared)
	now := time.Duration(0)
	for len(in) >= 3 {
		c := int(in[0] % 4) // channel 3 does not exist
		n := min(int(binary.BigEndian.Uint16(in[1:])), len(in)-3)
		d := in[3 : 3+n]
		in = in[3+n:]
		if seal {
			resealChannel(d)
		}
		a.Tick(now)
		for range 1 << 16 {
			if _, ok := a.Receive(); !ok {
				break
			}
		}
		if err := a.Input(now, c, d); err != nil {
			if m, ok := a.Receive(); ok {
				t.Fatalf("refused datagram (%v) delivered %d bytes", err, len(m))
			}
		}
		for range 1 << 16 {
			m, ok := a.Receive()
			if !ok {
				break
			}
			if len(m) > a.MTU() {
				t.Fatalf("delivered %d bytes, MTU %d", len(m), a.MTU())
			}
		}
		for c := range 3 {
			k, ok := a.Output(now, c, out)
			if !ok {
				continue
			}
			var h link.ChannelHeader
			if _, err := h.Decode(out[:k]); err != nil {
				t.Fatalf("stripe wrote an invalid datagram: %v", err)
			}
		}
		now += 3 * time.Millisecond
	}
}
