package link_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

// pump drives two endpoints over a mem pair from one goroutine with virtual
// time: it moves datagrams until both are quiet, then jumps to the next
// deadline. It is the shape of the simulator's driver.
type pump struct {
	t      testing.TB
	now    time.Duration
	a, b   *link.Endpoint
	pa, pb *mem.Port
	obuf   []byte
	ibuf   []byte
	// cutA and cutB drop every datagram that end writes.
	cutA, cutB bool
	// tap, when set, sees every datagram a end writes (before the wire).
	tapA, tapB func([]byte)
	// recvA and recvB get every message the ends deliver.
	recvA, recvB func([]byte)
	events       []string
}

// testConfig is the default config without packing: most tests here are
// about datagrams, one message each (packing has tests of its own).
func testConfig(session uint64) link.Config {
	c := link.DefaultConfig()
	c.Session = session
	c.Pack = false
	return c
}

func newPump(t testing.TB, mc mem.Config, ca, cb link.Config) *pump {
	t.Helper()
	pa, pb, err := mem.Pair(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
	p := &pump{t: t, pa: pa, pb: pb, obuf: make([]byte, 1<<16), ibuf: make([]byte, 1<<16)}
	if p.a, err = link.NewEndpoint(ca, 0); err != nil {
		t.Fatal(err)
	}
	if p.b, err = link.NewEndpoint(cb, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pump) flush(e *link.Endpoint, port *mem.Port, tap func([]byte), cut bool) int {
	n := 0
	for {
		k, ok := e.Output(p.now, p.obuf)
		if !ok {
			return n
		}
		n++
		if tap != nil {
			tap(p.obuf[:k])
		}
		if !cut {
			if err := port.WriteDatagram(p.obuf[:k]); err != nil {
				p.t.Fatalf("write: %v", err)
			}
		}
	}
}

func (p *pump) drain(e *link.Endpoint, port *mem.Port, recv func([]byte), name string) int {
	n := 0
	for {
		k, ok, err := port.TryReadDatagram(p.ibuf)
		if err != nil {
			p.t.Fatalf("read: %v", err)
		}
		if !ok {
			break
		}
		n++
		if err := e.Input(p.now, p.ibuf[:k]); err != nil {
			p.t.Fatalf("%s: input of a datagram from an honest peer: %v", name, err)
		}
	}
	for recv != nil { // without a receiver, messages stay queued
		msg, ok := e.Receive()
		if !ok {
			break
		}
		recv(msg)
	}
	p.pollEvents(e, name)
	return n
}

func (p *pump) pollEvents(e *link.Endpoint, name string) {
	for {
		ev, ok := e.PollEvent()
		if !ok {
			return
		}
		p.events = append(p.events, name+": "+ev.String())
	}
}

// step moves datagrams both ways once; when nothing moved it advances
// virtual time to the next deadline. It returns the datagrams moved.
func (p *pump) step() int {
	moved := p.flush(p.a, p.pa, p.tapA, p.cutA)
	moved += p.drain(p.b, p.pb, p.recvB, "b")
	moved += p.flush(p.b, p.pb, p.tapB, p.cutB)
	moved += p.drain(p.a, p.pa, p.recvA, "a")
	if moved == 0 {
		next := min(p.a.NextDeadline(), p.b.NextDeadline())
		if next <= p.now {
			next = p.now + time.Millisecond
		}
		p.now = next
		p.a.Tick(p.now)
		p.b.Tick(p.now)
		p.pollEvents(p.a, "a")
		p.pollEvents(p.b, "b")
	}
	return moved
}

// expectNone fails on any message.
func expectNone(t testing.TB, name string) func([]byte) {
	return func(msg []byte) { t.Fatalf("%s: unexpected message of %d bytes", name, len(msg)) }
}

// until steps until cond holds, failing after limit of virtual time.
func (p *pump) until(limit time.Duration, what string, cond func() bool) {
	p.t.Helper()
	end := p.now + limit
	for steps := 0; !cond(); steps++ {
		if p.now > end || steps > 50_000_000 {
			p.t.Fatalf("%s: not reached by %v (%d steps); events: %v", what, p.now, steps, p.events)
		}
		p.step()
	}
}

func (p *pump) waitUp() {
	p.t.Helper()
	p.until(10*time.Second, "link up", func() bool { return p.a.Up() && p.b.Up() })
}

// stream checks that messages made by msgOf arrive complete, in order and
// exactly once, counting them.
type stream struct {
	t    testing.TB
	name string
	n    int // messages to send
	size func(i int) int
	sent int
	got  int
	buf  []byte
}

func newStream(t testing.TB, name string, n int, size func(int) int) *stream {
	return &stream{t: t, name: name, n: n, size: size, buf: make([]byte, 0, 1<<17)}
}

// message i: its index, then bytes derived from it.
func (s *stream) message(i int) []byte {
	n := max(8, s.size(i))
	b := s.buf[:n]
	binary.BigEndian.PutUint64(b, uint64(i))
	for j := 8; j < n; j++ {
		b[j] = byte(i*31 + j*7)
	}
	return b
}

// fill sends until the endpoint pushes back or the stream is done.
func (s *stream) fill(now time.Duration, e *link.Endpoint) {
	for s.sent < s.n {
		err := e.Send(now, s.message(s.sent))
		if errors.Is(err, link.ErrBackpressure) || errors.Is(err, link.ErrDown) {
			return
		}
		if err != nil {
			s.t.Fatalf("%s: send %d: %v", s.name, s.sent, err)
		}
		s.sent++
	}
}

func (s *stream) check(msg []byte) {
	if err := s.verify(msg); err != nil {
		s.t.Fatalf("%s: %v", s.name, err)
	}
}

func (s *stream) verify(msg []byte) error {
	if len(msg) < 8 {
		return fmt.Errorf("message %d: %d bytes", s.got, len(msg))
	}
	i := int(binary.BigEndian.Uint64(msg))
	if i != s.got {
		return fmt.Errorf("got message %d, want %d (duplicate or out of order)", i, s.got)
	}
	want := s.message(i)
	if string(msg) != string(want) {
		return fmt.Errorf("message %d: %d bytes differ from the %d sent", i, len(msg), len(want))
	}
	s.got++
	if s.got > s.n {
		return fmt.Errorf("more messages than sent")
	}
	return nil
}

func (s *stream) done() bool { return s.got == s.n }
