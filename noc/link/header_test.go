package link_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/aitherion/dpu/noc/link"
)

// reseal rewrites the CRC trailer of d where its header says it lies, so
// that a test can build datagrams wrong in every way but the checksum.
func reseal(d []byte) {
	if len(d) < link.HeaderLen+link.TrailerLen {
		return
	}
	end := link.HeaderLen + int(d[2])*link.SACKLen + int(binary.BigEndian.Uint16(d[38:]))
	switch link.Flags(d[1]) & (link.FlagClockReq | link.FlagClockAns) {
	case link.FlagClockReq:
		end += link.StampLen
	case link.FlagClockAns:
		end += 3 * link.StampLen
	}
	if end+link.TrailerLen > len(d) {
		return
	}
	binary.BigEndian.PutUint32(d[end:], crc32.Checksum(d[:end], crc32.MakeTable(crc32.Castagnoli)))
}

func encode(t *testing.T, h link.Header, payload []byte) []byte {
	t.Helper()
	b := make([]byte, h.Len()+len(payload))
	n, err := h.Encode(b, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// TestHeaderGolden pins the byte layout documented in doc.go.
func TestHeaderGolden(t *testing.T) {
	h := link.Header{
		Flags:      link.FlagData | link.FlagFirst,
		SrcSession: 0x0102030405060708, SrcEpoch: 0x090a0b0c,
		DstSession: 0x1112131415161718, DstEpoch: 0x191a1b1c,
		Seq: 0x21222324, Ack: 0x31323334, Credits: 0x4142,
		NSACK: 1, SACK: [link.MaxSACK]link.SACKBlock{{Start: 0x5152, Count: 0x5354}},
	}
	got := encode(t, h, []byte{0xEE, 0xFF})
	want := "01" + "03" + "01" + "00" +
		"0102030405060708" + "090a0b0c" +
		"1112131415161718" + "191a1b1c" +
		"21222324" + "31323334" + "4142" + "0002" +
		"51525354" + "eeff"
	if h := hex.EncodeToString(got[:len(got)-4]); h != want {
		t.Errorf("encoded\n%s\nwant\n%s", h, want)
	}
	sum := crc32.Checksum(got[:len(got)-4], crc32.MakeTable(crc32.Castagnoli))
	if binary.BigEndian.Uint32(got[len(got)-4:]) != sum {
		t.Error("trailer is not the CRC32C of the bytes before it")
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	full := [link.MaxSACK]link.SACKBlock{{1, 2}, {5, 1}, {9, 30}, {100, 65535}}
	for _, tc := range []struct {
		name    string
		h       link.Header
		payload []byte
	}{
		{"greeting", link.Header{SrcSession: 1}, nil},
		{"heartbeat with ack", link.Header{SrcSession: 1, SrcEpoch: 3, DstSession: 2, DstEpoch: 4, Seq: 9, Ack: 7, Credits: 64}, nil},
		{"probe", link.Header{Flags: link.FlagAckReq, SrcSession: 1, DstSession: 2}, nil},
		{"one-fragment message", link.Header{Flags: link.FlagData | link.FlagFirst | link.FlagLast, SrcSession: ^uint64(0), Seq: ^uint32(0)}, []byte("hello")},
		{"empty message", link.Header{Flags: link.FlagData | link.FlagFirst | link.FlagLast, SrcSession: 1}, nil},
		{"middle fragment with sacks", link.Header{Flags: link.FlagData, SrcSession: 1, NSACK: 4, SACK: full}, bytes.Repeat([]byte{7}, 1440)},
		{"largest payload", link.Header{Flags: link.FlagData | link.FlagLast, SrcSession: 1}, make([]byte, 0xFFFF)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := encode(t, tc.h, tc.payload)
			want := tc.h
			want.Length = uint16(len(tc.payload))
			if len(d) != want.Len() {
				t.Errorf("length %d, Len says %d", len(d), want.Len())
			}
			for _, pad := range []int{0, 1, 17} { // link padding is ignored
				var got link.Header
				p, err := got.Decode(append(d[:len(d):len(d)], make([]byte, pad)...))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("pad %d: decoded\n%+v\nwant\n%+v", pad, got, want)
				}
				if !bytes.Equal(p, tc.payload) {
					t.Errorf("pad %d: payload differs", pad)
				}
			}
		})
	}
}

func TestHeaderDecodeErrors(t *testing.T) {
	valid := func() []byte {
		return encode(t, link.Header{Flags: link.FlagData | link.FlagFirst, SrcSession: 1, NSACK: 1,
			SACK: [link.MaxSACK]link.SACKBlock{{2, 3}}}, []byte("abc"))
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte // the result is resealed unless noted
		want error
	}{
		{"empty", func([]byte) []byte { return nil }, link.ErrMalformed},
		{"shorter than a header", func(d []byte) []byte { return d[:link.HeaderLen+link.TrailerLen-1] }, link.ErrMalformed},
		{"version 0", func(d []byte) []byte { d[0] = 0; return d }, link.ErrVersion},
		{"version 3", func(d []byte) []byte { d[0] = 3; return d }, link.ErrVersion},
		{"version 2 without a clock flag", func(d []byte) []byte { d[0] = link.ClockVersion; return d }, link.ErrMalformed},
		{"clock flag in version 1", func(d []byte) []byte { d[1] |= byte(link.FlagClockReq); return d }, link.ErrMalformed},
		{"clock flag on data", func(d []byte) []byte { d[0] = link.ClockVersion; d[1] |= byte(link.FlagClockReq); return d }, link.ErrMalformed},
		{"unknown flag", func(d []byte) []byte { d[1] |= 0x40; return d }, link.ErrMalformed},
		{"too many sack blocks", func(d []byte) []byte { d[2] = link.MaxSACK + 1; return d }, link.ErrMalformed},
		{"reserved byte", func(d []byte) []byte { d[3] = 1; return d }, link.ErrMalformed},
		{"truncated payload", func(d []byte) []byte { return d[:len(d)-1] }, link.ErrMalformed},
		{"length beyond datagram", func(d []byte) []byte { binary.BigEndian.PutUint16(d[38:], 60000); return d }, link.ErrMalformed},
		{"fragment flags without data", func(d []byte) []byte {
			d[1] = byte(link.FlagFirst)
			binary.BigEndian.PutUint16(d[38:], 0)
			return d[:link.HeaderLen+link.SACKLen+link.TrailerLen]
		}, link.ErrMalformed},
		{"payload without data flag", func(d []byte) []byte { d[1] = 0; return d }, link.ErrMalformed},
		{"zero source session", func(d []byte) []byte { clear(d[4:12]); return d }, link.ErrMalformed},
		{"empty sack block", func(d []byte) []byte { clear(d[42:44]); return d }, link.ErrMalformed},
		{"sack block at the ack", func(d []byte) []byte { clear(d[40:42]); return d }, link.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.edit(valid())
			reseal(d)
			var h link.Header
			if _, err := h.Decode(d); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("bad checksum", func(t *testing.T) {
		for i := range valid() {
			d := valid()
			d[i] ^= 0x40
			var h link.Header
			if _, err := h.Decode(d); err == nil {
				t.Errorf("byte %d flipped: accepted", i)
			}
		}
		d := valid()
		d[len(d)-1] ^= 1
		var h link.Header
		if _, err := h.Decode(d); !errors.Is(err, link.ErrChecksum) {
			t.Errorf("trailer flipped: %v", err)
		}
	})
}

// TestHeaderClockStamps: clock timestamps travel in version 2 datagrams
// without data, and both clock flags at once are refused.
func TestHeaderClockStamps(t *testing.T) {
	for _, h := range []link.Header{
		{Flags: link.FlagClockReq, SrcSession: 7, Clock: link.Stamps{Transmit: 1 << 40}},
		{Flags: link.FlagClockAns | link.FlagAckReq, SrcSession: 7, NSACK: 1, SACK: [link.MaxSACK]link.SACKBlock{{1, 2}},
			Clock: link.Stamps{Origin: 5, Receive: -3, Transmit: 1<<62 + 9}},
	} {
		d := encode(t, h, nil)
		if d[0] != link.ClockVersion {
			t.Errorf("flags %#x: version %d", h.Flags, d[0])
		}
		var got link.Header
		if _, err := got.Decode(d); err != nil {
			t.Fatal(err)
		}
		if got.Clock != h.Clock || got.Flags != h.Flags {
			t.Errorf("decoded %+v %#x, want %+v %#x", got.Clock, got.Flags, h.Clock, h.Flags)
		}
	}
	both := link.Header{Flags: link.FlagClockReq | link.FlagClockAns, SrcSession: 1}
	if _, err := both.Encode(make([]byte, 200), nil); err == nil {
		t.Error("encoded a request and an answer in one datagram")
	}
	d := encode(t, link.Header{Flags: link.FlagClockReq, SrcSession: 1}, nil)
	d[1] |= byte(link.FlagClockAns)
	reseal(d)
	var h link.Header
	if _, err := h.Decode(d); !errors.Is(err, link.ErrMalformed) {
		t.Errorf("both clock flags: %v", err)
	}
}

func TestHeaderEncodeErrors(t *testing.T) {
	h := link.Header{SrcSession: 1, NSACK: link.MaxSACK + 1}
	if _, err := h.Encode(make([]byte, 100), nil); err == nil {
		t.Error("encoded 5 sack blocks")
	}
	h.NSACK = 0
	if _, err := h.Encode(make([]byte, 50), make([]byte, 10)); err == nil {
		t.Error("encoded into a short buffer")
	}
	if _, err := h.Encode(make([]byte, 1<<17), make([]byte, 1<<16)); err == nil {
		t.Error("encoded a payload beyond the length field")
	}
}
