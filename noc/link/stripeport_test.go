package link_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

// cutPort is a channel that can be cut: its writes vanish, as on a
// channel whose NIC or queue died.
type cutPort struct {
	noc.Port
	cut  atomic.Bool
	fail atomic.Bool // its writes fail with errWrite
}

var errWrite = errors.New("channel write failed")

func (p *cutPort) WriteDatagram(b []byte) error {
	if p.cut.Load() {
		return nil
	}
	if p.fail.Load() {
		return errWrite
	}
	return p.Port.WriteDatagram(b)
}

// stripedMemPair returns two striped ports over k mem pairs; the channels
// of a are returned for cutting.
func stripedMemPair(t testing.TB, k int, mc mem.Config) (a, b *link.StripedPort, chA, chB []*cutPort) {
	t.Helper()
	var pa, pb []noc.Port
	for range k {
		x, y, err := mem.Pair(mc)
		if err != nil {
			t.Fatal(err)
		}
		cx, cy := &cutPort{Port: x}, &cutPort{Port: y}
		chA, chB = append(chA, cx), append(chB, cy)
		pa, pb = append(pa, cx), append(pb, cy)
	}
	var err error
	if a, err = link.NewStripedPort("a", pa, link.StripeConfig{Channels: k, Window: 64, Reorder: 256,
		ReorderHold: 2 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond, DeadInterval: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if b, err = link.NewStripedPort("b", pb, link.StripeConfig{Channels: k, Window: 64, Reorder: 256,
		ReorderHold: 2 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond, DeadInterval: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return a, b, chA, chB
}

// TestStripedLinkSurvivesAChannel runs a reliable link over three channels,
// kills one in the middle of a stream, and checks that every message
// arrives once, in order, without the link going down.
func TestStripedLinkSurvivesAChannel(t *testing.T) {
	const k, total = 3, 3000
	pa, pb, chA, chB := stripedMemPair(t, k, mem.Config{Queue: 4096})
	cfa, cfb := connConfig(1), connConfig(2)
	cfa.MTU, cfb.MTU = pa.MTU(), pb.MTU()
	ca, err := link.NewConn(pa, cfa)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := link.NewConn(pb, cfb)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ca.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pa.Agreed(); n != k {
		t.Fatalf("agreed on %d channels, want %d", n, k)
	}
	// Every channel up on both sides before one is cut: the link is up
	// once any channel carried its handshake, and a channel never up
	// would be "dropped" with no Downs count below.
	waitChannelsUp(t, pa, pb)
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for i := range total {
			n, err := cb.Receive(ctx, buf)
			if err != nil {
				got <- err
				return
			}
			if v := binary.BigEndian.Uint64(buf[:n]); v != uint64(i) {
				got <- errors.New("out of order")
				return
			}
		}
		got <- nil
	}()
	msg := make([]byte, 1000)
	for i := range total {
		if i == total/3 {
			chA[1].cut.Store(true)
			chB[1].cut.Store(true)
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		if err := ca.Send(ctx, msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if s := ca.Stats(); s.Downs != 0 {
		t.Fatalf("the link went down %d times", s.Downs)
	}
	// The cut channel is dropped within its dead interval.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, cs := pa.Stats()
		if !cs[1].Up && cs[0].Up && cs[2].Up {
			if cs[1].Downs == 0 {
				t.Fatal("channel 1 down without a Downs count")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("channel states %+v: want channel 1 dropped, 0 and 2 up", cs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, cs := pb.Stats()
	var rx uint64
	for _, c := range cs {
		rx += c.RxDatagrams
	}
	if cs[0].RxDatagrams == 0 || cs[2].RxDatagrams == 0 || cs[1].RxDatagrams == 0 {
		t.Fatalf("per-channel rx %+v: traffic was not striped", cs)
	}
	// Healed, the channel rejoins.
	chA[1].cut.Store(false)
	chB[1].cut.Store(false)
	for {
		_, cs := pa.Stats()
		if cs[1].Up {
			break
		}
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("channel 1 did not rejoin")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStripedPortDeadlineAndClose(t *testing.T) {
	pa, pb, _, _ := stripedMemPair(t, 2, mem.Config{})
	defer pb.Close()
	buf := make([]byte, 1500)
	pa.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := pa.ReadDatagram(buf); !errors.Is(err, context.DeadlineExceeded) && !isDeadline(err) {
		t.Fatalf("read past the deadline: %v", err)
	}
	pa.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := pa.ReadDatagram(buf)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := pa.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, noc.ErrPortClosed) {
			t.Fatalf("read after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
}

func isDeadline(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// waitChannelsUp waits (5 s at most) until every channel of a and b is up.
func waitChannelsUp(t *testing.T, a, b *link.StripedPort) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		_, csa := a.Stats()
		_, csb := b.Stats()
		if !slices.ContainsFunc(csa, func(c link.ChannelStats) bool { return !c.Up }) &&
			!slices.ContainsFunc(csb, func(c link.ChannelStats) bool { return !c.Up }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("channels not all up: %+v %+v", csa, csb)
		}
	}
}

// TestStripedPortCountsWriteErrors: a channel's write error is returned
// (wrapped) and counted; a write that succeeds is neither.
func TestStripedPortCountsWriteErrors(t *testing.T) {
	pa, pb, chA, _ := stripedMemPair(t, 2, mem.Config{Queue: 64})
	defer pa.Close()
	defer pb.Close()
	waitChannelsUp(t, pa, pb)
	errs := func() uint64 {
		c, err := pa.Counters()
		if err != nil {
			t.Fatal(err)
		}
		return c["stripe_write_errors"]
	}
	if err := pa.WriteDatagram([]byte("x")); err != nil {
		t.Fatalf("write on live channels: %v", err)
	}
	if n := errs(); n != 0 {
		t.Fatalf("%d write errors after a good write", n)
	}
	for _, c := range chA {
		c.fail.Store(true)
	}
	if err := pa.WriteDatagram([]byte("y")); !errors.Is(err, errWrite) {
		t.Fatalf("write on failing channels: %v, want errWrite", err)
	}
	if n := errs(); n != 1 {
		t.Fatalf("%d write errors after one failed write, want 1", n)
	}
}

// TestStripedUDPLinkSurvivesAChannelClosing runs a reliable link over four
// UDP loopback channels, the port's reader polling the sockets itself,
// and closes one channel's socket at the receiver in the middle of a
// stream of 4 KiB messages: every message arrives once and in order, the
// link stays up, and both ends drop the dead channel.
func TestStripedUDPLinkSurvivesAChannelClosing(t *testing.T) {
	const k, total = 4, 4000
	ca, cb := udpChannels(t, k, 9000)
	cfg := link.StripeConfig{Channels: k, Window: 64, Reorder: 256, ReorderHold: 2 * time.Millisecond,
		HeartbeatInterval: 10 * time.Millisecond, DeadInterval: 100 * time.Millisecond}
	var logged lockedBuffer
	pa, err := link.NewStripedPort("a", ca, cfg, link.WithChannelLog(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := link.NewStripedPort("b", cb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfa, cfb := connConfig(1), connConfig(2)
	cfa.MTU, cfb.MTU = pa.MTU(), pb.MTU()
	cfa.MaxMessage, cfb.MaxMessage = 4096, 4096
	conA, err := link.NewConn(pa, cfa)
	if err != nil {
		t.Fatal(err)
	}
	defer conA.Close()
	conB, err := link.NewConn(pb, cfb)
	if err != nil {
		t.Fatal(err)
	}
	defer conB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conA.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	waitChannelsUp(t, pa, pb)
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for i := range total {
			n, err := conB.Receive(ctx, buf)
			if err != nil {
				got <- err
				return
			}
			if n != 4096 || binary.BigEndian.Uint64(buf) != uint64(i) || buf[4095] != byte(i) {
				got <- fmt.Errorf("message %d: %d bytes, number %d", i, n, binary.BigEndian.Uint64(buf))
				return
			}
		}
		got <- nil
	}()
	msg := make([]byte, 4096)
	for i := range total {
		if i == total/4 {
			cb[2].Close() // the receiver's socket of channel 2 is gone
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		msg[4095] = byte(i)
		if err := conA.Send(ctx, msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if s := conA.Stats(); s.Downs != 0 {
		t.Fatalf("the link went down %d times", s.Downs)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, csa := pa.Stats()
		_, csb := pb.Stats()
		if !csa[2].Up && !csb[2].Up && csa[2].Downs > 0 {
			for _, c := range []int{0, 1, 3} {
				if !csa[c].Up || !csb[c].Up {
					t.Fatalf("channel %d dropped too: %+v %+v", c, csa[c], csb[c])
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("channel 2 not dropped: %+v / %+v", csa[2], csb[2])
		}
	}
	c, err := pa.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c["stripe_channel_downs"] == 0 {
		t.Fatalf("counters %v: no channel down counted", c)
	}
	for _, want := range []string{`msg="link channel up" port=a channel=2`, `msg="link channel down" port=a channel=2`, "reason=dead"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log has no %q:\n%s", want, logged.String())
		}
	}
}

// lockedBuffer is a log destination written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// flushPort is a channel that batches: Flush counts its calls and fails
// while fail is set.
type flushPort struct {
	noc.Port
	flushes atomic.Int32
	fail    atomic.Bool
}

var errFlush = errors.New("channel flush failed")

func (p *flushPort) Flush() error {
	p.flushes.Add(1)
	if p.fail.Load() {
		return errFlush
	}
	return nil
}

// TestStripedPortFlushesEveryChannel: Flush flushes each channel that
// batches, once; it succeeds while they do, and returns a failing one's
// error, wrapped.
func TestStripedPortFlushesEveryChannel(t *testing.T) {
	const k = 3
	var chans []*flushPort
	var ports []noc.Port
	for range k {
		x, y, err := mem.Pair(mem.Config{Queue: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer y.Close()
		c := &flushPort{Port: x}
		chans, ports = append(chans, c), append(ports, c)
	}
	p, err := link.NewStripedPort("a", ports, link.StripeConfig{Channels: k, Window: 64, Reorder: 256,
		ReorderHold: 2 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond, DeadInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Flush(); err != nil {
		t.Fatalf("flush of channels that flush: %v", err)
	}
	for i, c := range chans {
		if n := c.flushes.Load(); n < 1 {
			t.Fatalf("channel %d flushed %d times", i, n)
		}
	}
	chans[1].fail.Store(true)
	if err := p.Flush(); !errors.Is(err, errFlush) {
		t.Fatalf("flush with channel 1 failing: %v, want errFlush", err)
	}
}

// TestStripedPortWaitRoundsUp: the reader's wait on its ready set lasts
// at least what it was given, rounded up to epoll's milliseconds, and no
// longer when nothing comes: a wait of 1 ns (what is left of a read
// deadline) returns with nothing ready, it does not wait for traffic
// (rounded down it would be -1 ms, epoll's "no timeout").
func TestStripedPortWaitRoundsUp(t *testing.T) {
	// One end only: the far ends of its channels are left alone, so
	// nothing ever comes in.
	var chans []noc.Port
	for range 2 {
		x, y, err := mem.Pair(mem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer y.Close()
		chans = append(chans, x)
	}
	pa, err := link.NewStripedPort("a", chans, link.StripeConfig{Channels: 2, Window: 64, Reorder: 256,
		ReorderHold: 2 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond, DeadInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, time.Millisecond + 1} {
		done := make(chan error, 1)
		go func() { done <- pa.Wait(d) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("wait of %v: %v", d, err)
			}
		case <-time.After(30 * time.Second):
			// A wait still blocked this long waits without a timeout.
			pa.Close() // (wakes it)
			t.Fatalf("a wait of %v with nothing ready did not return", d)
		}
	}
}

// TestStripedPortOutOfDescriptors: with no descriptor left, NewStripedPort
// fails at its first need of one, the epoll set, says so, and leaves no
// descriptor open; with them back, it works.
func TestStripedPortOutOfDescriptors(t *testing.T) {
	channels := func() []noc.Port { // (a failed NewStripedPort closes its channels)
		var chans []noc.Port
		for range 2 {
			x, y, err := mem.Pair(mem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { x.Close(); y.Close() })
			chans = append(chans, x)
		}
		return chans
	}
	chans := channels()
	cfg := link.StripeConfig{Channels: 2, Window: 64, Reorder: 256,
		ReorderHold: 2 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond, DeadInterval: 100 * time.Millisecond}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// The kernel gives the lowest free descriptor: with the limit at it,
	// the next one fails with EMFILE.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	free := f.Fd()
	f.Close()
	low := old
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	_, err = link.NewStripedPort("a", chans, cfg)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "epoll:") {
		t.Fatalf("NewStripedPort with no descriptor left: %v, want the epoll set's EMFILE", err)
	}
	g, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Fd() != free {
		t.Fatalf("descriptor %d is the lowest free after the failure, was %d: one was left open", g.Fd(), free)
	}
	p, err := link.NewStripedPort("a", channels(), cfg)
	if err != nil {
		t.Fatalf("NewStripedPort with descriptors back: %v", err)
	}
	p.Close()
}
