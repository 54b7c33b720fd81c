package link_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzInput from the generated seeds")

const fuzzA, fuzzB = 0xA11CE, 0xB0B

// fuzzPair returns endpoint a (the target) and its peer b, up, after a
// scripted exchange. It is deterministic so that datagrams b produces
// are valid input for every fresh a.
func fuzzPair(tb testing.TB) (a, b *link.Endpoint) {
	ca, cb := testConfig(fuzzA), testConfig(fuzzB)
	for _, c := range []*link.Config{&ca, &cb} {
		c.Window, c.SendQueue, c.MaxMessage = 16, 16, 8*1440
		c.ClockStamps = true
	}
	cb.Pack = true // b's bursts of small messages share datagrams
	a, err := link.NewEndpoint(ca, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if b, err = link.NewEndpoint(cb, 0); err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 1500)
	for range 4 {
		for _, p := range [][2]*link.Endpoint{{a, b}, {b, a}} {
			for {
				n, ok := p[0].Output(0, buf)
				if !ok {
					break
				}
				if err := p[1].Input(0, buf[:n]); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	if !a.Up() || !b.Up() {
		tb.Fatal("fuzz pair not up")
	}
	return a, b
}

// fuzzSeeds returns inputs in the fuzz target's format (datagrams each
// prefixed with a 16-bit length) made from what b really sends a.
func fuzzSeeds(tb testing.TB) [][]byte {
	_, b := fuzzPair(tb)
	buf := make([]byte, 1500)
	output := func(now time.Duration) (ds [][]byte) {
		for {
			n, ok := b.Output(now, buf)
			if !ok {
				return ds
			}
			ds = append(ds, append([]byte(nil), buf[:n]...))
		}
	}
	frame := func(ds ...[]byte) []byte {
		var in []byte
		for _, d := range ds {
			in = binary.BigEndian.AppendUint16(in, uint16(len(d)))
			in = append(in, d...)
		}
		return in
	}
	var seeds [][]byte
	for _, msg := range [][]byte{[]byte("one fragment"), nil, bytes.Repeat([]byte("page"), 1100)} {
		if err := b.Send(0, msg); err != nil {
			tb.Fatal(err)
		}
		ds := output(0)
		seeds = append(seeds, frame(ds...))
		if len(ds) > 1 { // out of order: the later fragments first
			seeds = append(seeds, frame(append(ds[1:], ds[0])...))
		}
	}
	for _, msg := range []string{"packed", "with", "others"} {
		if err := b.Send(0, []byte(msg)); err != nil {
			tb.Fatal(err)
		}
	}
	seeds = append(seeds, frame(output(0)...))                   // one packed datagram
	seeds = append(seeds, frame(output(60*time.Millisecond)...)) // a clock request
	a, _ := fuzzPair(tb)                                         // the same as the target: its request gets b's answer
	if n, ok := a.Output(60*time.Millisecond, buf); ok {
		if err := b.Input(61*time.Millisecond, buf[:n]); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, frame(output(61*time.Millisecond)...)) // a clock answer
	}
	seeds = append(seeds, frame(output(time.Second)...)) // a heartbeat
	seeds = append(seeds, []byte("\x00\x05garbage"), nil, bytes.Repeat([]byte{0xff}, 64))
	return seeds
}

func corpusFile(seed []byte, seal bool) (name string, contents []byte) {
	contents = fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nbool(%v)\n", seed, seal)
	return fmt.Sprintf("seed-%x", crc(contents)), contents
}

func crc(b []byte) uint32 {
	var h uint32 = 2166136261
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

// TestFuzzCorpus keeps testdata/fuzz/FuzzInput in step with fuzzSeeds
// (go test -run FuzzCorpus -update-corpus rewrites it).
func TestFuzzCorpus(t *testing.T) { checkCorpus(t, "FuzzInput", "FuzzCorpus", fuzzSeeds(t)) }

// checkCorpus checks (or, with -update-corpus, writes) the seed corpus of
// fuzz target target in testdata/fuzz against seeds; test names the test
// that rewrites it.
func checkCorpus(t *testing.T, target, test string, seeds [][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	for _, s := range seeds {
		name, contents := corpusFile(s, false)
		path := filepath.Join(dir, name)
		if *updateCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, contents, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, contents) {
			t.Errorf("seed corpus out of date (%v): run go test -run %s -update-corpus ./noc/link", err, test)
		}
	}
}

// FuzzInput feeds datagrams to an endpoint that is up. Input never panics;
// a datagram it refuses changes nothing (only the refusal counters) and
// delivers nothing. With seal set, every datagram gets a valid checksum so
// the fuzzer reaches the protocol logic behind the CRC.
func FuzzInput(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	out := make([]byte, 1500)
	f.Fuzz(func(t *testing.T, in []byte, seal bool) {
		in = bytes.Clone(in) // resealing writes into it
		a, _ := fuzzPair(t)
		now := time.Duration(0)
		for len(in) >= 2 {
			n := min(int(binary.BigEndian.Uint16(in)), len(in)-2)
			d := in[2 : 2+n]
			in = in[2+n:]
			if seal {
				reseal(d)
			}
			before := a.Stats()
			up := a.Up()
			err := a.Input(now, d)
			if err != nil {
				after := a.Stats()
				after.CRCErrors, after.Malformed = before.CRCErrors, before.Malformed
				if after != before || a.Up() != up {
					t.Fatalf("refused datagram (%v) changed state", err)
				}
				if m, ok := a.Receive(); ok {
					t.Fatalf("refused datagram delivered %d bytes", len(m))
				}
			}
			for {
				m, ok := a.Receive()
				if !ok {
					break
				}
				if len(m) > a.Config().MaxMessage {
					t.Fatalf("delivered %d bytes, MaxMessage %d", len(m), a.Config().MaxMessage)
				}
			}
			for range 100 {
				k, ok := a.Output(now, out)
				if !ok {
					break
				}
				var h link.Header
				if _, err := h.Decode(out[:k]); err != nil {
					t.Fatalf("endpoint wrote an invalid datagram: %v", err)
				}
			}
			if _, ok := a.Output(now, out); ok && a.Stats().InFlight == 0 {
				t.Fatal("endpoint keeps producing datagrams with nothing in flight")
			}
			now += 7 * time.Millisecond
		}
	})
}
