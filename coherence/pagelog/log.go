package pagelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Page is the state of one page the log keeps: a page its node owns
// (Owned: Owner is the node itself) or a backup copy it holds for Owner.
type Page struct {
	Key      gva.GVA
	Owned    bool
	Owner    noc.NodeID
	OwnerInc uint64 // the incarnation of the owner's run that made this state
	Epoch    uint64 // ownership epoch
	Version  gva.Version
	Huge     bool
	// Rank and Backups: the owner's backups in rank order, and this
	// copy's rank among them (a copy; an owned page has none).
	Rank    int
	Backups []noc.NodeID
	// Heir: the copy stands in for the node the owner handed the page to
	// (HasHeir).
	Heir    noc.NodeID
	HeirInc uint64
	HasHeir bool
	Attr    gva.Attr
	HasAttr bool
	Content []byte
}

// Home is the record of a page this node is the home of: who owns it, in
// which ownership epoch, or that it was freed. A restarted home that
// reloads its records answers for its pages at once, and a copy reloaded
// elsewhere asks it whether the page moved on, or was freed, while that
// copy's node was down.
type Home struct {
	Key      gva.GVA
	Owner    noc.NodeID
	OwnerInc uint64
	Epoch    uint64
	Freed    bool
	Attr     gva.Attr
	HasAttr  bool
}

// Identity names the node and the fabric a log belongs to.
type Identity struct {
	Node   noc.NodeID
	Fabric uint64 // a tag of the fabric (0: none configured)
}

// ErrCorrupt is returned (wrapped, with the file and the reason) by Open
// for a log it refuses.
var ErrCorrupt = errors.New("pagelog: state refused")

const (
	magic      = "DPUPLOG\x02" // every record in a batch (kindBatch)
	magicV1    = "DPUPLOG\x01" // records without batches: read, then rewritten
	headerLen  = 8 + 4 + 8 + 4 // magic, node, fabric, crc
	recHead    = 4 + 4         // length of kind+payload, crc32c of them
	kindPut    = 1
	kindDrop   = 2
	kindHome   = 3
	kindBatch  = 4                                // the records of one Sync, whole or not at all
	homeLen    = keyLen + 1 + 4 + 8 + 8 + attrLen // key, flags, owner, inc, epoch, attr
	keyLen     = 16
	putFixed   = keyLen + 1 + 4 + 8 + 8 + 8 + 1 + 1 + 4 + 8 // key, flags, owner, inc, epoch, version, rank, n, heir, heirInc
	attrLen    = 12
	maxRecord  = putFixed + 255*4 + attrLen + gva.HugePageSize
	maxBatch   = 1 << 30 // bytes of one Sync's records
	compactMin = 1 << 20 // bytes below which the log is never rewritten
	scanWindow = 1 << 16 // bytes past a bad record searched for a valid one
)

const (
	flagOwned = 1 << iota
	flagHuge
	flagAttr
	flagHeir
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Log is the open log of one node. It is not safe for concurrent use (the
// engine's loop owns it).
type Log struct {
	disk  Disk
	id    Identity
	pages map[gva.GVA]*Page
	homes map[gva.GVA]*Home
	gone  map[gva.GVA]uint64 // tombstones: dropped pages and their last epoch
	size  int                // bytes in the file
	live  int                // bytes of the records in force
	lens  map[gva.GVA]int
	buf   []byte
	batch []byte // the last Sync's batch record (reused)
	v1    bool   // the file has no batches (magicV1)
	dirty bool
}

// Open loads the log of disk for node and fabric id: the pages in force
// (sorted by key), after dropping a torn tail (the file is rewritten
// without it). A log that is missing is created. Open refuses a log that
// is not one, one of another node or fabric, or one corrupt before its
// end, with ErrCorrupt.
func Open(disk Disk, id Identity) (*Log, []Page, error) {
	b, err := disk.Load()
	if err != nil {
		return nil, nil, err
	}
	l := &Log{disk: disk, id: id, pages: map[gva.GVA]*Page{}, homes: map[gva.GVA]*Home{}, gone: map[gva.GVA]uint64{}, lens: map[gva.GVA]int{}}
	if len(b) == 0 {
		if err := l.rewrite(); err != nil {
			return nil, nil, fmt.Errorf("%s: a new log cannot be written: %w", disk.Name(), err)
		}
		return l, nil, nil
	}
	if err := checkHeader(b, id); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", disk.Name(), err)
	}
	l.v1 = string(b[:8]) == magicV1
	end, torn, err := l.replay(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", disk.Name(), err)
	}
	l.size = end
	if torn || l.v1 || l.size > 2*l.live+compactMin {
		if err := l.rewrite(); err != nil {
			return nil, nil, fmt.Errorf("%s: the log cannot be rewritten: %w", disk.Name(), err)
		}
	}
	return l, l.Pages(), nil
}

func checkHeader(b []byte, id Identity) error {
	if len(b) < headerLen || string(b[:8]) != magic && string(b[:8]) != magicV1 {
		return fmt.Errorf("%w: not a page log (bad magic)", ErrCorrupt)
	}
	if crc32.Checksum(b[:headerLen-4], castagnoli) != binary.BigEndian.Uint32(b[headerLen-4:]) {
		return fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	if n := noc.NodeID(binary.BigEndian.Uint32(b[8:])); n != id.Node {
		return fmt.Errorf("%w: the state of node %v, not of node %v", ErrCorrupt, n, id.Node)
	}
	if f := binary.BigEndian.Uint64(b[12:]); f != id.Fabric {
		return fmt.Errorf("%w: the state of fabric %016x, not of fabric %016x", ErrCorrupt, f, id.Fabric)
	}
	return nil
}

// replay applies the records of b after its header; it returns the end of
// the last valid record and whether a torn tail followed it.
func (l *Log) replay(b []byte) (end int, torn bool, err error) {
	off := headerLen
	for off < len(b) {
		rec, n, ok := record(b[off:])
		if !ok {
			if l.validAfter(b[off:]) {
				return 0, false, fmt.Errorf("%w: record at byte %d fails its checksum and valid records follow it", ErrCorrupt, off)
			}
			return off, true, nil
		}
		if !l.topLevel(rec[0]) {
			return 0, false, fmt.Errorf("%w: record at byte %d: a record of kind %d outside a batch", ErrCorrupt, off, rec[0])
		}
		if err := l.apply(rec, n); err != nil {
			return 0, false, fmt.Errorf("%w: record at byte %d: %v", ErrCorrupt, off, err)
		}
		off += n
	}
	return off, false, nil
}

// record returns the kind and payload of the record at the start of b and
// its length; ok is false for a record cut short or failing its checksum.
func record(b []byte) (rec []byte, n int, ok bool) {
	if len(b) < recHead {
		return nil, 0, false
	}
	ln := int(binary.BigEndian.Uint32(b))
	if ln < 1 || ln > maxBatch || len(b) < recHead+ln {
		return nil, 0, false
	}
	rec = b[recHead : recHead+ln]
	if crc32.Checksum(rec, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return rec, recHead + ln, true
}

// validAfter reports whether a valid record starts in b past its first
// byte: corruption in the middle of the log, not a torn tail. It looks
// where the bad record's length says the next one starts, then at every
// byte of the next scanWindow bytes (a torn tail is the last step's
// records, each far smaller).
func (l *Log) validAfter(b []byte) bool {
	if len(b) >= recHead {
		if next := recHead + int(binary.BigEndian.Uint32(b)); next < len(b) {
			if rec, _, ok := record(b[next:]); ok && l.topLevel(rec[0]) {
				return true
			}
		}
	}
	for i := 1; i+recHead < len(b) && i < scanWindow; i++ {
		if rec, _, ok := record(b[i:]); ok && l.topLevel(rec[0]) {
			return true
		}
	}
	return false
}

// topLevel reports whether a record of kind k may stand in the file by
// itself: in a log with batches only a batch does (the records inside a
// torn batch are not records of the file).
func (l *Log) topLevel(k byte) bool {
	if l.v1 {
		return k >= kindPut && k <= kindHome
	}
	return k == kindBatch
}

func (l *Log) apply(rec []byte, n int) error {
	if rec[0] != kindBatch && n > recHead+maxRecord {
		return fmt.Errorf("record of %d bytes", n)
	}
	switch rec[0] {
	case kindBatch:
		for b := rec[1:]; len(b) > 0; {
			sub, m, ok := record(b)
			if !ok || sub[0] == kindBatch {
				return errors.New("a batch holds a bad record")
			}
			if err := l.apply(sub, m); err != nil {
				return err
			}
			b = b[m:]
		}
	case kindPut:
		p, err := decodePut(rec[1:])
		if err != nil {
			return err
		}
		l.live += n - l.lens[p.Key]
		l.lens[p.Key] = n
		l.pages[p.Key] = &p
	case kindHome:
		h, err := decodeHome(rec[1:])
		if err != nil {
			return err
		}
		if _, ok := l.homes[h.Key]; !ok {
			l.live += n
		}
		l.homes[h.Key] = &h
	case kindDrop:
		if len(rec) != 1+keyLen+8 {
			return fmt.Errorf("drop of %d bytes", len(rec)-1)
		}
		key := getKey(rec[1:])
		l.live -= l.lens[key]
		delete(l.lens, key)
		delete(l.pages, key)
		if _, ok := l.gone[key]; !ok {
			l.live += n
		}
		l.gone[key] = binary.BigEndian.Uint64(rec[1+keyLen:])
	default:
		return fmt.Errorf("unknown kind %d", rec[0])
	}
	return nil
}

func putKey(b []byte, k gva.GVA) {
	binary.BigEndian.PutUint64(b, k.Hi)
	binary.BigEndian.PutUint64(b[8:], k.Lo)
}

func getKey(b []byte) gva.GVA {
	return gva.GVA{Hi: binary.BigEndian.Uint64(b), Lo: binary.BigEndian.Uint64(b[8:])}
}

// appendPut appends the kind and payload of a put of p.
func appendPut(b []byte, p *Page) []byte {
	var fl byte
	if p.Owned {
		fl |= flagOwned
	}
	if p.Huge {
		fl |= flagHuge
	}
	if p.HasAttr {
		fl |= flagAttr
	}
	if p.HasHeir {
		fl |= flagHeir
	}
	var h [putFixed]byte
	putKey(h[:], p.Key)
	h[16] = fl
	binary.BigEndian.PutUint32(h[17:], uint32(p.Owner))
	binary.BigEndian.PutUint64(h[21:], p.OwnerInc)
	binary.BigEndian.PutUint64(h[29:], p.Epoch)
	binary.BigEndian.PutUint64(h[37:], uint64(p.Version))
	h[45] = byte(p.Rank)
	h[46] = byte(len(p.Backups))
	binary.BigEndian.PutUint32(h[47:], uint32(p.Heir))
	binary.BigEndian.PutUint64(h[51:], p.HeirInc)
	b = append(b, kindPut)
	b = append(b, h[:]...)
	for _, n := range p.Backups {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	if p.HasAttr {
		b = binary.BigEndian.AppendUint32(b, p.Attr.UID)
		b = binary.BigEndian.AppendUint32(b, p.Attr.GID)
		b = binary.BigEndian.AppendUint32(b, p.Attr.Mode)
	}
	return append(b, p.Content...)
}

func decodePut(b []byte) (Page, error) {
	if len(b) < putFixed {
		return Page{}, fmt.Errorf("put of %d bytes", len(b))
	}
	fl := b[16]
	if fl&^(flagOwned|flagHuge|flagAttr|flagHeir) != 0 {
		return Page{}, fmt.Errorf("unknown flags %#x", fl)
	}
	p := Page{
		Key:      getKey(b),
		Owned:    fl&flagOwned != 0,
		Huge:     fl&flagHuge != 0,
		HasAttr:  fl&flagAttr != 0,
		HasHeir:  fl&flagHeir != 0,
		Owner:    noc.NodeID(binary.BigEndian.Uint32(b[17:])),
		OwnerInc: binary.BigEndian.Uint64(b[21:]),
		Epoch:    binary.BigEndian.Uint64(b[29:]),
		Version:  gva.Version(binary.BigEndian.Uint64(b[37:])),
		Rank:     int(b[45]),
		Heir:     noc.NodeID(binary.BigEndian.Uint32(b[47:])),
		HeirInc:  binary.BigEndian.Uint64(b[51:]),
	}
	nb := int(b[46])
	b = b[putFixed:]
	if len(b) < nb*4 {
		return Page{}, fmt.Errorf("%d backups in %d bytes", nb, len(b))
	}
	for i := 0; i < nb; i++ {
		p.Backups = append(p.Backups, noc.NodeID(binary.BigEndian.Uint32(b[4*i:])))
	}
	b = b[nb*4:]
	if p.HasAttr {
		if len(b) < attrLen {
			return Page{}, errors.New("attributes cut short")
		}
		p.Attr = gva.Attr{UID: binary.BigEndian.Uint32(b), GID: binary.BigEndian.Uint32(b[4:]), Mode: binary.BigEndian.Uint32(b[8:])}
		b = b[attrLen:]
	}
	size := gva.PageSize
	if p.Huge {
		size = gva.HugePageSize
	}
	if len(b) != size {
		return Page{}, fmt.Errorf("content of %d bytes, want %d", len(b), size)
	}
	p.Content = append([]byte(nil), b...)
	return p, nil
}

func appendHome(b []byte, h *Home) []byte {
	var r [homeLen]byte
	putKey(r[:], h.Key)
	if h.Freed {
		r[16] |= 1
	}
	if h.HasAttr {
		r[16] |= 2
	}
	binary.BigEndian.PutUint32(r[17:], uint32(h.Owner))
	binary.BigEndian.PutUint64(r[21:], h.OwnerInc)
	binary.BigEndian.PutUint64(r[29:], h.Epoch)
	binary.BigEndian.PutUint32(r[37:], h.Attr.UID)
	binary.BigEndian.PutUint32(r[41:], h.Attr.GID)
	binary.BigEndian.PutUint32(r[45:], h.Attr.Mode)
	return append(append(b, kindHome), r[:]...)
}

func decodeHome(b []byte) (Home, error) {
	if len(b) != homeLen {
		return Home{}, fmt.Errorf("home record of %d bytes", len(b))
	}
	if b[16]&^3 != 0 {
		return Home{}, fmt.Errorf("unknown home flags %#x", b[16])
	}
	return Home{Key: getKey(b), Freed: b[16]&1 != 0, HasAttr: b[16]&2 != 0,
		Owner: noc.NodeID(binary.BigEndian.Uint32(b[17:])), OwnerInc: binary.BigEndian.Uint64(b[21:]), Epoch: binary.BigEndian.Uint64(b[29:]),
		Attr: gva.Attr{UID: binary.BigEndian.Uint32(b[37:]), GID: binary.BigEndian.Uint32(b[41:]), Mode: binary.BigEndian.Uint32(b[45:])}}, nil
}

// PutHome records a home record; it is durable once Sync returned.
func (l *Log) PutHome(h Home) {
	if _, ok := l.homes[h.Key]; !ok {
		l.live += recHead + 1 + homeLen
	}
	l.appendRecord(appendHome(nil, &h))
	l.homes[h.Key] = &h
	l.dirty = true
}

// Homes returns the home records, sorted by key.
func (l *Log) Homes() []Home {
	out := make([]Home, 0, len(l.homes))
	for _, k := range slices.SortedFunc(maps.Keys(l.homes), gva.Compare) {
		out = append(out, *l.homes[k])
	}
	return out
}

func (l *Log) appendRecord(rec []byte) {
	var h [recHead]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(rec)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(rec, castagnoli))
	l.buf = append(l.buf, h[:]...)
	l.buf = append(l.buf, rec...)
}

// Put records p's state (its content is copied); it is durable once Sync
// returned.
func (l *Log) Put(p Page) {
	start := len(l.buf)
	l.appendRecord(appendPut(nil, &p))
	n := len(l.buf) - start
	p.Content = append([]byte(nil), p.Content...)
	p.Backups = slices.Clone(p.Backups)
	l.live += n - l.lens[p.Key]
	l.lens[p.Key] = n
	l.pages[p.Key] = &p
	l.dirty = true
}

// Drop records that key is no longer kept here, and the ownership epoch
// its last state had (or reached: a handover's): a tombstone, which Gone
// returns after a restart.
func (l *Log) Drop(key gva.GVA, epoch uint64) {
	if _, ok := l.pages[key]; !ok {
		return
	}
	l.appendRecord(appendDrop(nil, key, epoch))
	l.live -= l.lens[key]
	delete(l.lens, key)
	delete(l.pages, key)
	if _, ok := l.gone[key]; !ok {
		l.live += recHead + 1 + keyLen + 8
	}
	l.gone[key] = epoch
	l.dirty = true
}

func appendDrop(b []byte, key gva.GVA, epoch uint64) []byte {
	var rec [1 + keyLen + 8]byte
	rec[0] = kindDrop
	putKey(rec[1:], key)
	binary.BigEndian.PutUint64(rec[1+keyLen:], epoch)
	return append(b, rec[:]...)
}

// Gone returns the tombstones: the pages this node kept once and no
// longer does, with the last epoch it knew of each (a page put again
// since is not listed).
func (l *Log) Gone() map[gva.GVA]uint64 {
	out := make(map[gva.GVA]uint64, len(l.gone))
	for k, e := range l.gone {
		if _, ok := l.pages[k]; !ok {
			out[k] = e
		}
	}
	return out
}

// Sync writes what Put and Drop recorded and makes it durable (write,
// fsync); a log grown past twice its live records is rewritten first.
func (l *Log) Sync() error {
	if !l.dirty {
		return nil
	}
	l.dirty = false
	if l.size+len(l.buf) > 2*l.live+compactMin {
		l.buf = l.buf[:0]
		return l.rewrite()
	}
	// The step's records go as one batch record: a power cut in the
	// middle of the write leaves all of them or none (a prefix of whole
	// records would be a state no step made: a home record naming a heir
	// without the old owner's stand-in, say).
	b := l.batch[:0]
	b = binary.BigEndian.AppendUint32(b, uint32(1+len(l.buf)))
	b = binary.BigEndian.AppendUint32(b, crc32.Update(crc32.Checksum([]byte{kindBatch}, castagnoli), castagnoli, l.buf))
	b = append(append(b, kindBatch), l.buf...)
	l.batch = b
	l.buf = l.buf[:0]
	if err := l.disk.Append(b); err != nil {
		return err
	}
	l.size += len(b)
	return l.disk.Sync()
}

// rewrite replaces the file with the header and the records in force.
func (l *Log) rewrite() error {
	b := make([]byte, headerLen, headerLen+l.live)
	copy(b, magic)
	binary.BigEndian.PutUint32(b[8:], uint32(l.id.Node))
	binary.BigEndian.PutUint64(b[12:], l.id.Fabric)
	binary.BigEndian.PutUint32(b[headerLen-4:], crc32.Checksum(b[:headerLen-4], castagnoli))
	save := l.buf
	l.buf = b
	for _, k := range slices.SortedFunc(maps.Keys(l.pages), gva.Compare) {
		l.appendBatchOf(appendPut(nil, l.pages[k]))
	}
	for _, k := range slices.SortedFunc(maps.Keys(l.homes), gva.Compare) {
		l.appendBatchOf(appendHome(nil, l.homes[k]))
	}
	for _, k := range slices.SortedFunc(maps.Keys(l.gone), gva.Compare) {
		if _, ok := l.pages[k]; !ok {
			l.appendBatchOf(appendDrop(nil, k, l.gone[k]))
		}
	}
	b, l.buf = l.buf, save[:0]
	if err := l.disk.Replace(b); err != nil {
		return err
	}
	l.size, l.v1 = len(b), false
	return nil
}

// appendBatchOf appends rec as a batch of one record (a rewritten log's
// records, each whole on its own: the rename makes the file atomic).
func (l *Log) appendBatchOf(rec []byte) {
	var h [recHead]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(rec)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(rec, castagnoli))
	b := make([]byte, 0, 1+recHead+len(rec))
	l.appendRecord(append(append(append(b, kindBatch), h[:]...), rec...))
}

// Pages returns the pages in force, sorted by key.
func (l *Log) Pages() []Page {
	out := make([]Page, 0, len(l.pages))
	for _, k := range slices.SortedFunc(maps.Keys(l.pages), gva.Compare) {
		out = append(out, *l.pages[k])
	}
	return out
}

// Len is the number of pages in force.
func (l *Log) Len() int { return len(l.pages) }

// Close closes the disk.
func (l *Log) Close() error { return l.disk.Close() }
