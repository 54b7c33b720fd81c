package mem_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/mem"
)

func pair(t *testing.T, cfg mem.Config) (a, b *mem.Port) {
	t.Helper()
	a, b, err := mem.Pair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func readAll(t *testing.T, p *mem.Port) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, 2048)
	for {
		n, ok, err := p.TryReadDatagram(buf)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, append([]byte(nil), buf[:n]...))
	}
}

func write(t *testing.T, p *mem.Port, n int) {
	t.Helper()
	for i := range n {
		if err := p.WriteDatagram(fmt.Appendf(nil, "%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPerfectPairIsFIFO(t *testing.T) {
	a, b := pair(t, mem.Config{})
	write(t, a, 100)
	got := readAll(t, b)
	if len(got) != 100 {
		t.Fatalf("read %d of 100", len(got))
	}
	for i, d := range got {
		if string(d) != fmt.Sprintf("%05d", i) {
			t.Fatalf("datagram %d is %q", i, d)
		}
	}
	if len(readAll(t, a)) != 0 {
		t.Error("a received its own datagrams")
	}
	if s := a.Stats(); s.Written != 100 || s.Dropped+s.Duplicated+s.Reordered+s.Overflow != 0 {
		t.Errorf("stats %+v", s)
	}
	if s := b.Stats(); s.Read != 100 {
		t.Errorf("b read %d", s.Read)
	}
}

func TestFaultsAreSeededAndCounted(t *testing.T) {
	cfg := mem.Config{Drop: 0.2, Duplicate: 0.2, Reorder: 0.3, Seed: 42, Queue: 4096}
	run := func() ([][]byte, mem.Stats) {
		a, b := pair(t, cfg)
		write(t, a, 2000)
		return readAll(t, b), a.Stats()
	}
	got, st := run()
	again, _ := run()
	if fmt.Sprint(got) != fmt.Sprint(again) {
		t.Fatal("same seed, different deliveries")
	}
	if uint64(len(got)) != st.Written-st.Dropped+st.Duplicated {
		t.Errorf("%d delivered, stats %+v", len(got), st)
	}
	for name, v := range map[string]uint64{"dropped": st.Dropped, "duplicated": st.Duplicated, "reordered": st.Reordered} {
		if v < 250 || v > 700 {
			t.Errorf("%s %d of 2000, far from the configured rate", name, v)
		}
	}
	// Reordering is local: a datagram is overtaken by at most the next
	// three written after it.
	inversions, last := 0, -1
	for _, d := range got {
		var i int
		fmt.Sscanf(string(d), "%d", &i)
		if i < last {
			inversions++
			if last-i > 3+3 { // three places, plus duplicates of the overtakers
				t.Errorf("datagram %d arrived after %d", i, last)
			}
		}
		last = max(last, i)
	}
	if inversions == 0 {
		t.Error("nothing reordered")
	}
	cfg.Seed = 43
	if other, _ := run(); fmt.Sprint(other) == fmt.Sprint(got) {
		t.Error("different seeds, same deliveries")
	}
}

func TestQueueBound(t *testing.T) {
	a, b := pair(t, mem.Config{Queue: 10})
	write(t, a, 25)
	if got := len(readAll(t, b)); got != 10 {
		t.Errorf("read %d, queue holds 10", got)
	}
	if s := a.Stats(); s.Overflow != 15 {
		t.Errorf("overflow %d, want 15", s.Overflow)
	}
}

func TestMTUAndTruncation(t *testing.T) {
	a, b := pair(t, mem.Config{MTU: 100})
	if err := a.WriteDatagram(make([]byte, 101)); !errors.Is(err, mem.ErrTooLarge) {
		t.Errorf("oversized write: %v", err)
	}
	if err := a.WriteDatagram(bytes.Repeat([]byte{1}, 100)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, ok, err := b.TryReadDatagram(buf); n != 10 || !ok || err != nil {
		t.Errorf("truncating read: %d %v %v", n, ok, err)
	}
}

func TestDelay(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	a, b := pair(t, mem.Config{Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond, Clock: clock, Seed: 1})
	write(t, a, 50)
	if got := readAll(t, b); len(got) != 0 {
		t.Fatalf("%d datagrams before the delay", len(got))
	}
	now = now.Add(10 * time.Millisecond)
	early := len(readAll(t, b))
	now = now.Add(5 * time.Millisecond)
	late := len(readAll(t, b))
	if early+late != 50 || late == 0 {
		t.Errorf("%d within the delay, %d within the jitter", early, late)
	}
}

func TestBlockingReadDeadlineAndClose(t *testing.T) {
	a, b := pair(t, mem.Config{})
	buf := make([]byte, 64)
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := b.ReadDatagram(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past deadline: %v", err)
	}
	b.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(10 * time.Millisecond)
		a.WriteDatagram([]byte("hi"))
	}()
	if n, err := b.ReadDatagram(buf); err != nil || string(buf[:n]) != "hi" {
		t.Errorf("blocking read: %q %v", buf[:n], err)
	}
	// A deadline moved closer while a read is blocked applies at once.
	got := make(chan error, 1)
	go func() { _, err := b.ReadDatagram(buf); got <- err }()
	time.Sleep(10 * time.Millisecond)
	b.SetReadDeadline(time.Now())
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read after a moved deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("moved deadline did not wake the reader")
	}
	b.SetReadDeadline(time.Time{})
	go func() { _, err := b.ReadDatagram(buf); got <- err }()
	time.Sleep(10 * time.Millisecond)
	b.Close()
	select {
	case err := <-got:
		if !errors.Is(err, noc.ErrPortClosed) {
			t.Errorf("read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
	if err := b.WriteDatagram([]byte("x")); !errors.Is(err, noc.ErrPortClosed) {
		t.Errorf("write after Close: %v", err)
	}
	if err := a.WriteDatagram([]byte("x")); err != nil {
		t.Errorf("writing to a closed peer: %v (a wire does not know)", err)
	}
	if s := a.Stats(); s.Dropped != 1 {
		t.Errorf("datagram to a closed peer not counted dropped: %+v", s)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []mem.Config{{Drop: 1.5}, {Duplicate: -0.1}, {Reorder: 2}, {MTU: -1}, {Queue: -1}, {Delay: -1}} {
		if _, _, err := mem.Pair(c); !errors.Is(err, mem.ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func BenchmarkPairWriteRead(b *testing.B) {
	pa, pb, err := mem.Pair(mem.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer pa.Close()
	defer pb.Close()
	d := make([]byte, 128)
	buf := make([]byte, 1500)
	b.ReportAllocs()
	for b.Loop() {
		pa.WriteDatagram(d)
		pb.TryReadDatagram(buf)
	}
}
