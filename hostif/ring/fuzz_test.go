package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// Fuzz ops: each is 9 bytes, a kind and two little-endian uint32
// arguments. The host-side ones write anything anywhere in the shared
// region (the hostile process); the agent-side ones drive the Pair.
const (
	fzProducer   = iota // host stores a into the submission producer index
	fzLength            // host writes b as the length word of submission slot a
	fzByte              // host writes byte b at offset a of the region (any word included)
	fzCQConsumer        // host stores a into the completion consumer index
	fzSubmit            // host submits a well-formed message of a bytes
	fzReap              // host reaps a completion
	fzPop               // agent pops (checked against an oracle)
	fzPush              // agent pushes a reply of a bytes
	fzFlush             // agent flushes
	fzWakeup            // agent raises (a odd) or lowers NEED_WAKEUP
	fzKinds
)

func fzOp(kind int, a, b uint32) []byte {
	op := []byte{byte(kind)}
	op = binary.LittleEndian.AppendUint32(op, a)
	return binary.LittleEndian.AppendUint32(op, b)
}

// FuzzPop lets the host write anything into the shared region between the
// agent's calls. The agent never panics (Go bounds checks turn any read
// outside the mapping into a panic), Pop returns exactly what an oracle
// reading the same memory predicts (the message in the slot, nothing, or
// ErrCorrupt for an impossible index, sequence word or length), and
// corruption is sticky. Seeds: testdata/fuzz/FuzzPop plus the ones below.
func FuzzPop(f *testing.F) {
	seq := func(ops ...[]byte) []byte { return bytes.Join(ops, nil) }
	f.Add(seq(fzOp(fzSubmit, 48, 0), fzOp(fzPop, 0, 0), fzOp(fzPush, 48, 0), fzOp(fzFlush, 0, 0), fzOp(fzReap, 0, 0)))
	f.Add(seq(fzOp(fzProducer, 9, 0), fzOp(fzPop, 0, 0)))
	f.Add(seq(fzOp(fzSubmit, 48, 0), fzOp(fzLength, 0, 1<<20), fzOp(fzPop, 0, 0)))
	f.Add(seq(fzOp(fzCQConsumer, 7, 0), fzOp(fzPush, 40, 0)))
	f.Add(seq(fzOp(fzByte, offSQConsumer, 0xff), fzOp(fzSubmit, 40, 0), fzOp(fzPop, 0, 0), fzOp(fzFlush, 0, 0)))
	f.Add(seq(fzOp(fzWakeup, 1, 0), fzOp(fzProducer, 2, 0), fzOp(fzWakeup, 1, 0), fzOp(fzPop, 0, 0), fzOp(fzPop, 0, 0)))
	f.Fuzz(func(t *testing.T, script []byte) {
		cfg := Config{Entries: 4, SlotSize: MinSlotSize}
		p, c := newPair(t, cfg)
		max := cfg.MaxMessage()
		dst := make([]byte, max)
		for len(script) >= 9 {
			kind := int(script[0]) % fzKinds
			a := binary.LittleEndian.Uint32(script[1:])
			b := binary.LittleEndian.Uint32(script[5:])
			script = script[9:]
			switch kind {
			case fzProducer:
				c.sq.producer.Store(a)
			case fzLength:
				binary.LittleEndian.PutUint32(c.sq.slot(a), b)
			case fzByte:
				c.mem[int(a)%len(c.mem)] = byte(b)
			case fzCQConsumer:
				c.cq.consumer.Store(a)
			case fzSubmit:
				_ = c.Submit(msg(int(b), 1+int(a)%max))
			case fzReap:
				_, _, _ = c.Reap(dst)
			case fzPop:
				checkPop(t, p, c, dst)
			case fzPush:
				err := p.Push(msg(int(b), int(a)%(max+8)))
				if err != nil && !errors.Is(err, ErrFull) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("push: %v", err)
				}
			case fzFlush:
				_ = p.Flush()
			case fzWakeup:
				p.SetNeedWakeup(a&1 == 1)
			}
			if p.err == nil && p.sq.ready-p.sq.next > cfg.Entries {
				t.Fatalf("agent holds %d ready submissions in a ring of %d", p.sq.ready-p.sq.next, cfg.Entries)
			}
		}
	})
}

// checkPop predicts Pop's result from the shared memory as the host left
// it, then pops and compares.
func checkPop(t *testing.T, p *Pair, c *Client, dst []byte) {
	t.Helper()
	sticky := p.err
	var want []byte
	wantOK, wantCorrupt := false, false
	slot := func() {
		s := c.sq.slot(p.sq.next)
		l := binary.LittleEndian.Uint32(s)
		switch {
		case binary.LittleEndian.Uint32(s[slotSeq:]) != p.sq.next+1:
			wantCorrupt = true
		case l == 0 || l > uint32(p.cfg.MaxMessage()):
			wantCorrupt = true
		default:
			wantOK, want = true, append([]byte(nil), s[SlotHeader:SlotHeader+l]...)
		}
	}
	switch {
	case sticky != nil:
	case p.sq.ready != p.sq.next:
		// a refresh (SetNeedWakeup) found submissions: the slot must be one
		slot()
	case binary.LittleEndian.Uint32(c.sq.slot(p.sq.next)[slotSeq:]) == p.sq.next+1:
		// the slot's sequence word says it is ready
		slot()
	}
	n, ok, err := p.Pop(dst)
	switch {
	case sticky != nil:
		if err != sticky || ok {
			t.Fatalf("after %v, pop gave %v %v", sticky, ok, err)
		}
	case wantCorrupt:
		if !errors.Is(err, ErrCorrupt) || ok {
			t.Fatalf("pop of hostile memory: ok %v err %v, want ErrCorrupt", ok, err)
		}
	case err != nil || ok != wantOK:
		t.Fatalf("pop: ok %v err %v, want ok %v", ok, err, wantOK)
	case ok && !bytes.Equal(dst[:n], want):
		t.Fatalf("pop returned %d bytes that differ from the slot's %d", n, len(want))
	}
}
