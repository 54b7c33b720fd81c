package hostif_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/ring"
	"github.com/aitherion/dpu/hostif/wire"
)

// dialAs connects to the socket at path as the user of cred: a copy of
// this test binary (bin, which that user can run) connects under cred and
// hands the connected socket back, so the server reads cred in
// SO_PEERCRED while the test drives the connection.
func dialAs(t *testing.T, bin, path string, cred *syscall.Credential) *raw {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	end := os.NewFile(uintptr(pair[1]), "handover")
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOSTIF_HELPER_CONNECT="+path)
	cmd.ExtraFiles = []*os.File{end} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	end.Close()
	if err != nil {
		t.Fatalf("connecting as uid %d: %v\n%s", cred.Uid, err, out)
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(pair[0], make([]byte, 1), oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the handed-over socket: %d messages, %v", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("the handed-over socket: %d descriptors, %v", len(fds), err)
	}
	f := os.NewFile(uintptr(fds[0]), hostif.SocketName)
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, uc: nc.(*net.UnixConn)}
	t.Cleanup(func() { r.uc.Close() })
	return r
}

// TestRingSchedulerBoundsEachUsersShare (hole 1, the fairness half, across
// users): the ring scheduler's per-pass bound is a user's, not a
// connection's. A hostile user (uid 4242) opens 8 ring connections and
// keeps every submission ring full; an honest user (uid 4343) submits one
// request before every pass. The test is the driver: it calls ServeRings
// pass by pass, and waits for every reply before the next, so that no ring
// is held back by its requests in flight and every ring of the hostile
// user has submissions waiting in every pass. Pass by pass, with a bound
// above the hostile user's ring count (16) and below it (6): the hostile
// user's rings together take exactly the bound (never more, and the share
// is not left unused), no ring of the hostile user goes without for more
// passes than its share of the bound makes it wait (every pass at 16,
// every other pass at 6), and the honest user's request is taken in the
// pass it was submitted before.
func TestRingSchedulerBoundsEachUsersShare(t *testing.T) {
	privileged(t)
	const nogroup = 65534
	const hostileRings = 8
	dir, err := os.MkdirTemp("", "hostif-rings")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostif.test")
	copyFile(t, self, bin)
	srv, be, path := serveRings(t, dir, hostif.Options{SocketGroup: fmt.Sprint(nogroup)})

	hostileCred := &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{nogroup}}
	honestCred := &syscall.Credential{Uid: 4343, Gid: 4343, Groups: []uint32{nogroup}}
	var rings []*ringClient // in the order they opened, as RingsTaken counts them
	for range hostileRings {
		rings = append(rings, attachRing(t, dialAs(t, bin, path, hostileCred), ring.MaxEntries))
	}
	honest := attachRing(t, dialAs(t, bin, path, honestCred), 0)
	rings = append(rings, honest)
	g, err := be.Alloc(ctxT(t), 1, gva.Attr{Mode: 0o666})
	if err != nil {
		t.Fatal(err)
	}

	var hostileID, honestID uint64 = 1000, 1 << 40
	reaped := make([]uint64, len(rings))
	for _, bound := range []int{16, 6} {
		// the passes in a row a ring of the hostile user may go without:
		// the share split among its rings
		wait := (hostileRings + bound - 1) / bound
		last := make([]int, hostileRings) // the pass each hostile ring was last taken from
		for i := range last {
			last[i] = -1
		}
		for pass := range 100 {
			for _, rc := range rings[:hostileRings] {
				rc.fill(t, g, &hostileID)
			}
			if err := honest.ring.Submit(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpLoad, ID: honestID, GVA: g}, Len: 8})); err != nil {
				t.Fatal(err)
			}
			honestID++
			before := srv.RingsTaken()
			srv.ServeRings(bound, time.Now())
			after := srv.RingsTaken()
			if len(before) != len(rings) || len(after) != len(rings) {
				t.Fatalf("%d rings, want %d", len(after), len(rings))
			}
			var share uint64
			for i := range hostileRings {
				d := after[i] - before[i]
				share += d
				if d > 0 {
					last[i] = pass
				}
			}
			switch {
			case share > uint64(bound):
				t.Fatalf("bound %d, pass %d: the hostile user's %d rings together took %d submissions in one pass, more than a user's share (%d)",
					bound, pass, hostileRings, share, bound)
			case share < uint64(bound):
				t.Fatalf("bound %d, pass %d: the hostile user's rings took %d submissions, less than its share (%d) with submissions waiting on every ring",
					bound, pass, share, bound)
			}
			if o := after[hostileRings] - before[hostileRings]; o != 1 {
				t.Fatalf("bound %d, pass %d: the honest user's waiting request was taken %d times in the pass, want once", bound, pass, o)
			}
			for i, l := range last {
				if pass-l >= wait {
					t.Fatalf("bound %d, pass %d: ring %d of the hostile user was taken nothing for %d passes, with submissions waiting",
						bound, pass, i, pass-l)
				}
			}
			// every reply, before the next pass: no ring is held back by
			// its requests in flight
			deadline := time.Now().Add(10 * time.Second)
			for i := 0; i < len(rings); {
				if reaped[i] += uint64(rings[i].reap(t)); reaped[i] == after[i] {
					i++
					continue
				}
				if time.Now().After(deadline) {
					t.Fatalf("bound %d, pass %d: ring %d has %d of its %d replies after 10 s", bound, pass, i, reaped[i], after[i])
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
}
