package hostif_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// statusView is a client's read-only mapping of the status table its
// HELLO handed over.
type statusView []byte

func mapStatus(t *testing.T, hl wire.Hello, fds []int) statusView {
	t.Helper()
	if len(fds) != 1 {
		t.Fatalf("hello passed %d descriptors, want 1", len(fds))
	}
	mem, err := unix.Mmap(fds[0], 0, int(hl.StatusSlots)*wire.SlotSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// statusOf is one entry as a reader sees it (a seqlock read).
type statusOf struct {
	state   uint32
	version gva.Version
	page    gva.GVA
}

func (s statusView) entry(t *testing.T, i uint32) statusOf {
	b := s[int(i)*wire.SlotSize:][:wire.SlotSize]
	seq := (*uint64)(unsafe.Pointer(&b[wire.SlotSeqOff]))
	for range 1 << 20 {
		s1 := atomic.LoadUint64(seq)
		e := statusOf{
			state:   atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[wire.SlotStateOff]))),
			version: gva.Version(atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[wire.SlotVersionOff])))),
			page: gva.GVA{Hi: binary.LittleEndian.Uint64(b[wire.SlotGVAOff:]),
				Lo: binary.LittleEndian.Uint64(b[wire.SlotGVAOff+8:])},
		}
		if s1%2 == 0 && atomic.LoadUint64(seq) == s1 {
			return e
		}
	}
	t.Fatalf("status entry %d never settles", i)
	return statusOf{}
}

// used returns every entry of the table that is not all zero, by index.
func (s statusView) used(t *testing.T) map[uint32]statusOf {
	out := map[uint32]statusOf{}
	for i := uint32(0); int(i)*wire.SlotSize < len(s); i++ {
		b := s[int(i)*wire.SlotSize:][:wire.SlotSize]
		for _, x := range b[wire.SlotVersionOff:] { // the sequence of a freed entry moved on
			if x != 0 {
				out[i] = s.entry(t, i)
				break
			}
		}
	}
	return out
}

// mapRaw maps pages pages at g on r and returns their status slots.
func (r *raw) mapRaw(id uint64, g gva.GVA, pages int) []uint32 {
	r.t.Helper()
	r.send(&wire.Request{Header: wire.Header{Op: wire.OpMap, ID: id, GVA: g}, Bytes: uint64(pages) * wire.PageSize})
	h, body, fds := r.recv()
	if h.ID != id || h.Status != 0 {
		r.t.Fatalf("MAP %v: reply %+v (%q)", g, h, body)
	}
	mp, err := wire.DecodeMapReply(body, nil)
	if err != nil || len(mp) != pages || len(fds) != pages {
		r.t.Fatalf("MAP %v: %d pages, %d descriptors, %v", g, len(mp), len(fds), err)
	}
	slots := make([]uint32, pages)
	for i, p := range mp {
		slots[i] = p.Slot
	}
	return slots
}

// TestStatusTableIsPerConnection: each connection's status table (the
// memfd its HELLO passed) describes the pages that connection maps and no
// other: two connections that map overlapping pages see, scanning their
// whole tables, only their own entries; a write to the page both map moves
// both entries to the new version; an UNMAP or a close frees only the
// leaving connection's entries.
func TestStatusTableIsPerConnection(t *testing.T) {
	fab := hostiftest.NewFabric()
	n := startNode(t, fab, 1, hostif.Options{StatusSlots: 64})
	c := dial(t, n.path)
	ctx := ctxT(t)
	g, err := c.Alloc(ctx, 3*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	page := func(i int) gva.GVA { return wire.PageAt(g, i) }

	a, b := rawDial(t, n.path), rawDial(t, n.path)
	_, hla, fda := a.hello(1, wire.VersionMax)
	_, hlb, fdb := b.hello(1, wire.VersionMax)
	sa, sb := mapStatus(t, hla, fda), mapStatus(t, hlb, fdb)

	slotsA := a.mapRaw(2, page(0), 2) // pages 0 and 1
	slotsB := b.mapRaw(2, page(1), 2) // pages 1 and 2

	// want checks that table s holds exactly the entries named.
	want := func(who string, s statusView, entries map[uint32]statusOf) {
		t.Helper()
		got := s.used(t)
		for i, e := range got {
			if w, ok := entries[i]; !ok || w != e {
				t.Errorf("%s's table entry %d = %+v, want %+v (present %v)", who, i, e, w, ok)
			}
		}
		for i, w := range entries {
			if _, ok := got[i]; !ok {
				t.Errorf("%s's table lacks entry %d (%+v)", who, i, w)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	valid := func(i int, v gva.Version) statusOf {
		return statusOf{state: wire.SlotValid, version: v, page: page(i)}
	}
	want("a", sa, map[uint32]statusOf{slotsA[0]: valid(0, 0), slotsA[1]: valid(1, 0)})
	want("b", sb, map[uint32]statusOf{slotsB[0]: valid(1, 0), slotsB[1]: valid(2, 0)})

	// A write to the shared page is published in both connections' entries.
	if _, err := c.Store64(ctx, page(1).WithOffset(8), 42); err != nil {
		t.Fatal(err)
	}
	want("a", sa, map[uint32]statusOf{slotsA[0]: valid(0, 0), slotsA[1]: valid(1, 1)})
	want("b", sb, map[uint32]statusOf{slotsB[0]: valid(1, 1), slotsB[1]: valid(2, 0)})

	// b's UNMAP of the shared page frees b's entry only.
	b.send(&wire.Request{Header: wire.Header{Op: wire.OpUnmap, ID: 3, GVA: page(1)}, Bytes: wire.PageSize})
	if h, body, _ := b.recv(); h.ID != 3 || h.Status != 0 {
		t.Fatalf("UNMAP: reply %+v (%q)", h, body)
	}
	free := statusOf{state: wire.SlotFree}
	want("a", sa, map[uint32]statusOf{slotsA[0]: valid(0, 0), slotsA[1]: valid(1, 1)})
	want("b", sb, map[uint32]statusOf{slotsB[1]: valid(2, 0)})
	if e := sb.entry(t, slotsB[0]); e != free {
		t.Fatalf("b's unmapped entry = %+v", e)
	}

	// b's close frees b's entries, and a's stay.
	b.uc.Close()
	waitFor(t, "b's entries freed", func() bool { return sb.entry(t, slotsB[1]) == free })
	want("a", sa, map[uint32]statusOf{slotsA[0]: valid(0, 0), slotsA[1]: valid(1, 1)})

	// A third connection starts with a table of its own, empty.
	d := rawDial(t, n.path)
	_, hld, fdd := d.hello(1, wire.VersionMax)
	want("d", mapStatus(t, hld, fdd), map[uint32]statusOf{})

	// The table bounds what one connection maps (StatusSlots-1 pages).
	big, err := c.Alloc(ctx, 64*4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Map(ctx, big, 64*4096)
	wantErrno(t, err, syscall.ENOSPC)
}

// scanStatus opens a connection of its own on sock, maps page g (unless
// zero) and returns the pages its status table has entries for, in index
// order, comma-separated (for the helper's "scan").
func scanStatus(ctx context.Context, sock string, g gva.GVA) (string, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", sock)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	uc := nc.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	call := func(req *wire.Request) ([]byte, []int, error) {
		if _, err := uc.Write(wire.AppendRequest(nil, req)); err != nil {
			return nil, nil, err
		}
		buf, oob := make([]byte, wire.MaxMessage), make([]byte, unix.CmsgSpace(64*4))
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, nil, err
		}
		var fds []int
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			f, _ := unix.ParseUnixRights(&m)
			fds = append(fds, f...)
		}
		h, body, err := wire.DecodeReply(buf[:n])
		if err == nil && h.Status != 0 {
			err = syscall.Errno(h.Status)
		}
		return body, fds, err
	}
	body, fds, err := call(&wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: wire.VersionMax})
	if err != nil {
		return "", err
	}
	var hl wire.Hello
	if err := hl.Decode(body); err != nil || len(fds) != 1 {
		return "", fmt.Errorf("hello: %v, %d descriptors", err, len(fds))
	}
	mem, err := unix.Mmap(fds[0], 0, int(hl.StatusSlots)*wire.SlotSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return "", err
	}
	defer unix.Munmap(mem)
	if !g.IsZero() {
		if _, _, err := call(&wire.Request{Header: wire.Header{Op: wire.OpMap, ID: 2, GVA: g}, Bytes: wire.PageSize}); err != nil {
			return "", err
		}
	}
	var pages []string
	for i := 0; i < int(hl.StatusSlots); i++ {
		b := mem[i*wire.SlotSize:][:wire.SlotSize]
		if atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[wire.SlotStateOff]))) != wire.SlotFree {
			p := gva.GVA{Hi: binary.LittleEndian.Uint64(b[wire.SlotGVAOff:]), Lo: binary.LittleEndian.Uint64(b[wire.SlotGVAOff+8:])}
			pages = append(pages, p.String())
		}
	}
	return strings.Join(pages, ","), nil
}

// TestStatusTableHidesOtherUsersPages: a connection of another user (uid
// nobody, a subprocess with real credentials) finds in its status table
// the page it maps and none of the pages root maps on the node.
func TestStatusTableHidesOtherUsersPages(t *testing.T) {
	privileged(t)
	const nobody, nogroup = 65534, 65534
	bin, path, _ := serveForOtherUsers(t, "hostif-status", hostif.Options{SocketGroup: fmt.Sprint(nogroup), StatusSlots: 256})

	root := dial(t, path)
	cctx := ctxT(t)
	var pages []gva.GVA
	for _, mode := range []os.FileMode{0o600, 0o604, 0o604} {
		g, err := root.Alloc(cctx, 4096, mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.Map(cctx, g, 4096); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, g)
	}
	// nobody maps the second page (which root maps too) and scans.
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOSTIF_HELPER_SOCKET="+path, "HOSTIF_HELPER_SCRIPT=scan "+pages[1].String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nogroup}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "scan 0 "+pages[1].String(); got != want {
		t.Fatalf("nobody's status table: %q, want %q (root maps %v)", got, want, pages)
	}
	// And root's own new connection, mapping nothing, has an empty table.
	if got, err := scanStatus(cctx, path, gva.GVA{}); err != nil || got != "" {
		t.Fatalf("a fresh connection's status table: %q, %v", got, err)
	}
}
