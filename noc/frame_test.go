package noc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aitherion/dpu/gva"
	"github.com/gopacket/gopacket"
)

func sampleFrame() Frame {
	return Frame{
		Version: FrameVersion, Class: ClassAtomic, Op: 3, Flags: FlagReply,
		Src: 7, Dst: 1 << 20, Hops: 2, Priority: 9, RequestID: 0x0102030405060708,
		GVA: gva.New(7, 99, 8, 0), PageVersion: 42, Payload: []byte("hello, page"),
	}
}

func TestFrameRoundTrip(t *testing.T) {
	f := sampleFrame()
	b, err := f.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != HeaderLen+len(f.Payload) {
		t.Fatalf("len %d", len(b))
	}
	var g Frame
	if err := g.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	if g.Class != f.Class || g.Op != f.Op || g.Flags != f.Flags || g.Src != f.Src || g.Dst != f.Dst || g.Hops != f.Hops ||
		g.Priority != f.Priority || g.RequestID != f.RequestID || g.GVA != f.GVA || g.PageVersion != f.PageVersion ||
		!bytes.Equal(g.Payload, f.Payload) {
		t.Fatalf("round trip:\n got %v\nwant %v", &g, &f)
	}
	// network byte order on the wire
	if b[16] != 1 || b[23] != 8 || b[4] != 0 || b[7] != 7 {
		t.Fatalf("byte order: % x", b[:24])
	}
	// trailing padding is ignored
	padded := append(append([]byte{}, b...), 0, 0, 0)
	if err := g.Decode(padded); err != nil || len(g.Payload) != len(f.Payload) {
		t.Fatalf("padded: %v len %d", err, len(g.Payload))
	}
}

func TestFrameSerializeGopacket(t *testing.T) {
	f := sampleFrame()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, &f, gopacket.Payload(f.Payload)); err != nil {
		t.Fatal(err)
	}
	want, _ := f.AppendTo(nil)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("serialize differs:\n% x\n% x", buf.Bytes(), want)
	}
	p := gopacket.NewPacket(buf.Bytes(), LayerTypeFrame, gopacket.Default)
	if l, ok := p.Layer(LayerTypeFrame).(*Frame); !ok || l.RequestID != f.RequestID {
		t.Fatalf("packet decode: %v", p)
	}
	parser := gopacket.NewDecodingLayerParser(LayerTypeFrame, &Frame{})
	var types []gopacket.LayerType
	if err := parser.DecodeLayers(buf.Bytes(), &types); err != nil {
		var unsupported gopacket.UnsupportedLayerType
		if !errors.As(err, &unsupported) {
			t.Fatal(err)
		}
	}
	if len(types) != 1 || types[0] != LayerTypeFrame {
		t.Fatalf("types %v", types)
	}
}

func TestFrameDecodeErrors(t *testing.T) {
	f := sampleFrame()
	good, _ := f.AppendTo(nil)
	mut := func(i int, v byte) []byte { b := append([]byte{}, good...); b[i] = v; return b }
	cases := []struct {
		in   []byte
		want error
	}{
		{nil, ErrShort},
		{good[:HeaderLen-1], ErrShort},
		{mut(0, 2), ErrVersion},
		{mut(1, 4), ErrClass},
		{mut(3, 0x80), ErrFlags},
		{good[:len(good)-1], ErrTruncated},
	}
	for i, c := range cases {
		var g Frame
		if err := g.Decode(c.in); !errors.Is(err, c.want) {
			t.Errorf("case %d: err %v, want %v", i, err, c.want)
		}
	}
	big := Frame{Version: FrameVersion, Payload: make([]byte, MaxPayload+1)}
	if _, err := big.AppendTo(nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
}

func TestFrameDecodeAllocs(t *testing.T) {
	f := sampleFrame()
	b, _ := f.AppendTo(nil)
	var g Frame
	if n := testing.AllocsPerRun(1000, func() {
		if err := g.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("decode allocates %v per run", n)
	}
	out := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(1000, func() { out, _ = f.AppendTo(out[:0]) }); n != 0 {
		t.Fatalf("encode into a sized buffer allocates %v per run", n)
	}
}

// FuzzFrameDecode checks that decoding never panics and that anything that
// decodes re-encodes to the same bytes.
func FuzzFrameDecode(f *testing.F) {
	s := sampleFrame()
	good, _ := s.AppendTo(nil)
	f.Add(good)
	f.Add(good[:10])
	f.Add([]byte{})
	seeds, _ := filepath.Glob("testdata/frames/*.bin")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var g Frame
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		out, err := g.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, data[:HeaderLen+len(g.Payload)]) {
			t.Fatalf("re-encode differs")
		}
	})
}

func BenchmarkFrameDecode(b *testing.B) {
	f := sampleFrame()
	buf, _ := f.AppendTo(nil)
	var g Frame
	b.ReportAllocs()
	for b.Loop() {
		if err := g.DecodeFromBytes(buf, gopacket.NilDecodeFeedback); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFrameEncode(b *testing.B) {
	f := sampleFrame()
	out := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		out, _ = f.AppendTo(out[:0])
	}
}
