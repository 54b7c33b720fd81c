package tier

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/aitherion/dpu/gva"
)

// The slotted file. Offset 0 holds the file header (SlotSize bytes, of
// which the first 64 are used); slot i starts at (i+1)*SlotSize: a 512-byte
// slot header (64 used) then the 4 KiB page, so that one read of SlotSize
// bytes returns a spilled page with its header, and every write starts and
// ends on a 512-byte sector.
//
//	file header: magic "DPUTIER1" | slots u64 | speed u8 | crc32c u32 (of the 17 bytes before it)
//	slot header: magic u32 | flags u8 | key 16 | seq u64 | crc32c u32 (of the 29 bytes before it and the page)
//
// A slot is live when its magic and checksum hold; of two live slots of
// one key the higher seq wins. A slot is freed by zeroing its magic.
const (
	slotHead = 512
	// SlotSize is the bytes one spilled page takes on disk.
	SlotSize = slotHead + gva.PageSize
	minSize  = 2 * SlotSize

	fileMagic = "DPUTIER1"
	slotMagic = 0x44505453 // "DPTS"
	slotHdr   = 4 + 1 + 16 + 8
	flagHuge  = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFull is returned (wrapped) when a disk tier has no free slot.
var ErrFull = errors.New("tier: no free slot")

// Slots is how many pages a tier file of size bytes holds.
func Slots(size int64) int { return max(0, int(size/SlotSize)-1) }

// disk is one disk tier: a slotted File.
type disk struct {
	f     File
	speed gva.Speed
	slots int
	used  int
	free  []int32 // slots free to write
	tombs []int32 // freed slots whose magic is still on disk
	buf   []byte  // one slot, the scratch of reads and writes
	// fifo: the slots in the order their pages came here (oldest first,
	// with the seq they were written with; entries whose slot has moved
	// on are skipped): the coldest pages of a tier no access reaches.
	fifo []spillRec
	seqs []uint64 // the seq of each live slot, 0 when free
}

type spillRec struct {
	slot int32
	seq  uint64
}

// found is a live slot found when a tier file is opened.
type found struct {
	key  gva.GVA
	huge bool
	seq  uint64
	slot int32
}

// openDisk opens the slotted file on f for the tier speed: it formats a
// file without a header, and lists the live slots of one that has one.
func openDisk(f File, speed gva.Speed) (*disk, []found, error) {
	slots := int(f.Size()/SlotSize) - 1
	if slots < 1 {
		return nil, nil, fmt.Errorf("tier file %s: %d bytes hold no slot (a slot is %d bytes, after a header of as many): give a larger SIZE", f.Name(), f.Size(), SlotSize)
	}
	d := &disk{f: f, speed: speed, slots: slots, buf: make([]byte, SlotSize), seqs: make([]uint64, slots)}
	h := d.buf[:len(fileMagic)+8+1+4]
	if _, err := f.ReadAt(h, 0); err != nil {
		return nil, nil, fmt.Errorf("tier file %s: reading its header: %w", f.Name(), err)
	}
	var live []found
	switch {
	case allZero(h):
		if err := d.format(); err != nil {
			return nil, nil, err
		}
	case !bytes.Equal(h[:8], []byte(fileMagic)) || crc32.Checksum(h[:17], castagnoli) != binary.LittleEndian.Uint32(h[17:]):
		return nil, nil, fmt.Errorf("tier file %s holds something that is not a tier file (its header does not check): name an empty file or zero it (dd if=/dev/zero of=%s bs=4608 count=1 conv=notrunc)", f.Name(), f.Name())
	case binary.LittleEndian.Uint64(h[8:]) != uint64(slots) || gva.Speed(h[16]) != speed:
		return nil, nil, fmt.Errorf("tier file %s was made for a %s tier of %d slots, not a %s tier of %d: give it its old SIZE and kind, or zero its header to start it empty",
			f.Name(), gva.Speed(h[16]), binary.LittleEndian.Uint64(h[8:]), speed, slots)
	default:
		var err error
		if live, err = d.scan(); err != nil {
			return nil, nil, err
		}
	}
	for i := slots - 1; i >= 0; i-- {
		if d.seqs[i] == 0 {
			d.free = append(d.free, int32(i))
		}
	}
	return d, live, nil
}

// format writes the file header and syncs it.
func (d *disk) format() error {
	h := make([]byte, slotHead)
	copy(h, fileMagic)
	binary.LittleEndian.PutUint64(h[8:], uint64(d.slots))
	h[16] = byte(d.speed)
	binary.LittleEndian.PutUint32(h[17:], crc32.Checksum(h[:17], castagnoli))
	if _, err := d.f.WriteAt(h, 0); err != nil {
		return fmt.Errorf("tier file %s: writing its header: %w", d.f.Name(), err)
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("tier file %s: syncing its header: %w", d.f.Name(), err)
	}
	return nil
}

// scan reads every slot and lists the live ones.
func (d *disk) scan() ([]found, error) {
	var live []found
	const batch = 64
	chunk := make([]byte, batch*SlotSize)
	for first := 0; first < d.slots; first += batch {
		n := min(batch, d.slots-first)
		b := chunk[:n*SlotSize]
		if _, err := d.f.ReadAt(b, int64(first+1)*SlotSize); err != nil {
			return nil, fmt.Errorf("tier file %s: reading slots %d-%d: %w", d.f.Name(), first, first+n-1, err)
		}
		for i := range n {
			s := b[i*SlotSize : (i+1)*SlotSize]
			key, huge, seq, ok := checkSlot(s)
			if !ok {
				continue
			}
			slot := int32(first + i)
			d.seqs[slot] = seq
			d.used++
			live = append(live, found{key: key, huge: huge, seq: seq, slot: slot})
		}
	}
	return live, nil
}

// checkSlot decodes a slot (header and page) and reports whether it is live.
func checkSlot(s []byte) (key gva.GVA, huge bool, seq uint64, ok bool) {
	if binary.LittleEndian.Uint32(s) != slotMagic {
		return key, false, 0, false
	}
	c := crc32.Update(crc32.Checksum(s[:slotHdr], castagnoli), castagnoli, s[slotHead:])
	if c != binary.LittleEndian.Uint32(s[slotHdr:]) {
		return key, false, 0, false
	}
	key.Hi = binary.LittleEndian.Uint64(s[5:])
	key.Lo = binary.LittleEndian.Uint64(s[13:])
	return key, s[4]&flagHuge != 0, binary.LittleEndian.Uint64(s[21:]), true
}

// put writes page (key's content) to a free slot with seq, unsynced, in
// one write; the caller syncs before it counts on it.
func (d *disk) put(key gva.GVA, huge bool, page []byte, seq uint64) (int32, error) {
	if len(d.free) == 0 {
		return 0, fmt.Errorf("tier file %s: %w (%d of %d slots used)", d.f.Name(), ErrFull, d.used, d.slots)
	}
	slot := d.free[len(d.free)-1]
	s := d.buf
	clear(s[:slotHead])
	binary.LittleEndian.PutUint32(s, slotMagic)
	if huge {
		s[4] = flagHuge
	}
	binary.LittleEndian.PutUint64(s[5:], key.Hi)
	binary.LittleEndian.PutUint64(s[13:], key.Lo)
	binary.LittleEndian.PutUint64(s[21:], seq)
	copy(s[slotHead:], page)
	c := crc32.Update(crc32.Checksum(s[:slotHdr], castagnoli), castagnoli, s[slotHead:])
	binary.LittleEndian.PutUint32(s[slotHdr:], c)
	if _, err := d.f.WriteAt(s, int64(slot+1)*SlotSize); err != nil {
		return 0, fmt.Errorf("tier file %s: writing slot %d: %w", d.f.Name(), slot, err)
	}
	d.free = d.free[:len(d.free)-1]
	d.seqs[slot] = seq
	d.used++
	d.fifo = append(d.fifo, spillRec{slot: slot, seq: seq})
	return slot, nil
}

// get reads slot (key's page) into dst with one read and checks it.
func (d *disk) get(slot int32, key gva.GVA, dst []byte) error {
	s := d.buf
	if _, err := d.f.ReadAt(s, int64(slot+1)*SlotSize); err != nil {
		return fmt.Errorf("tier file %s: reading slot %d: %w", d.f.Name(), slot, err)
	}
	k, _, seq, ok := checkSlot(s)
	if !ok || k != key || seq != d.seqs[slot] {
		return fmt.Errorf("tier file %s: slot %d does not hold %v at seq %d (it reads %v at %d, valid=%v)", d.f.Name(), slot, key, d.seqs[slot], k, seq, ok)
	}
	copy(dst, s[slotHead:])
	return nil
}

// release frees slot: its magic is zeroed by the next flush, and it is
// written again only after that.
func (d *disk) release(slot int32) {
	if d.seqs[slot] == 0 {
		panic(fmt.Sprintf("tier: slot %d of %s released twice", slot, d.f.Name()))
	}
	d.seqs[slot] = 0
	d.used--
	d.tombs = append(d.tombs, slot)
}

// flush zeroes the magic of the freed slots (no sync: a freed slot that
// comes back after a crash holds an older state of a page the store no
// longer keeps on disk, see Recovered) and makes them free to write.
func (d *disk) flush() error {
	var zero [4]byte
	for len(d.tombs) > 0 {
		slot := d.tombs[len(d.tombs)-1]
		if _, err := d.f.WriteAt(zero[:], int64(slot+1)*SlotSize); err != nil {
			return fmt.Errorf("tier file %s: freeing slot %d: %w", d.f.Name(), slot, err)
		}
		d.tombs = d.tombs[:len(d.tombs)-1]
		d.free = append(d.free, slot)
	}
	if len(d.fifo) > 2*d.used+64 {
		d.fifo = compactFIFO(d.fifo, d.seqs)
	}
	return nil
}

// oldest returns the live slot that came here first.
func (d *disk) oldest() (int32, bool) {
	for len(d.fifo) > 0 {
		r := d.fifo[0]
		if d.seqs[r.slot] == r.seq {
			return r.slot, true
		}
		d.fifo = d.fifo[1:]
	}
	return 0, false
}

func compactFIFO(fifo []spillRec, seqs []uint64) []spillRec {
	out := fifo[:0]
	for _, r := range fifo {
		if seqs[r.slot] == r.seq {
			out = append(out, r)
		}
	}
	return out
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
