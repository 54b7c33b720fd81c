package route

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
)

func sampleLSA() LSA {
	return LSA{
		Origin: 0x01020304, Incarnation: 5, Seq: 0x0a0b0c0d, Age: 1500 * time.Millisecond,
		Adjacencies: []Adjacency{{0, 7, 3}, {2, 1 << 20, 0}, {9, 42, 1}},
	}
}

func TestLSAWireLayout(t *testing.T) {
	l := sampleLSA()
	b := l.AppendTo(nil)
	want := []byte{
		1, 2, 3, 4, // origin
		0, 0, 0, 5, // incarnation
		0x0a, 0x0b, 0x0c, 0x0d, // sequence
		0, 0, 0x05, 0xdc, // age 1500 ms
		0, 3, 0, 0, // count, reserved
		0, 0, 0, 0, 0, 7, 0, 3,
		0, 2, 0, 0x10, 0, 0, 0, 0,
		0, 9, 0, 0, 0, 42, 0, 1,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("layout:\n% x\n% x", b, want)
	}
	var got LSA
	if err := DecodeLSA(b, &got); err != nil || !reflect.DeepEqual(got, l) {
		t.Fatalf("decode: %v\n%+v\n%+v", err, got, l)
	}
	if n := testing.AllocsPerRun(100, func() { _ = DecodeLSA(b, &got) }); n != 0 {
		t.Fatalf("decode into a sized LSA allocates %v times", n)
	}
}

func TestHelloWireLayout(t *testing.T) {
	h := Hello{Port: 0x0102, Reply: true, Incarnation: 0x0a0b0c0d}
	b := h.AppendTo(nil)
	if want := []byte{1, 2, 1, 0, 0x0a, 0x0b, 0x0c, 0x0d}; !bytes.Equal(b, want) {
		t.Fatalf("layout % x", b)
	}
	if got, err := DecodeHello(b); err != nil || got != h {
		t.Fatalf("decode %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, b[:7], append(b, 0), {0, 0, 4, 0, 0, 0, 0, 0}, {0xff, 0xff, 0, 0, 0, 0, 0, 0}} {
		if _, err := DecodeHello(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("% x: %v", bad, err)
		}
	}
}

// seeds returns the corpus files under testdata/dir.
func seeds(f *testing.F, dir string) [][]byte {
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.bin"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed corpus in testdata/%s: %v", dir, err)
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzDecodeLSA checks that decoding never panics and that whatever
// decodes re-encodes to the same bytes (the layout is canonical).
func FuzzDecodeLSA(f *testing.F) {
	for _, b := range seeds(f, "lsa") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var l LSA
		if err := DecodeLSA(data, &l); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if out := l.AppendTo(nil); !bytes.Equal(out, data) {
			t.Fatalf("re-encode differs:\n% x\n% x", out, data)
		}
	})
}

// FuzzDecodeHello is FuzzDecodeLSA for hellos.
func FuzzDecodeHello(f *testing.F) {
	for _, b := range seeds(f, "hello") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHello(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if out := h.AppendTo(nil); !bytes.Equal(out, data) {
			t.Fatalf("re-encode differs:\n% x\n% x", out, data)
		}
	})
}

// FuzzHandleFrame feeds arbitrary routing frames to a State with two
// adjacencies: it must never panic, and a rejected frame must leave the
// routing state exactly as it was. The first input byte picks the op and
// the arrival port.
func FuzzHandleFrame(f *testing.F) {
	for _, b := range seeds(f, "lsa") {
		f.Add(append([]byte{byte(OpLSA)}, b...))
	}
	for _, b := range seeds(f, "hello") {
		f.Add(append([]byte{byte(OpHello)}, b...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		s := adjacentState(t)
		fr := noc.Frame{
			Version: noc.FrameVersion, Class: noc.ClassControl, Op: noc.Op(data[0] & 0x0f),
			Src: 2, Dst: noc.BroadcastNode, Payload: data[1:],
		}
		in := noc.PortID(data[0] >> 4 & 1)
		before := snap(s)
		if err := s.HandleFrame(time.Second, in, &fr); err != nil {
			if after := snap(s); !reflect.DeepEqual(before, after) {
				t.Fatalf("rejected frame (%v) changed the state", err)
			}
			return
		}
		s.Tick(time.Second)
		s.Outputs(func(p noc.PortID, f *noc.Frame) {
			if !f.IsRouting() || (f.Op == OpLSA && DecodeLSA(f.Payload, &LSA{}) != nil) {
				t.Fatalf("sent a bad frame %v", f)
			}
		})
		for i, r := range s.Routes() {
			if i > 0 && r.Dst <= s.Routes()[i-1].Dst {
				t.Fatal("routes out of order")
			}
			if p, h, ok := s.NextHop(r.Dst); !ok || p != r.Port || h != r.Hops {
				t.Fatalf("NextHop disagrees with Routes for %v", r.Dst)
			}
		}
	})
}
