package verbs

import (
	"bytes"
	"testing"
)

// The decoders take what a peer wrote in fabric pages: whatever the bytes,
// they answer without crashing, and what they accept is in range and
// encodes back to the same bytes.

func validSlot() Slot {
	return Slot{Seq: 0x111111<<40 | 1, Op: 1, Flags: 3, Len: 100, Total: 100, SrcQ: 1}
}

func FuzzSlot(f *testing.F) {
	f.Add(AppendSlot(nil, validSlot()))
	f.Add(AppendSlot(nil, Slot{Seq: 7, Op: 5, Flags: 7, Total: 8, Addr: 4096, Rkey: 0x401, SrcQ: 3}))
	f.Add(AppendSlot(nil, Slot{Seq: 9, Op: 3, Flags: 4 | 3, Total: 1 << 20, Addr: 64, Rkey: 0x801, SrcQ: 126}))
	f.Add(AppendSlot(nil, Slot{Seq: 9, Op: 2, Flags: 1, Len: SlotData, Total: 10000, Imm: 5, SrcQ: 2}))
	f.Add(make([]byte, SlotHeader))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSlot(b)
		if err != nil {
			return
		}
		if s.Op < 1 || s.Op > 5 || s.Flags&^7 != 0 || s.Len > SlotData || s.Total > MaxMessage || s.Len > s.Total ||
			s.SrcQ < 1 || s.SrcQ > MaxQP {
			t.Fatalf("accepted an out-of-range slot %+v", s)
		}
		if s.Flags&4 != 0 && s.Len != 0 {
			t.Fatalf("accepted inline bytes with the data in the image: %+v", s)
		}
		if s.Op == 5 && (s.Flags&4 == 0 || s.Total != 8 || s.Addr&7 != 0) {
			t.Fatalf("accepted a malformed atomic notice: %+v", s)
		}
		if got := AppendSlot(nil, s); !bytes.Equal(got, b[:SlotHeader]) {
			t.Fatalf("slot %+v encodes to %x, decoded from %x", s, got, b[:SlotHeader])
		}
	})
}

func TestSlotRefusals(t *testing.T) {
	for name, s := range map[string]Slot{
		"op 0":                 {Op: 0, Flags: 3, SrcQ: 1},
		"op 6":                 {Op: 6, Flags: 3, SrcQ: 1},
		"unknown flag":         {Op: 1, Flags: 8 | 3, SrcQ: 1},
		"fragment too long":    {Op: 1, Flags: 1, Len: SlotData + 1, Total: 1 << 20, SrcQ: 1},
		"message too long":     {Op: 1, Flags: 1, Len: 10, Total: MaxMessage + 1, SrcQ: 1},
		"fragment past total":  {Op: 1, Flags: 1, Len: 10, Total: 5, SrcQ: 1},
		"whole message short":  {Op: 1, Flags: 3, Len: 10, Total: 20, SrcQ: 1},
		"inline and image":     {Op: 3, Flags: 7, Len: 10, Total: 10, SrcQ: 1},
		"send in image":        {Op: 1, Flags: 7, Total: 10, SrcQ: 1},
		"atomic inline":        {Op: 5, Flags: 3, Len: 8, Total: 8, SrcQ: 1},
		"atomic unaligned":     {Op: 5, Flags: 7, Total: 8, Addr: 4, SrcQ: 1},
		"atomic wide":          {Op: 5, Flags: 7, Total: 16, SrcQ: 1},
		"no source QP":         {Op: 1, Flags: 3, SrcQ: 0},
		"source QP past table": {Op: 1, Flags: 3, SrcQ: MaxQP + 1},
	} {
		if _, err := ParseSlot(AppendSlot(nil, s)); err == nil {
			t.Errorf("%s: accepted %+v", name, s)
		}
	}
	b := AppendSlot(nil, validSlot())
	b[50] = 1
	if _, err := ParseSlot(b); err == nil {
		t.Error("accepted a slot with reserved bytes set")
	}
	if _, err := ParseSlot(AppendSlot(nil, validSlot())[:SlotHeader-1]); err == nil {
		t.Error("accepted a short slot")
	}
	if _, err := ParseSlot(AppendSlot(nil, validSlot())); err != nil {
		t.Errorf("refused a valid slot: %v", err)
	}
}

func FuzzQPEntry(f *testing.F) {
	f.Add(AppendQPEntry(nil, QPEntry{MboxLo: 0x100000002000, QPN: 1, Slots: 128, Live: 1}))
	f.Add(AppendQPEntry(nil, QPEntry{MboxLo: 0x100000002000, MboxHi: 5, QPN: 126, Slots: 128, Live: 1}))
	f.Add(make([]byte, QPEntrySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseQPEntry(b)
		if err != nil {
			return
		}
		if e.Live != 1 || e.Slots != 128 || e.QPN < 1 || e.QPN > MaxQP || e.MboxLo == 0 || e.MboxLo%4096 != 0 {
			t.Fatalf("accepted an out-of-range QP entry %+v", e)
		}
		if got := AppendQPEntry(nil, e); !bytes.Equal(got, b[:QPEntrySize]) {
			t.Fatalf("entry %+v encodes to %x, decoded from %x", e, got, b[:QPEntrySize])
		}
	})
}

func FuzzMREntry(f *testing.F) {
	f.Add(AppendMREntry(nil, MREntry{Vaddr: 0x7f0000001000, Length: 8192, GVALo: 0x100000004000, Rkey: 0x401, Access: 0xf}))
	f.Add(AppendMREntry(nil, MREntry{Vaddr: 0x1000, Length: 1, Rkey: 0x7ffffc01, Access: 3}))
	f.Add(make([]byte, MREntrySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseMREntry(b)
		if err != nil {
			return
		}
		if e.Rkey == 0 || e.Length == 0 || e.Length > 1<<40 || e.Vaddr+e.Length < e.Vaddr || e.Access&^0xf != 0 ||
			e.GVALo%4096 != 0 || e.GVALo+e.Length < e.GVALo {
			t.Fatalf("accepted an out-of-range MR entry %+v", e)
		}
		if got := AppendMREntry(nil, e); !bytes.Equal(got, b[:MREntrySize]) {
			t.Fatalf("entry %+v encodes to %x, decoded from %x", e, got, b[:MREntrySize])
		}
	})
}

func FuzzDirHeader(f *testing.F) {
	f.Add(AppendDirHeader(nil, DirHeader{Magic: 0x5342524556555044, Version: 2, Pages: 4, MaxQP: 126, MaxMR: 384}))
	f.Add(make([]byte, DirHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseDirHeader(b)
		if err != nil {
			return
		}
		if h != (DirHeader{Magic: 0x5342524556555044, Version: 2, Pages: 4, MaxQP: 126, MaxMR: 384}) {
			t.Fatalf("accepted header %+v", h)
		}
	})
}
