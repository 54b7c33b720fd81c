package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newPair returns an agent side and a host side attached to it, released
// at the end of the test.
func newPair(t testing.TB, cfg Config) (*Pair, *Client) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := Attach(p.TakeHostFDs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

func msg(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i + j)
	}
	return b
}

// TestRoundTrips moves messages of every size class both ways, far past
// the uint32 wrap of nothing but many times round the ring, checking every
// byte, with batches of varying size.
func TestRoundTrips(t *testing.T) {
	p, c := newPair(t, Config{Entries: 8, SlotSize: MinSlotSize})
	dst := make([]byte, p.Config().MaxMessage())
	sizes := []int{1, 32, 48, 4136, 100, 4096 + 32}
	sent := 0
	for round := range 50 {
		batch := 1 + round%8
		for i := range batch {
			if err := c.Submit(msg(sent+i, sizes[(sent+i)%len(sizes)])); err != nil {
				t.Fatalf("submit %d: %v", sent+i, err)
			}
		}
		for i := range batch {
			n, ok, err := p.Pop(dst)
			if err != nil || !ok {
				t.Fatalf("pop %d: %v %v", sent+i, ok, err)
			}
			want := msg(sent+i, sizes[(sent+i)%len(sizes)])
			if !bytes.Equal(dst[:n], want) {
				t.Fatalf("pop %d: %d bytes, want %d", sent+i, n, len(want))
			}
			if err := p.Push(dst[:n]); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok, err := p.Pop(dst); ok || err != nil {
			t.Fatalf("pop on an empty ring: %v %v", ok, err)
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			n, ok, err := c.Reap(dst)
			if err != nil || !ok || !bytes.Equal(dst[:n], msg(sent+i, sizes[(sent+i)%len(sizes)])) {
				t.Fatalf("reap %d: %d bytes %v %v", sent+i, n, ok, err)
			}
		}
		if _, ok, err := c.Reap(dst); ok || err != nil {
			t.Fatalf("reap on an empty ring: %v %v", ok, err)
		}
		sent += batch
	}
}

// TestFull: a producer that runs out of slots gets ErrFull, and gets
// slots again once the consumer handed them back; nothing is lost.
func TestFull(t *testing.T) {
	p, c := newPair(t, Config{Entries: 4, SlotSize: MinSlotSize})
	for i := range 4 {
		if err := c.Submit(msg(i, 40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Submit(msg(9, 40)); !errors.Is(err, ErrFull) {
		t.Fatalf("submit to a full ring: %v", err)
	}
	dst := make([]byte, 8192)
	if _, ok, err := p.Pop(dst); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := c.Submit(msg(9, 40)); !errors.Is(err, ErrFull) {
		t.Fatalf("a popped slot is free before Flush: %v", err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(msg(4, 40)); err != nil {
		t.Fatalf("after Flush: %v", err)
	}
	for i := range 4 {
		if err := p.Push(msg(i, 40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Push(msg(9, 40)); !errors.Is(err, ErrFull) {
		t.Fatalf("push to a full ring: %v", err)
	}
	if err := p.Push(make([]byte, p.Config().MaxMessage()+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized push: %v", err)
	}
	if err := c.Submit(make([]byte, p.Config().MaxMessage()+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized submit: %v", err)
	}
	if _, _, err := p.Pop(make([]byte, 10)); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("pop into a short buffer: %v", err)
	}
	if n, ok, err := p.Pop(dst); !ok || err != nil || !bytes.Equal(dst[:n], msg(1, 40)) {
		t.Fatalf("pop after a short buffer: %v %v", ok, err)
	}
}

// TestNeedWakeup: the host rings the bell exactly when the agent asked,
// and raising the flag over a pending submission says so.
func TestNeedWakeup(t *testing.T) {
	p, c := newPair(t, Config{Entries: 4, SlotSize: MinSlotSize})
	dst := make([]byte, 8192)
	if err := c.Submit(msg(0, 40)); err != nil {
		t.Fatal(err)
	}
	if n := p.DrainBell(); n != 0 {
		t.Fatalf("bell rang %d times without NEED_WAKEUP", n)
	}
	if !p.SetNeedWakeup(true) {
		t.Fatal("SetNeedWakeup(true) missed a pending submission")
	}
	p.SetNeedWakeup(false)
	p.Pop(dst)
	p.Flush()
	if p.SetNeedWakeup(true) {
		t.Fatal("SetNeedWakeup(true) reports work on an empty ring")
	}
	if err := c.Submit(msg(1, 40)); err != nil {
		t.Fatal(err)
	}
	fds := []unix.PollFd{{Fd: int32(p.Bell()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 1000); n != 1 || err != nil {
		t.Fatalf("bell not readable: %d %v", n, err)
	}
	if n := p.DrainBell(); n != 1 {
		t.Fatalf("bell rang %d times, want 1", n)
	}
}

// TestHostWait: Wait sleeps until the agent publishes, is woken by the
// bell only because it raised HOST_WAITING, and is bounded.
func TestHostWait(t *testing.T) {
	p, c := newPair(t, Config{Entries: 4, SlotSize: MinSlotSize})
	t0 := time.Now()
	if ok, err := c.Wait(20 * time.Millisecond); ok || err != nil {
		t.Fatalf("wait on nothing: %v %v", ok, err)
	}
	if d := time.Since(t0); d < 15*time.Millisecond || d > 5*time.Second {
		t.Fatalf("wait of 20ms took %v", d)
	}
	if c.cq.flags.Load() != 0 {
		t.Fatal("HOST_WAITING left raised")
	}
	done := make(chan error, 1)
	go func() {
		ok, err := c.Wait(10 * time.Second)
		if err == nil && !ok {
			err = errors.New("woke with nothing ready")
		}
		done <- err
	}()
	for c.cq.flags.Load()&HostWaiting == 0 { // the waiter raised its flag
		time.Sleep(time.Millisecond)
	}
	if err := p.Push(msg(0, 40)); err != nil {
		t.Fatal(err)
	}
	p.Flush()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait not woken by a completion")
	}
}

// TestHostileIndices: every impossible index or length the host can write
// is reported as ErrCorrupt, sticky, and nothing is read.
func TestHostileIndices(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(c *Client)
		agent func(p *Pair) error
	}{
		{"producer too far ahead", func(c *Client) { c.sq.producer.Store(5) }, wakeErr},
		{"producer far behind", func(c *Client) { c.sq.producer.Store(1 << 31) }, wakeErr},
		{"producer index ahead of the slot's sequence", func(c *Client) { c.sq.producer.Store(1) }, wakePopErr},
		{"sequence word of another turn", func(c *Client) {
			c.Submit(msg(0, 40))
			binary.LittleEndian.PutUint32(c.sq.slot(0)[slotSeq:], 5)
			c.sq.producer.Store(1)
		}, wakePopErr},
		{"zero length", func(c *Client) {
			c.Submit(msg(0, 40))
			binary.LittleEndian.PutUint32(c.sq.slot(0), 0)
		}, popErr},
		{"length beyond the slot", func(c *Client) {
			c.Submit(msg(0, 40))
			binary.LittleEndian.PutUint32(c.sq.slot(0), MinSlotSize-SlotHeader+1)
		}, popErr},
		{"huge length", func(c *Client) {
			c.Submit(msg(0, 40))
			binary.LittleEndian.PutUint32(c.sq.slot(0), ^uint32(0))
		}, popErr},
		{"completion consumer ahead", func(c *Client) { c.cq.consumer.Store(3) }, fillCQ},
		{"completion consumer far behind", func(c *Client) { c.cq.consumer.Store(1 << 31) }, fillCQ},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, c := newPair(t, Config{Entries: 4, SlotSize: MinSlotSize})
			tc.spoil(c)
			if err := tc.agent(p); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
			if _, _, err := p.Pop(make([]byte, 8192)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not sticky: %v", err)
			}
			if err := p.Flush(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flush after corruption: %v", err)
			}
		})
	}
}

// wakeErr raises NEED_WAKEUP, which loads the producer index.
func wakeErr(p *Pair) error {
	p.SetNeedWakeup(true)
	return p.Err()
}

// wakePopErr pops what a refresh of the producer index announced.
func wakePopErr(p *Pair) error {
	p.SetNeedWakeup(true)
	return popErr(p)
}

func popErr(p *Pair) error {
	_, _, err := p.Pop(make([]byte, 8192))
	return err
}

func fillCQ(p *Pair) error {
	for i := range 5 {
		if err := p.Push(msg(i, 40)); err != nil {
			return err
		}
	}
	return nil
}

// TestAttachChecks: the host refuses a memfd that is not a sealed ring of
// a valid layout, and closes what it was given.
func TestAttachChecks(t *testing.T) {
	before := openFDs(t)
	unsealed := func() int {
		fd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		unix.Ftruncate(fd, int64(Fit(0, 0).MapSize()))
		return fd
	}
	bell := func() int {
		a, h, err := newBell()
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(a)
		return h
	}
	if _, err := Attach(unsealed(), bell()); !errors.Is(err, ErrLayout) {
		t.Fatalf("unsealed memfd: %v", err)
	}
	fd := unsealed()
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
	if _, err := Attach(fd, bell()); !errors.Is(err, ErrLayout) {
		t.Fatalf("memfd without a control page: %v", err)
	}
	p, err := New(Fit(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Attach(p.TakeHostFDs())
	if err != nil {
		t.Fatal(err)
	}
	if c.Config() != Fit(0, 0) {
		t.Fatalf("attached %+v, created %+v", c.Config(), Fit(0, 0))
	}
	c.Close()
	p.Close()
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open before, %d after", before, after)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

func TestFit(t *testing.T) {
	for _, tc := range []struct{ e, s uint32 }{{0, 0}, {1, 1}, {3, 5000}, {64, 4160}, {1 << 20, 1 << 20}, {100, 4161}} {
		c := Fit(tc.e, tc.s)
		if err := c.Check(); err != nil {
			t.Errorf("Fit(%d, %d) = %+v: %v", tc.e, tc.s, c, err)
		}
	}
	if c := Fit(0, 0); c.Entries != DefaultEntries || c.SlotSize != DefaultSlotSize {
		t.Errorf("default %+v", c)
	}
	if c := Fit(100, 0); c.Entries != 128 {
		t.Errorf("Fit(100) = %d entries", c.Entries)
	}
}

// TestSequenceWordAheadOfTheIndex: the agent takes a submission as soon as
// its slot's sequence word is written, before the host publishes the
// producer index; the index, when it comes, lagging behind is no
// corruption, and a check before sleeping sees nothing pending.
func TestSequenceWordAheadOfTheIndex(t *testing.T) {
	p, c := newPair(t, Config{Entries: 4, SlotSize: MinSlotSize})
	dst := make([]byte, p.Config().MaxMessage())
	for i := range 6 { // wraps the ring
		c.sq.put(msg(i, 40))
		n, ok, err := p.Pop(dst)
		if err != nil || !ok || !bytes.Equal(dst[:n], msg(i, 40)) {
			t.Fatalf("message %d: ok %v err %v", i, ok, err)
		}
		if _, ok, err := p.Pop(dst); ok || err != nil {
			t.Fatalf("after message %d: a second pop gave ok %v err %v", i, ok, err)
		}
		if p.SetNeedWakeup(true) {
			t.Fatalf("after message %d: pending with the index behind", i)
		}
		if err := p.Err(); err != nil {
			t.Fatalf("after message %d: %v", i, err)
		}
		p.SetNeedWakeup(false)
		if i%2 == 1 {
			c.sq.publish()
		}
	}
}
