package ctl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/ctl/ctltest"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/internal/backoff/backofftest"
	"github.com/aitherion/dpu/noc"
)

func dial(t *testing.T, path string) *ctl.Client {
	t.Helper()
	c, err := ctl.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClientReadsEveryObject(t *testing.T) {
	want := ctltest.Sample()
	_, path := ctltest.Serve(t, ctltest.NewSource(want))
	c := dial(t, path)
	ctx := testContext(t)

	check := func(name string, got, want any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	routes, err := c.Routes(ctx)
	check("routes", routes, want.Routes, err)
	links, err := c.Links(ctx)
	check("links", links, want.Links, err)
	neigh, err := c.Neighbours(ctx)
	check("neighbours", neigh, want.Neighbours, err)
	stats, err := c.Stats(ctx)
	check("stats", stats, want.Stats, err)
	topo, err := c.Topology(ctx)
	check("topology", topo, want.Topology, err)
	pc, err := c.PathCache(ctx)
	check("path cache", pc, want.PathCache, err)
	owned, err := c.OwnedPages(ctx)
	check("owned pages", owned, want.OwnedPages, err)
	gpu, err := gpuctl.Processes(ctx, c)
	check("gpu", gpu, want.GPUProcesses, err)
}

func TestEmptyDumpIsEmptyNotNil(t *testing.T) {
	_, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Snapshot{}))
	routes, err := dial(t, path).Routes(testContext(t))
	if err != nil || routes == nil || len(routes) != 0 {
		t.Fatalf("got %#v, %v; want an empty slice", routes, err)
	}
}

func TestOptionalObjectsOfAnOlderSource(t *testing.T) {
	_, path := ctltest.Serve(t, ctltest.Base(ctltest.NewSource(ctltest.Sample())))
	c := dial(t, path)
	ctx := testContext(t)
	_, err := c.PathCache(ctx)
	var e *ctl.Error
	if !errors.As(err, &e) || !errors.Is(err, syscall.EOPNOTSUPP) || e.Reason == "" {
		t.Fatalf("path cache from a base source: %v, want EOPNOTSUPP with a reason", err)
	}
	if _, err := c.OwnedPages(ctx); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("owned pages: %v", err)
	}
	if err := gpuctl.SetLimit(ctx, c, gpuctl.Limit{PID: 1}); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("gpu set-limit: %v", err)
	}
	// The same connection still serves what the source has.
	if routes, err := c.Routes(ctx); err != nil || len(routes) != 4 {
		t.Fatalf("routes after refusals: %d, %v", len(routes), err)
	}
}

func TestSetGPULimit(t *testing.T) {
	src := ctltest.NewSource(ctltest.Sample())
	_, path := ctltest.Serve(t, src)
	c := dial(t, path)
	ctx := testContext(t)
	if err := gpuctl.SetLimit(ctx, c, gpuctl.Limit{PID: 4242, MemoryLimit: 1 << 30, KernelQuota: 10}); err != nil {
		t.Fatal(err)
	}
	procs, err := gpuctl.Processes(ctx, c)
	if err != nil || procs[0].MemoryLimit != 1<<30 || procs[0].KernelQuota != 10 {
		t.Fatalf("after set-limit: %+v %v", procs, err)
	}
	err = gpuctl.SetLimit(ctx, c, gpuctl.Limit{PID: 1})
	if !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("unknown process: %v, want ESRCH", err)
	}
}

// rawConn is a control connection without the client: it sends any bytes.
type rawConn struct {
	t *testing.T
	net.Conn
	buf []byte
}

func dialRaw(t *testing.T, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, Conn: c, buf: make([]byte, ctl.MaxMessageSize+1)}
}

type reply struct {
	typ, flags uint16
	seq        uint32
	cmd        ctl.Cmd
	errno      syscall.Errno // NLMSG_ERROR only
	echo       []byte        // NLMSG_ERROR only: the echoed header
	hasReason  bool
}

func (c *rawConn) send(b []byte) {
	c.t.Helper()
	if _, err := c.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawConn) recv() reply {
	c.t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(c.buf)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	b := c.buf[:n]
	if n < 16 || int(binary.NativeEndian.Uint32(b)) != n {
		c.t.Fatalf("reply of %d bytes with nlmsg_len %d", n, binary.NativeEndian.Uint32(b))
	}
	r := reply{
		typ:   binary.NativeEndian.Uint16(b[4:]),
		flags: binary.NativeEndian.Uint16(b[6:]),
		seq:   binary.NativeEndian.Uint32(b[8:]),
	}
	switch {
	case r.typ == 2:
		r.errno = syscall.Errno(-int32(binary.NativeEndian.Uint32(b[16:])))
		r.echo = append([]byte(nil), b[20:36]...)
		r.hasReason = r.flags&0x200 != 0 && n > 36+4
	case r.typ == 0x10:
		r.cmd = ctl.Cmd(b[16])
	}
	return r
}

// msg builds a request by hand: header, command header, raw attributes.
func msg(typ, flags uint16, seq uint32, cmd ctl.Cmd, version uint8, attrs []byte) []byte {
	b := make([]byte, 20, 20+len(attrs))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	binary.NativeEndian.PutUint32(b[12:], 1)
	b[16], b[17] = byte(cmd), version
	b = append(b, attrs...)
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	return b
}

func attr(typ uint16, v []byte) []byte {
	b := make([]byte, 4, 4+len(v)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

const (
	fRequest = 0x1
	fMulti   = 0x2
	fAck     = 0x4
	fDump    = 0x300
	family   = 0x10
)

// dumpRoutes sends a route dump on c and checks its whole answer.
func (c *rawConn) dumpRoutes(seq uint32, want int) {
	c.t.Helper()
	c.send(msg(family, fRequest|fDump, seq, ctl.CmdRouteGet, 1, nil))
	for i := 0; ; i++ {
		r := c.recv()
		if r.seq != seq {
			c.t.Fatalf("reply seq %d, want %d", r.seq, seq)
		}
		if r.typ == 3 {
			if i != want {
				c.t.Fatalf("dump of %d routes, want %d", i, want)
			}
			return
		}
		if r.typ != family || r.flags&fMulti == 0 || r.cmd != ctl.CmdRouteGet {
			c.t.Fatalf("dump message %d: %+v", i, r)
		}
	}
}

func TestMalformedRequestsKeepTheConnection(t *testing.T) {
	srv, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()), ctl.WithLimits(ctl.Limits{MaxMessage: 1024}))
	_ = srv
	raw := dialRaw(t, path)
	other := dial(t, path)
	ctx := testContext(t)

	good := msg(family, fRequest|fDump, 9, ctl.CmdRouteGet, 1, nil)
	withLen := func(b []byte, l uint32) []byte {
		b = append([]byte(nil), b...)
		binary.NativeEndian.PutUint32(b, l)
		return b
	}
	cases := []struct {
		name  string
		b     []byte
		errno syscall.Errno
		seq   uint32
	}{
		{"shorter than a header", []byte{1, 2, 3, 4, 5, 6, 7, 8}, syscall.EINVAL, 0},
		{"length beyond the datagram", withLen(good, 1000), syscall.EINVAL, 9},
		{"length below a header", withLen(good, 4), syscall.EINVAL, 9},
		{"two messages in one datagram", append(append([]byte(nil), good...), good...), syscall.EINVAL, 9},
		{"not a request", msg(family, fDump, 10, ctl.CmdRouteGet, 1, nil), syscall.EINVAL, 10},
		{"unknown message type", msg(0x20, fRequest, 11, ctl.CmdRouteGet, 1, nil), syscall.EOPNOTSUPP, 11},
		{"unknown command", msg(family, fRequest|fDump, 12, 99, 1, nil), syscall.EOPNOTSUPP, 12},
		{"command header version 2", msg(family, fRequest|fDump, 13, ctl.CmdRouteGet, 2, nil), syscall.EOPNOTSUPP, 13},
		{"no command header", withLen(msg(family, fRequest, 14, 0, 0, nil)[:16], 16), syscall.EINVAL, 14},
		{"attribute longer than the message", msg(family, fRequest|fDump, 15, ctl.CmdRouteGet, 1, []byte{200, 0, 1, 0}), syscall.EINVAL, 15},
		{"truncated attribute", msg(family, fRequest|fDump, 16, ctl.CmdRouteGet, 1, []byte{8, 0}), syscall.EINVAL, 16},
		{"dump command without NLM_F_DUMP", msg(family, fRequest, 17, ctl.CmdRouteGet, 1, nil), syscall.EOPNOTSUPP, 17},
		{"subscribe without a group", msg(family, fRequest|fAck, 18, ctl.CmdSubscribe, 1, nil), syscall.EINVAL, 18},
		{"subscribe to no such group", msg(family, fRequest|fAck, 19, ctl.CmdSubscribe, 1, attr(1, u32(9))), syscall.EINVAL, 19},
		{"subscribe group of the wrong width", msg(family, fRequest|fAck, 20, ctl.CmdSubscribe, 1, attr(1, []byte{1, 0})), syscall.EINVAL, 20},
		{"an event sent to the agent", msg(family, fRequest, 21, ctl.CmdEvent, 1, nil), syscall.EINVAL, 21},
		{"gpu set-limit without pid", msg(family, fRequest|fAck, 22, ctl.CmdGPUSetLimit, 1, nil), syscall.EINVAL, 22},
		{"request beyond the message limit", msg(family, fRequest|fDump, 23, ctl.CmdRouteGet, 1, attr(99, make([]byte, 2000))), syscall.EMSGSIZE, 23},
	}
	for i, tc := range cases {
		raw.send(tc.b)
		r := raw.recv()
		if r.typ != 2 || r.errno != tc.errno || r.seq != tc.seq || !r.hasReason {
			t.Errorf("%s: got type %d errno %v seq %d reason %v; want NLMSG_ERROR %v seq %d with a reason",
				tc.name, r.typ, r.errno, r.seq, r.hasReason, tc.errno, tc.seq)
		}
		if len(tc.b) >= 16 && string(r.echo) != string(tc.b[:16]) {
			t.Errorf("%s: echoed header % x, want % x", tc.name, r.echo, tc.b[:16])
		}
		// The connection, and every other one, keeps working.
		raw.dumpRoutes(uint32(100+i), 4)
		if _, err := other.Links(ctx); err != nil {
			t.Fatalf("after %s: other connection: %v", tc.name, err)
		}
	}

	// Control messages are dropped, or acknowledged on request.
	raw.send(withLen(msg(1, fRequest, 50, 0, 0, nil)[:16], 16)) // NLMSG_NOOP
	raw.send(withLen(msg(1, fRequest|fAck, 51, 0, 0, nil)[:16], 16))
	if r := raw.recv(); r.typ != 2 || r.errno != 0 || r.seq != 51 {
		t.Fatalf("acked NOOP: %+v", r)
	}
	raw.dumpRoutes(52, 4) // and nothing was sent for the unacked NOOP
}

func TestAckOnRequest(t *testing.T) {
	_, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	raw := dialRaw(t, path)
	raw.send(msg(family, fRequest|fAck, 7, ctl.CmdSubscribe, 1, attr(1, u32(ctl.MonitorGroup))))
	if r := raw.recv(); r.typ != 2 || r.errno != 0 || r.seq != 7 || r.flags&0x100 == 0 {
		t.Fatalf("subscribe ack: %+v", r)
	}
	raw.send(msg(family, fRequest|fAck, 8, ctl.CmdUnsubscribe, 1, attr(1, u32(ctl.MonitorGroup))))
	if r := raw.recv(); r.typ != 2 || r.errno != 0 || r.seq != 8 {
		t.Fatalf("unsubscribe ack: %+v", r)
	}
	// Stats is one message, not a dump; as a dump it is one message and DONE.
	raw.send(msg(family, fRequest, 9, ctl.CmdStatsGet, 1, nil))
	if r := raw.recv(); r.typ != family || r.flags&fMulti != 0 || r.cmd != ctl.CmdStatsGet {
		t.Fatalf("stats: %+v", r)
	}
	raw.send(msg(family, fRequest|fDump, 10, ctl.CmdStatsGet, 1, nil))
	if r := raw.recv(); r.typ != family || r.flags&fMulti == 0 {
		t.Fatalf("stats dump: %+v", r)
	}
	if r := raw.recv(); r.typ != 3 || r.seq != 10 {
		t.Fatalf("stats dump end: %+v", r)
	}
}

func manyRoutes(n int) []ctl.Route {
	rs := make([]ctl.Route, n)
	for i := range rs {
		rs[i] = ctl.Route{Dst: noc.NodeID(i), Port: fmt.Sprintf("p%d", i%8), PortIndex: noc.PortID(i % 8),
			NextHop: noc.NodeID(i % 97), Hops: 1 + i%13}
	}
	return rs
}

func TestDumpSpansManyMessages(t *testing.T) {
	const n = 5000
	snap := ctltest.Sample()
	snap.Routes = manyRoutes(n)
	_, path := ctltest.Serve(t, ctltest.NewSource(snap))

	raw := dialRaw(t, path)
	raw.dumpRoutes(1, n)

	got, err := dial(t, path).Routes(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, snap.Routes) {
		t.Fatalf("dump of %d routes differs from the source's %d", len(got), n)
	}
}

func TestReplyBeyondTheMessageLimit(t *testing.T) {
	snap := ctltest.Sample()
	for i := range 40 {
		snap.Links[1].Counters = append(snap.Links[1].Counters, ctl.Counter{Name: fmt.Sprintf("dropped_cpu%d", i), Value: 1})
	}
	_, path := ctltest.Serve(t, ctltest.NewSource(snap), ctl.WithLimits(ctl.Limits{MaxMessage: 512}))
	c := dial(t, path)
	ctx := testContext(t)
	if _, err := c.Links(ctx); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("links: %v, want EMSGSIZE", err)
	}
	if rs, err := c.Routes(ctx); err != nil || len(rs) != 4 {
		t.Fatalf("routes after EMSGSIZE: %v %v", rs, err)
	}
}

func TestConcurrentClients(t *testing.T) {
	snap := ctltest.Sample()
	snap.Routes = manyRoutes(300)
	_, path := ctltest.Serve(t, ctltest.NewSource(snap))
	shared := dial(t, path)
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := shared
			if i%2 == 0 {
				own, err := ctl.Dial(path)
				if err != nil {
					errs <- err
					return
				}
				defer own.Close()
				c = own
			}
			for range 10 {
				rs, err := c.Routes(ctx)
				if err == nil && len(rs) != 300 {
					err = fmt.Errorf("%d routes", len(rs))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMonitorDelivery(t *testing.T) {
	srv, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	c := dial(t, path)
	ctx, cancel := context.WithCancel(testContext(t))
	got := make(chan ctl.Event, 8)
	done := make(chan error, 1)
	go func() {
		done <- c.Monitor(ctx, func(ev ctl.Event) error { got <- ev; return nil })
	}()
	waitFor(t, "subscriber", func() bool { return srv.Subscribers() == 1 })

	at := time.Unix(1700000000, 5)
	sent := []ctl.Event{
		{Kind: ctl.EventLinkDown, Time: at, Node: 1, Port: "p0", Reason: "heartbeat lost"},
		{Kind: ctl.EventRouteChange, Time: at, Node: 2, Port: "p1", NextHop: 3, Hops: 3},
		{Kind: ctl.EventHostFault, Time: at, Node: 0, Reason: "pin held past 10ms"},
		{Kind: 77, Name: "page-migrated", Time: at, Node: 5},
	}
	for _, ev := range sent {
		srv.Publish(ev)
	}
	for i, want := range sent {
		want.Name = want.KindName()
		select {
		case ev := <-got:
			if !reflect.DeepEqual(ev, want) {
				t.Errorf("event %d:\n got %+v\nwant %+v", i, ev, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not delivered", i)
		}
	}
	// Publish stamps events without a time.
	srv.Publish(ctl.Event{Kind: ctl.EventLinkUp, Node: 1})
	if ev := <-got; ev.Time.IsZero() || ev.Kind != ctl.EventLinkUp || ev.Name != "link-up" {
		t.Errorf("unstamped event: %+v", ev)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("monitor ended with %v, want context.Canceled", err)
	}
	waitFor(t, "subscriber to leave", func() bool { return srv.Subscribers() == 0 })
	// The client's own connection was never part of it.
	if _, err := c.Routes(testContext(t)); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorCallbackErrorEndsIt(t *testing.T) {
	srv, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()))
	stop := errors.New("enough")
	done := make(chan error, 1)
	go func() {
		done <- dial(t, path).Monitor(testContext(t), func(ctl.Event) error { return stop })
	}()
	waitFor(t, "subscriber", func() bool { return srv.Subscribers() == 1 })
	srv.Publish(ctl.Event{Kind: ctl.EventLinkUp})
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("got %v", err)
	}
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	srv, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()),
		ctl.WithLimits(ctl.Limits{MonitorQueue: 4, WriteTimeout: 200 * time.Millisecond}))

	// The slow member subscribes and then reads nothing.
	slow := dialRaw(t, path)
	slow.send(msg(family, fRequest|fAck, 1, ctl.CmdSubscribe, 1, attr(1, u32(ctl.MonitorGroup))))
	if r := slow.recv(); r.typ != 2 || r.errno != 0 {
		t.Fatalf("subscribe: %+v", r)
	}

	// The fast member takes every event before the next is published.
	got := make(chan ctl.Event, 1)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	fastDone := make(chan error, 1)
	go func() {
		fastDone <- dial(t, path).Monitor(ctx, func(ev ctl.Event) error { got <- ev; return nil })
	}()
	waitFor(t, "two subscribers", func() bool { return srv.Subscribers() == 2 })

	const limit = 20000
	published := 0
	for ; published < limit && srv.Subscribers() == 2; published++ {
		start := time.Now()
		srv.Publish(ctl.Event{Kind: ctl.EventRouteChange, Node: noc.NodeID(published), Reason: "padding the socket buffer of a member that reads nothing"})
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Publish blocked for %v", d)
		}
		select {
		case ev := <-got:
			if ev.Node != noc.NodeID(published) {
				t.Fatalf("fast member got event %d, want %d", ev.Node, published)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fast member did not get event %d", published)
		}
	}
	if srv.Subscribers() != 1 {
		t.Fatalf("slow member still subscribed after %d events", published)
	}
	t.Logf("slow member dropped after %d events", published)

	// The fast member goes on.
	srv.Publish(ctl.Event{Kind: ctl.EventLinkUp, Node: 424242})
	if ev := <-got; ev.Node != 424242 {
		t.Fatalf("after the drop: %+v", ev)
	}

	// The slow member finds the events it had, then ENOBUFS, then the end.
	var events int
	slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := slow.Read(slow.buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("slow member: %v after %d events, want EOF", err, events)
			}
			t.Fatalf("slow member: connection closed after %d events without ENOBUFS", events)
		}
		typ := binary.NativeEndian.Uint16(slow.buf[4:])
		if typ == family {
			events++
			continue
		}
		errno := syscall.Errno(-int32(binary.NativeEndian.Uint32(slow.buf[16:])))
		if typ != 2 || errno != syscall.ENOBUFS || binary.NativeEndian.Uint32(slow.buf[8:]) != 0 || n <= 36 {
			t.Fatalf("slow member: type %d errno %v, want NLMSG_ERROR ENOBUFS seq 0 with a reason", typ, errno)
		}
		break
	}
	if _, err := slow.Read(slow.buf); !errors.Is(err, io.EOF) {
		t.Fatalf("slow member after ENOBUFS: %v, want EOF", err)
	}
	cancel()
	<-fastDone
}

func TestMonitorReportsBeingDropped(t *testing.T) {
	srv, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()),
		ctl.WithLimits(ctl.Limits{MonitorQueue: 1, WriteTimeout: 100 * time.Millisecond}))
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- dial(t, path).Monitor(testContext(t), func(ctl.Event) error { <-release; return nil })
	}()
	waitFor(t, "subscriber", func() bool { return srv.Subscribers() == 1 })
	for i := 0; srv.Subscribers() == 1; i++ {
		if i > 100000 {
			t.Fatal("a member that does not read was never dropped")
		}
		srv.Publish(ctl.Event{Kind: ctl.EventLinkDown, Reason: "filling the buffer"})
	}
	close(release)
	err := <-done
	var e *ctl.Error
	if !errors.As(err, &e) || e.Errno != syscall.ENOBUFS {
		t.Fatalf("monitor ended with %v, want ENOBUFS", err)
	}
}

func TestTooManyConnections(t *testing.T) {
	_, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()), ctl.WithLimits(ctl.Limits{MaxConns: 2}))
	ctx := testContext(t)
	a, b := dial(t, path), dial(t, path)
	if _, err := a.Routes(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Routes(ctx); err != nil {
		t.Fatal(err)
	}
	third := dial(t, path)
	if _, err := third.Routes(ctx); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("third connection: %v, want EBUSY", err)
	}
	a.Close()
	waitFor(t, "a free slot", func() bool {
		_, err := third.Routes(ctx) // redials after the refusal
		return err == nil
	})
}

func TestIdleConnectionIsClosed(t *testing.T) {
	_, path := ctltest.Serve(t, ctltest.NewSource(ctltest.Sample()), ctl.WithLimits(ctl.Limits{IdleTimeout: 50 * time.Millisecond}))
	raw := dialRaw(t, path)
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(raw.buf); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	// A client whose kept connection idled out sends again on a new one.
	c := dial(t, path)
	for i := range 3 {
		time.Sleep(100 * time.Millisecond)
		if _, err := c.Routes(testContext(t)); err != nil {
			t.Fatalf("request %d after an idle close: %v", i, err)
		}
	}
}

// slowSource answers routes only when released.
type slowSource struct {
	ctl.Source
	release chan struct{}
}

func (s *slowSource) Routes() []ctl.Route { <-s.release; return s.Source.Routes() }

func TestRequestBoundByContext(t *testing.T) {
	src := &slowSource{Source: ctltest.NewSource(ctltest.Sample()), release: make(chan struct{})}
	_, path := ctltest.Serve(t, src)
	c := dial(t, path)
	released := false
	release := func() {
		if !released {
			close(src.release)
			released = true
		}
	}
	defer release()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Routes(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := c.Links(ctx2); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	release()
	// The next request works, on a fresh connection.
	if rs, err := c.Routes(testContext(t)); err != nil || len(rs) != 4 {
		t.Fatalf("after a timeout: %v %v", rs, err)
	}
}

func TestShutdownReleasesTheSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ctl.sock")
	srv := ctl.NewServer(ctltest.NewSource(ctltest.Sample()), slog.New(slog.DiscardHandler))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, path) }()
	waitFor(t, "socket", func() bool { _, err := os.Stat(path); return err == nil })

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want socket 0660", fi.Mode())
	}

	c := dial(t, path)
	if _, err := c.Routes(testContext(t)); err != nil {
		t.Fatal(err)
	}
	monitorDone := make(chan error, 1)
	go func() { monitorDone <- c.Monitor(context.Background(), func(ctl.Event) error { return nil }) }()
	waitFor(t, "subscriber", func() bool { return srv.Subscribers() == 1 })
	idle := dialRaw(t, path)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not return")
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file after shutdown: %v", err)
	}
	if err := <-monitorDone; !errors.Is(err, io.EOF) {
		t.Errorf("monitor at shutdown: %v, want EOF", err)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	// EOF, or a reset when the listener closed before accepting it.
	if _, err := idle.Read(idle.buf); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("idle connection at shutdown: %v, want EOF", err)
	}
	if _, err := c.Routes(testContext(t)); err == nil {
		t.Error("a request succeeded after shutdown")
	}

	// The same path serves again.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- srv.ListenAndServe(ctx2, path) }()
	waitFor(t, "second socket", func() bool { _, err := os.Stat(path); return err == nil })
	if _, err := c.Routes(testContext(t)); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	cancel2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A socket file whose server died.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: stale, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	nl, err := ctl.Listen(stale)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}

	// A live one.
	if _, err := ctl.Listen(stale); !errors.Is(err, ctl.ErrSocketInUse) {
		t.Fatalf("live socket: %v, want ErrSocketInUse", err)
	}
	nl.Close()
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("closing the listener left the file: %v", err)
	}

	// Not a socket: left alone.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Listen(file); err == nil {
		t.Fatal("listened over a regular file")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("regular file changed")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestAcceptErrorsBackOffAndServeOn (hole 3, the control socket): failed
// accepts (out of descriptors, or of kernel memory) are logged, counted
// and backed off (5 ms, doubling), and the socket serves on: a client
// after them is answered.
func TestAcceptErrorsBackOffAndServeOn(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ctl.sock")
	var logs backofftest.Log
	srv := ctl.NewServer(ctltest.NewSource(ctltest.Sample()), slog.New(slog.NewTextHandler(&logs, nil)))
	l, err := ctl.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	accErr := func(errno syscall.Errno) error { return backofftest.AcceptError("unixpacket", errno) }
	fl := &backofftest.FailingListener{Listener: l, Errs: []error{accErr(syscall.EMFILE), accErr(syscall.ENFILE), accErr(syscall.ENOBUFS), accErr(syscall.ENOMEM), accErr(syscall.EMFILE)}}
	failures := len(fl.Errs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, fl) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the control server did not stop")
		}
	}()

	if rs, err := dial(t, path).Routes(testContext(t)); err != nil || len(rs) == 0 {
		t.Fatalf("a request after %d failed accepts: %v, %v (log:\n%s)", failures, rs, err, logs.String())
	}
	if n := srv.AcceptErrors(); n != uint64(failures) {
		t.Errorf("AcceptErrors %d, want %d", n, failures)
	}
	backofftest.CheckWaits(t, logs.String(), "control socket accept failed", failures, fl)
}
