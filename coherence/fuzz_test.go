package coherence

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// fakeSender stands for a node core: fixed routes (noc.Routes), and take,
// which drains the engine's outbox, encodes every frame and counts (or,
// with record, keeps) them.
type fakeSender struct {
	self   noc.NodeID
	sent   int
	record bool
	frames []noc.Frame
	out    []noc.Outgoing
}

func (s *fakeSender) Self() noc.NodeID { return s.self }

// take drains e's outbox as a core would after a step.
func (s *fakeSender) take(e *Engine) {
	s.out = e.TakeOutgoing(s.out[:0])
	for i := range s.out {
		f := &s.out[i].Frame
		if _, err := f.AppendTo(nil); err != nil {
			panic(err)
		}
		s.sent++
		if s.record {
			g := *f
			g.Payload = append([]byte(nil), f.Payload...)
			s.frames = append(s.frames, g)
		}
	}
}
func (s *fakeSender) NextHop(dst noc.NodeID) (noc.PortID, int, bool) {
	if dst == s.self {
		return 0, 0, false
	}
	return noc.PortID(dst % 3), 1 + int(dst%4), true
}
func (s *fakeSender) Neighbour(p noc.PortID) (noc.NodeID, bool) { return noc.NodeID(p) + 10, true }

// fuzzEngine returns an engine (node 1) that owns page 1, maps a replica
// of page 2 homed on node 2 and has an entry for page 3 homed on node 3.
func fuzzEngine(tb testing.TB) (*Engine, *fakeSender) { return fuzzEngineR(tb, 1) }

// fuzzEngineR is fuzzEngine with replicas = r.
func fuzzEngineR(tb testing.TB, r int) (*Engine, *fakeSender) {
	tb.Helper()
	s := &recordSink{done: map[uint64]Completion{}}
	e, err := New(Config{Self: 1, Incarnation: 5, Sink: s, Pages: 16, Replicas: r})
	if err != nil {
		tb.Fatal(err)
	}
	out := &fakeSender{self: 1}
	e.Submit(0, Request{ID: 1, Op: HostAlloc}, out)
	out.take(e)
	e.Submit(0, Request{ID: 2, Op: HostRef, GVA: gva.New(2, 1, 0, 0)}, out)
	e.Submit(0, Request{ID: 3, Op: HostLock, GVA: gva.New(1, 1, 0, 0), Holder: 9}, out)
	out.take(e)
	e.Tick(time.Microsecond, out)
	return e, out
}

// seedFrames are well-formed frames of every op, for the fuzz corpus.
func seedFrames() [][]byte {
	own := gva.New(1, 1, 0, 0)
	rep := gva.New(2, 1, 0, 0)
	content := bytes.Repeat([]byte{7}, gva.PageSize)
	var out [][]byte
	add := func(c noc.Class, op noc.Op, fl noc.Flags, src, dst noc.NodeID, id uint64, g gva.GVA, v gva.Version, p []byte) {
		f := newFrame(c, op, fl, src, dst, id, g, v, p)
		b, err := f.AppendTo(nil)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	user := Cred{UID: 1000, GID: 100, Groups: []uint32{10, 20}}
	attr := Attr{UID: 1000, GID: 100, Mode: 0o640}
	add(noc.ClassLoad, OpRef, noc.FlagPath, 4, 1, 11, own, 0, appendRef(nil, 0, Cred{}, 0))
	add(noc.ClassLoad, OpRef, noc.FlagPath, 4, 1, 12, rep, 0, appendRef(nil, 0, user, refGraft))
	add(noc.ClassLoad, OpRef, noc.FlagPath, 4, 1, 19, own, 0, appendRef(nil, 0, Cred{UID: 7, GID: 7}, 0))
	add(noc.ClassLoad, OpRef, noc.FlagPath|noc.FlagReply, 2, 1, 13, rep, 3, appendRefReply(nil, 0, 2, Attr{}, false, content))
	add(noc.ClassLoad, OpRef, noc.FlagPath|noc.FlagReply, 2, 1, 14, rep, 3, appendRefReply(nil, refGraft, 2, attr, true, content))
	add(noc.ClassLoad, OpUnref, noc.FlagPath, 4, 1, 0, own, 0, nil)
	add(noc.ClassLoad, OpDetach, noc.FlagPath, 2, 1, 0, rep, 0, nil)
	add(noc.ClassStore, OpStore, noc.FlagPath, 4, 1, 15, own.WithOffset(100), 0, append(appendUpHead(nil, 0, Cred{}), 1, 2, 3))
	add(noc.ClassStore, OpStore, noc.FlagPath, 4, 1, 20, own.WithOffset(100), 0, append(appendUpHead(nil, 0, user), 1, 2, 3))
	add(noc.ClassStore, OpStore, noc.FlagReply, 2, 1, 2, rep, 4, nil)
	add(noc.ClassStore, OpUpdate, noc.FlagPath, 2, 1, 0, rep.WithOffset(8), 4, []byte{1, 2})
	add(noc.ClassStore, OpInvalidate, noc.FlagPath, 2, 1, 0, rep, 5, nil)
	add(noc.ClassAtomic, OpCAS, noc.FlagPath, 4, 1, 16, own.WithOffset(8), 0, appendAtomic(nil, OpCAS, 0, Cred{}, 0, 5))
	add(noc.ClassAtomic, OpFetchAdd, noc.FlagPath, 4, 1, 17, own.WithOffset(16), 0, appendAtomic(nil, OpFetchAdd, 0, user, 0, 5))
	add(noc.ClassAtomic, OpCAS, noc.FlagReply, 2, 1, 2, rep, 4, appendAtomicReply(nil, atomicResult{prev: 3, swapped: true}))
	add(noc.ClassLoad, OpRef, noc.FlagReply|noc.FlagError, 2, 1, 2, rep, 0, []byte{0, 0, 0, 112})
	add(noc.ClassControl, OpAcquire, noc.FlagPath, 4, 1, 18, own, 0, appendAcquire(nil, acquireReq{inc: 3, route: []byte{0, 1, 0, 2}}))
	add(noc.ClassControl, OpAcquire, noc.FlagPath, 4, 1, 21, own, 0, appendAcquire(nil, acquireReq{cred: user, inc: 3}))
	add(noc.ClassControl, OpGrant, 0, 2, 1, 2, rep, 3, appendGrant(nil, grantMsg{ownerInc: 1, epoch: 1, seq: 1}))
	add(noc.ClassControl, OpDeny, 0, 2, 1, 2, rep, 0, []byte{0, 0, 0, 16})
	add(noc.ClassControl, OpData, 0, 2, 1, 2, rep, 3, appendData(nil, dataMsg{epoch: 1, seq: 1, content: content}))
	add(noc.ClassControl, OpData, 0, 2, 1, 2, rep, 3, appendData(nil, dataMsg{epoch: 1, seq: 1, flags: dataAttr, attr: attr, content: content}))
	add(noc.ClassControl, OpDataAck, 0, 4, 1, 18, own, 0, appendDataAck(nil, dataAckMsg{inc: 3, ownerInc: 5, seq: 1}))
	add(noc.ClassControl, OpDone, noc.FlagPath, 2, 1, 2, rep, 3, appendDone(nil, doneMsg{seq: 1, route: []byte{0, 1}}))
	add(noc.ClassControl, OpDone, 0, 2, 1, 2, rep, 3, appendDone(nil, doneMsg{flags: doneRouted, seq: 1}))
	add(noc.ClassControl, OpAbort, 0, 2, 1, 2, rep, 0, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})
	add(noc.ClassControl, OpOwnerQuery, 0, 4, 1, 18, own, 0, nil)
	add(noc.ClassControl, OpOwnerQuery, noc.FlagReply, 2, 1, 2, rep, 0, appendMoved(nil, movedMsg{owner: 1, ownerInc: 5, epoch: 1}))
	add(noc.ClassControl, OpOwnerMoved, 0, 4, 1, 1, own, 0, []byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9})
	add(noc.ClassControl, OpOwnerMoved, 0, 4, 1, 0, own, 0, appendMoved(nil, movedMsg{owner: 4, ownerInc: 3, epoch: 9, attr: attr, hasAttr: true}))
	add(noc.ClassControl, OpOwnerMovedAck, 0, 2, 1, 1, rep, 0, nil)
	add(noc.ClassControl, OpAttrQuery, 0, 4, 1, 0, own, 0, nil)
	add(noc.ClassControl, OpAttrQuery, noc.FlagReply, 2, 1, 0, rep, 0, appendAttr(nil, attr))
	// Replication (replicas > 1).
	add(noc.ClassControl, OpData, 0, 2, 1, 2, rep, 3, appendData(nil, dataMsg{epoch: 1, seq: 1, content: content, backups: []noc.NodeID{2, 3}}))
	add(noc.ClassControl, OpReplicate, 0, 2, 1, 0, rep, 3, appendReplicate(nil, replMsg{epoch: 1, ownerInc: 9, flags: replFull, backups: []noc.NodeID{1}, data: content}))
	add(noc.ClassControl, OpReplicate, 0, 2, 1, 0, rep, 3, appendReplicate(nil, replMsg{epoch: 1, ownerInc: 9, flags: replFull | replAttr, backups: []noc.NodeID{1}, data: content, attr: attr}))
	add(noc.ClassControl, OpReplicate, 0, 2, 1, 0, rep.WithOffset(8), 4, appendReplicate(nil, replMsg{epoch: 1, ownerInc: 9, backups: []noc.NodeID{1}, off: 8, data: []byte{5}}))
	add(noc.ClassControl, OpReplicate, 0, 2, 1, 0, rep, 4, appendReplicate(nil, replMsg{epoch: 1, ownerInc: 9, flags: replTouch, backups: []noc.NodeID{1}}))
	add(noc.ClassControl, OpReplicateAck, 0, 10, 1, 0, own, 1, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0})
	add(noc.ClassControl, OpReplicateAck, 0, 10, 1, 0, rep, 1, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, ackProbe})
	add(noc.ClassControl, OpReplicaDrop, 0, 2, 1, 0, rep, 0, []byte{0, 0, 0, 0, 0, 0, 0, 1})
	add(noc.ClassControl, OpReplicaDrop, 0, 2, 1, 0, rep, 0, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9})
	add(noc.ClassControl, OpReplicaDrop, 0, 2, 1, 0, rep, 0, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0})
	add(noc.ClassControl, OpFailover, 0, 3, noc.BroadcastNode, 0, rep, 4, []byte{0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2})
	return out
}

// FuzzHandleFrame feeds arbitrary frames to an engine with state: it must
// never panic, whatever the bytes.
func FuzzHandleFrame(f *testing.F) {
	for _, b := range seedFrames() {
		f.Add(b, uint16(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, in uint16) {
		var fr noc.Frame
		if err := fr.Decode(data); err != nil {
			return
		}
		e, out := fuzzEngine(t)
		p := noc.PortID(in % 4)
		if in == 0xFFFF {
			p = noc.NoPort
		}
		e.HandleFrame(2*time.Microsecond, p, &fr, out)
		out.take(e)
		e.Tick(time.Second, out)
		// The same bytes as a frame from another port, after a port went down.
		e.PortState(2*time.Second, noc.PortID(in%3), false, 0, out)
		out.take(e)
		e.HandleFrame(3*time.Second, noc.PortID((in+1)%4), &fr, out)
		e.Tick(4*time.Second, out)
		out.take(e)
	})
}

// FuzzHandleFrameReplicated is FuzzHandleFrame on an engine with
// replicas = 2 (its pages staged, backed up, failed over).
func FuzzHandleFrameReplicated(f *testing.F) {
	for _, b := range seedFrames() {
		f.Add(b, uint16(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, in uint16) {
		var fr noc.Frame
		if err := fr.Decode(data); err != nil {
			return
		}
		e, out := fuzzEngineR(t, 2)
		e.HandleFrame(2*time.Microsecond, noc.PortID(in%4), &fr, out)
		out.take(e)
		e.Tick(time.Second, out)
		out.take(e)
		e.HandleFrame(3*time.Second, noc.PortID((in+1)%4), &fr, out)
		e.Tick(10*time.Second, out)
		out.take(e)
	})
}

// FuzzPayloadDecoders checks every payload decoder on arbitrary bytes:
// never a panic, and what decodes re-encodes to the same bytes.
func FuzzPayloadDecoders(f *testing.F) {
	for _, b := range seedFrames() {
		var fr noc.Frame
		if fr.Decode(b) == nil {
			f.Add(fr.Payload)
		}
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if a, err := decodeAcquire(p); err == nil {
			if got := appendAcquire(nil, a); !bytes.Equal(got, p) {
				t.Fatalf("acquire round trip: %x != %x", got, p)
			}
		}
		if g, err := decodeGrant(p); err == nil && !bytes.Equal(appendGrant(nil, g), p) {
			t.Fatal("grant round trip")
		}
		if d, err := decodeData(p); err == nil && !bytes.Equal(appendData(nil, d), p) {
			t.Fatal("data round trip")
		}
		if m, err := decodeDataAck(p); err == nil && !bytes.Equal(appendDataAck(nil, m), p) {
			t.Fatal("data ack round trip")
		}
		if d, err := decodeDone(p); err == nil && !bytes.Equal(appendDone(nil, d), p) {
			t.Fatal("done round trip")
		}
		if r, err := decodeRefReply(p); err == nil && !bytes.Equal(appendRefReply(nil, r.flags, r.owner, r.attr, r.flags&refAttr != 0, r.content), p) {
			t.Fatal("ref reply round trip")
		}
		if r, err := decodeAtomicReply(p); err == nil && !bytes.Equal(appendAtomicReply(nil, r), p) {
			t.Fatal("atomic reply round trip")
		}
		for _, op := range []noc.Op{OpCAS, OpFetchAdd} {
			if a, err := decodeAtomic(op, gva.GVA{}, p); err == nil {
				c, err := decodeCred(p)
				if err != nil {
					t.Fatalf("atomic decoded without credentials: %x", p)
				}
				if !bytes.Equal(appendAtomic(nil, op, a.target, c, a.expected, a.operand), p) {
					t.Fatal("atomic round trip")
				}
			}
		}
		if c, err := decodeCred(p); err == nil {
			// The credentials re-encode to the same bytes, and the check
			// on the encoded form agrees with the one on the decoded.
			if got := appendUpHead(nil, binary.BigEndian.Uint64(p), c); !bytes.Equal(got, p[:upBody(p)]) {
				t.Fatalf("credentials round trip: %x != %x", got, p[:upBody(p)])
			}
			for _, a := range []Attr{{UID: 1000, GID: 100, Mode: 0o640}, {UID: c.UID, GID: 5, Mode: 0o604}, {UID: 1, GID: c.GID, Mode: 0o060}} {
				for _, need := range []uint32{AccessRead, AccessWrite, AccessRead | AccessWrite} {
					if credAllows(a, p, need) != Allows(a, c, need) {
						t.Fatalf("%+v %+v need %d: encoded and decoded checks differ", c, a, need)
					}
				}
			}
		}
		if _, rf, err := decodeRef(p); err == nil {
			c, _ := decodeCred(p)
			if !bytes.Equal(appendRef(nil, binary.BigEndian.Uint64(p), c, rf), p) {
				t.Fatal("ref round trip")
			}
		}
		if s, err := decodeStore(gva.GVA{}, p); err == nil {
			c, _ := decodeCred(p)
			if !bytes.Equal(append(appendUpHead(nil, binary.BigEndian.Uint64(p), c), s.data...), p) {
				t.Fatal("store round trip")
			}
		}
		_, _ = decodeUpdate(gva.GVA{}, p)
		_, _, _ = decodeAbort(p)
		if m, err := decodeReplicate(p); err == nil && !bytes.Equal(appendReplicate(nil, m), p) {
			t.Fatal("replicate round trip")
		}
		if m, err := decodeMoved(p); err == nil && !bytes.Equal(appendMoved(nil, m), p) {
			t.Fatal("moved round trip")
		}
		if n, err := decodeErrno(p); err == nil && n == 0 {
			t.Fatal("an error reply decoded as success")
		}
	})
}

func TestSeedFramesAreHandled(t *testing.T) {
	e, out := fuzzEngine(t)
	for i, b := range seedFrames() {
		var fr noc.Frame
		if err := fr.Decode(b); err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		before := e.Stats().Malformed
		e.HandleFrame(time.Millisecond, 1, &fr, out)
		out.take(e)
		if e.Stats().Malformed != before {
			t.Fatalf("seed frame %d (%v) counted as malformed", i, &fr)
		}
	}
	// Truncated payloads are dropped and counted, never a panic.
	for i, b := range seedFrames() {
		var fr noc.Frame
		if err := fr.Decode(b); err != nil || len(fr.Payload) == 0 {
			continue
		}
		fr.Payload = fr.Payload[:len(fr.Payload)-1]
		before := e.Stats().Malformed
		e.HandleFrame(2*time.Millisecond, 1, &fr, out)
		out.take(e)
		if e.Stats().Malformed == before && fr.Class != noc.ClassStore {
			t.Errorf("truncated seed frame %d (%v) not counted as malformed", i, &fr)
		}
	}
}
