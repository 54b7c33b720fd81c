package hostif_test

import (
	"bytes"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/quota"
)

// TestBulkRangesAcrossNodes: a range of many pages, starting and ending
// inside pages, stored by a client of one node into pages another owns,
// reads back whole from both nodes (the real core on an in-memory
// fabric), and a page of the range mapped on the far node reads it.
func TestBulkRangesAcrossNodes(t *testing.T) {
	const pages = 150
	co, far, g := bulkNodes(t, pages, hostif.Options{})
	cf := dial(t, far.path)
	ctx := ctxT(t)
	m, err := cf.Map(ctx, wire.PageAt(g, 7), gva.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	start := g.WithOffset(9)
	data := make([]byte, pages*gva.PageSize-20)
	for i := range data {
		data[i] = byte(i*13 + i>>12)
	}
	if n, err := cf.StoreRange(ctx, start, data); err != nil || n != len(data) {
		t.Fatalf("store range: %d of %d: %v", n, len(data), err)
	}
	for name, c := range map[string]*client.Client{"owner": co, "far": cf} {
		got := make([]byte, len(data))
		if n, err := c.LoadRange(ctx, start, got); err != nil || n != len(data) || !bytes.Equal(got, data) {
			t.Fatalf("%s: load range: %d of %d, equal %v: %v", name, n, len(data), bytes.Equal(got, data), err)
		}
	}
	if rb, want := m.Bytes()[:64], data[7*gva.PageSize-9:][:64]; !bytes.Equal(rb, want) {
		t.Fatalf("the mapped page's replica file: %x, stored %x", rb, want)
	}
}

// bulkNodes starts two nodes of one in-memory fabric, the second with
// farOpts, and allocates pages pages anyone may use on the first through
// a client of it, which it returns with the second node and the pages.
func bulkNodes(t *testing.T, pages int, farOpts hostif.Options) (*client.Client, *node, gva.GVA) {
	t.Helper()
	fab := hostiftest.NewFabric()
	owner, far := startNode(t, fab, 1, hostif.Options{}), startNode(t, fab, 2, farOpts)
	co := dial(t, owner.path)
	g, err := co.Alloc(ctxT(t), pages*gva.PageSize, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	return co, far, g
}

// TestBulkRequestsOnTheWire: without an area a bulk request fails ENXIO;
// the area comes once per connection (EEXIST after), as one sealed memfd
// whose size is fixed; a range past the area is EINVAL; a range past the
// allocation stores the pages inside and says how many bytes.
func TestBulkRequestsOnTheWire(t *testing.T) {
	n := startNode(t, hostiftest.NewFabric(), 1, hostif.Options{MaxBulkArea: 8 * gva.PageSize})
	c := dial(t, n.path)
	ctx := ctxT(t)
	g, err := c.Alloc(ctx, 4*gva.PageSize, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	raw := rawConn(t, n.path)
	st, _ := raw.ask(t, &wire.Request{Header: wire.Header{Op: wire.OpStoreBulk, GVA: g}, Len: 10})
	if st != syscall.ENXIO {
		t.Fatalf("store-bulk without an area: %v, want ENXIO", st)
	}
	st, body, fds := raw.askFDs(t, &wire.Request{Header: wire.Header{Op: wire.OpBulk}, Bytes: 64 * gva.PageSize})
	if st != 0 || len(fds) != 1 || wire.U64(body, 0) != 8*gva.PageSize {
		t.Fatalf("bulk: status %v, %d descriptors, body %x; want the area of 8 pages the server allows", st, len(fds), body)
	}
	defer syscall.Close(fds[0])
	if err := syscall.Ftruncate(fds[0], 1); err == nil {
		t.Fatal("the bulk area's memfd could be shrunk")
	}
	if st, _ := raw.ask(t, &wire.Request{Header: wire.Header{Op: wire.OpBulk}, Bytes: gva.PageSize}); st != syscall.EEXIST {
		t.Fatalf("second bulk: %v, want EEXIST", st)
	}
	if st, _ := raw.ask(t, &wire.Request{Header: wire.Header{Op: wire.OpLoadBulk, GVA: g}, Len: 2 * gva.PageSize, Off: 7 * gva.PageSize}); st != syscall.EINVAL {
		t.Fatalf("load-bulk past the area: %v, want EINVAL", st)
	}
	st, body = raw.ask(t, &wire.Request{Header: wire.Header{Op: wire.OpStoreBulk, GVA: wire.PageAt(g, 2)}, Len: 4 * gva.PageSize})
	if st != 0 || len(body) != 16 || wire.U64(body, 0) != 2*gva.PageSize || wire.U32(body, 8) == 0 {
		t.Fatalf("store-bulk past the allocation: status %v body %x; want 2 pages done and an errno", st, body)
	}
}

// rawWire is a connection that speaks the host wire by hand.
type rawWire struct {
	uc *net.UnixConn
	id uint64
}

func rawConn(t *testing.T, path string) *rawWire {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	r := &rawWire{uc: uc}
	var name [wire.NameLen]byte
	if st, _ := r.ask(t, &wire.Request{Header: wire.Header{Op: wire.OpHello}, Min: 1, Max: 1, Name: name}); st != 0 {
		t.Fatalf("hello: %v", st)
	}
	return r
}

func (r *rawWire) ask(t *testing.T, req *wire.Request) (syscall.Errno, []byte) {
	st, body, fds := r.askFDs(t, req)
	for _, fd := range fds {
		syscall.Close(fd)
	}
	return st, body
}

func (r *rawWire) askFDs(t *testing.T, req *wire.Request) (syscall.Errno, []byte, []int) {
	t.Helper()
	r.id++
	req.ID = r.id
	if _, err := r.uc.Write(wire.AppendRequest(nil, req)); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, wire.MaxMessage), make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := r.uc.ReadMsgUnix(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		h, body, err := wire.DecodeReply(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		var fds []int
		if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if f, err := syscall.ParseUnixRights(&m); err == nil {
					fds = append(fds, f...)
				}
			}
		}
		if h.Kind != wire.KindReply || h.ID != req.ID {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			continue // an event, or the hello's status table
		}
		if errors.Is(syscall.Errno(h.Status), syscall.Errno(0)) {
			return 0, append([]byte(nil), body...), fds
		}
		return syscall.Errno(h.Status), body, fds
	}
}

// TestBulkClientVanishesMidTransfer: a client that asks for transfers of
// many pages and closes its connection at once ends alone: its area's
// descriptor goes back to its user's count, and another client's
// transfers on the same node go on.
func TestBulkClientVanishesMidTransfer(t *testing.T) {
	led := quota.New(nil)
	co, far, g := bulkNodes(t, 512, hostif.Options{Quota: led})
	ctx := ctxT(t)
	uid := uint32(syscall.Geteuid())
	cf := dial(t, far.path)
	if _, err := cf.StoreRange(ctx, g, make([]byte, 2*gva.PageSize)); err != nil { // cf's area is made
		t.Fatal(err)
	}
	before := led.Used(uid, quota.Files)
	for range 3 {
		raw := rawConn(t, far.path)
		st, _, fds := raw.askFDs(t, &wire.Request{Header: wire.Header{Op: wire.OpBulk}, Bytes: wire.MaxBulkArea})
		if st != 0 || len(fds) != 1 {
			t.Fatalf("bulk: %v, %d descriptors", st, len(fds))
		}
		syscall.Close(fds[0])
		for i := range 4 { // four transfers of 1 MiB, then gone without a reply read
			r := wire.Request{Header: wire.Header{Op: wire.OpStoreBulk, ID: uint64(100 + i), GVA: wire.PageAt(g, 0)}, Len: wire.MaxBulk, Off: uint32(i) * wire.MaxBulk}
			if i%2 == 1 {
				r.Op = wire.OpLoadBulk
			}
			if _, err := raw.uc.Write(wire.AppendRequest(nil, &r)); err != nil {
				t.Fatal(err)
			}
		}
		raw.uc.Close()
	}
	data := make([]byte, 64*gva.PageSize)
	for i := range data {
		data[i] = byte(i * 3)
	}
	if n, err := cf.StoreRange(ctx, wire.PageAt(g, 300), data); err != nil || n != len(data) {
		t.Fatalf("another client's store range: %d of %d: %v", n, len(data), err)
	}
	got := make([]byte, len(data))
	if _, err := co.LoadRange(ctx, wire.PageAt(g, 300), got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("another client's range reads back otherwise (%v)", err)
	}
	// the vanished clients' areas are given back once their connections end
	deadline := time.Now().Add(10 * time.Second)
	for led.Used(uid, quota.Files) != before {
		if time.Now().After(deadline) {
			t.Fatalf("descriptors counted for uid %d: %d, %d before the vanished clients came", uid, led.Used(uid, quota.Files), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseDuringRangeTransfers: a client closed while its range
// transfers are in flight ends them with an error, never a fault on the
// unmapped area.
func TestCloseDuringRangeTransfers(t *testing.T) {
	const pages = 512
	co, far, g := bulkNodes(t, pages, hostif.Options{})
	ctx := ctxT(t)
	for round := range 5 {
		cf, err := client.Dial(ctx, far.path, client.Options{Name: "closing"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 2)
		buf := make([]byte, pages*gva.PageSize)
		go func() { _, err := cf.StoreRange(ctx, g, buf); done <- err }()
		go func() { _, err := cf.LoadRange(ctx, g, make([]byte, len(buf))); done <- err }()
		time.Sleep(time.Duration(round) * time.Millisecond)
		cf.Close()
		for range 2 {
			if err := <-done; err == nil && round == 0 {
				t.Log("a transfer finished before the close")
			}
		}
	}
	// the node serves on
	if _, err := co.StoreRange(ctx, g, make([]byte, 3*gva.PageSize)); err != nil {
		t.Fatal(err)
	}
}
