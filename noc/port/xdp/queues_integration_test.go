package xdp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/xdp"
	"github.com/aitherion/dpu/noc/port/xdp/bpf"
	"github.com/vishvananda/netlink"
)

// queuePair brings up two namespaces joined by one veth pair whose ends
// have the given number of queues.
func queuePair(t testing.TB, queues int) *veth.Fabric {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	f, err := veth.Up(veth.Spec{Dir: dir, Nodes: 2, Queues: queues, Edges: []veth.Edge{{A: 0, PortA: 0, B: 1, PortB: 0}}})
	if err != nil {
		t.Fatalf("veth.Up: %v", err)
	}
	t.Cleanup(func() {
		if err := veth.Down(dir); err != nil {
			t.Errorf("veth.Down: %v", err)
		}
	})
	return f
}

// queuePortsIn opens k queue ports on p0 inside node i's namespace.
func queuePortsIn(t testing.TB, f *veth.Fabric, i, k int, opts xdp.Options) []*xdp.Port {
	t.Helper()
	var ps []*xdp.Port
	if err := f.Do(i, func() (err error) { ps, err = xdp.NewQueuePorts(veth.PortName(0), k, opts); return err }); err != nil {
		t.Fatalf("open %d queue ports on node %d: %v", k, i, err)
	}
	t.Cleanup(func() {
		for _, p := range ps {
			p.Close()
		}
	})
	return ps
}

// K ports on the queues of one veth device, one XDP program: a datagram
// sent on queue i of one end arrives intact on queue i of the other (veth
// keeps a frame's queue), each port counts its own, and the program stays
// until the last port closes.
func TestQueuePortsKeepTheirQueue(t *testing.T) {
	const k, n = 4, 300
	f := queuePair(t, k)
	a := queuePortsIn(t, f, 0, k, xdp.Options{})
	b := queuePortsIn(t, f, 1, k, xdp.Options{})
	if len(a) != k || len(b) != k {
		t.Fatalf("%d and %d ports, want %d each", len(a), len(b), k)
	}
	for i, p := range a {
		if want := veth.PortName(0) + "/q" + string(rune('0'+i)); p.Name() != want {
			t.Errorf("port %d named %q, want %q", i, p.Name(), want)
		}
	}
	// got[r][s]: datagrams sent on queue s read from queue r
	var mu sync.Mutex
	got := make([][]int, k)
	for i := range got {
		got[i] = make([]int, k)
	}
	var wg sync.WaitGroup
	errc := make(chan error, k)
	for r, p := range b {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, p.MTU())
			for {
				p.SetReadDeadline(time.Now().Add(time.Second))
				m, err := p.ReadDatagram(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
				if err != nil {
					errc <- err
					return
				}
				if m != 4096 || !bytes.Equal(buf[8:m], bytes.Repeat([]byte{buf[0] ^ buf[7]}, m-8)) {
					errc <- errors.New("datagram corrupted")
					return
				}
				mu.Lock()
				got[r][binary.BigEndian.Uint32(buf)]++
				mu.Unlock()
			}
		}()
	}
	msg := make([]byte, 4096)
	for seq := range n {
		for s, p := range a {
			binary.BigEndian.PutUint32(msg, uint32(s))
			binary.BigEndian.PutUint32(msg[4:], uint32(seq))
			for j := 8; j < len(msg); j++ {
				msg[j] = msg[0] ^ msg[7]
			}
			if err := p.WriteDatagram(msg); err != nil && !errors.Is(err, xdp.ErrTxBusy) {
				t.Fatalf("write on queue %d: %v", s, err)
			}
		}
		if seq%16 == 15 {
			time.Sleep(200 * time.Microsecond) // an unreliable port: keep the readers ahead
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("received[queue][sent on queue] = %v", got)
	for r := range k {
		for s := range k {
			if r != s && got[r][s] > 0 {
				t.Errorf("%d datagrams sent on queue %d arrived on queue %d", got[r][s], s, r)
			}
		}
		if got[r][r] < n*9/10 {
			t.Errorf("queue %d: %d of %d datagrams arrived", r, got[r][r], n)
		}
		c := counters(t, b[r])
		if c["rx_datagrams"] != uint64(got[r][r]) {
			t.Errorf("queue %d counts %d datagrams, read %d", r, c["rx_datagrams"], got[r][r])
		}
	}
	// One program for the device, kept while any queue's port is open.
	attached := func() bool {
		var on bool
		f.Do(1, func() error {
			l, err := netlink.LinkByName(veth.PortName(0))
			if err != nil {
				return err
			}
			on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
			return nil
		})
		return on
	}
	for _, p := range b[:k-1] {
		p.Close()
	}
	if !attached() {
		t.Fatal("the XDP program left the device while a queue's port is open")
	}
	b[k-1].Close()
	if attached() {
		t.Fatal("the XDP program stayed after the last queue's port closed")
	}
}

// A device with fewer queues than channels asked gives one port per queue,
// and a port on queue 0 alone still works as before.
func TestQueuePortsFewerQueues(t *testing.T) {
	f := queuePair(t, 2)
	ps := queuePortsIn(t, f, 0, 4, xdp.Options{})
	if len(ps) != 2 {
		t.Fatalf("%d ports on a 2-queue device, want 2", len(ps))
	}
	single := queuePair(t, 0) // the kernel's default queues
	one := queuePortsIn(t, single, 0, 1, xdp.Options{})
	if len(one) != 1 || one[0].AttachMode() == bpf.Mode(0) {
		t.Fatalf("one queue: %d ports", len(one))
	}
	var err error
	single.Do(1, func() error { _, err = xdp.NewQueuePorts(veth.PortName(0), 0, xdp.Options{}); return nil })
	if err == nil {
		t.Fatal("0 queues accepted")
	}
}

// OpenQueues gives K AF_XDP ports where AF_XDP works, and one AF_PACKET
// port (an AF_PACKET socket sees every queue) where it falls back.
func TestOpenQueuesFallsBackToOneChannel(t *testing.T) {
	f := queuePair(t, 4)
	for _, force := range []bool{false, true} {
		var ps []noc.Port
		var kind xdp.Kind
		err := f.Do(0, func() (err error) {
			ps, kind, err = xdp.OpenQueues(veth.PortName(0), 4, xdp.Options{ForceAFPacket: force})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want, wantKind := 4, xdp.KindXDP
		if force {
			want, wantKind = 1, xdp.KindAFPacket
		}
		if len(ps) != want || kind != wantKind {
			t.Errorf("force AF_PACKET %v: %d ports of kind %v, want %d of %v", force, len(ps), kind, want, wantKind)
		}
		for _, p := range ps {
			p.Close()
		}
	}
}
