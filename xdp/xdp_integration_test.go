package xdp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/xdp"
)

// pair brings up two namespaces joined by one veth pair (node 0 port 0 to
// node 1 port 0) and removes them when the test ends.
func pair(t testing.TB) *veth.Fabric {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	f, err := veth.Up(veth.Spec{Dir: dir, Nodes: 2, Edges: []veth.Edge{{A: 0, PortA: 0, B: 1, PortB: 0}}})
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

// openIn opens a port on p0 inside node i's namespace.
func openIn(t testing.TB, f *veth.Fabric, i int, opts xdp.Options) (noc.Port, xdp.Kind) {
	t.Helper()
	var p noc.Port
	var kind xdp.Kind
	err := f.Do(i, func() (err error) {
		p, kind, err = xdp.Open(veth.PortName(0), opts)
		return err
	})
	if err != nil {
		t.Fatalf("open port on node %d: %v", i, err)
	}
	t.Cleanup(func() { p.Close() })
	return p, kind
}

func TestXDPSmoke(t *testing.T) {
	f := pair(t)
	a, ka := openIn(t, f, 0, xdp.Options{})
	b, kb := openIn(t, f, 1, xdp.Options{})
	if ka != xdp.KindXDP || kb != xdp.KindXDP {
		t.Fatalf("kinds %v %v, want xdp", ka, kb)
	}
	t.Logf("MTU %d", a.MTU())
	msg := []byte("hello over AF_XDP")
	if err := a.WriteDatagram(msg); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 9000)
	n, err := b.ReadDatagram(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], msg) {
		t.Fatalf("got %q", buf[:n])
	}
	big := make([]byte, a.MTU())
	for i := range big {
		big[i] = byte(i * 7)
	}
	binary.BigEndian.PutUint32(big, 42)
	if err := a.WriteDatagram(big); err != nil {
		t.Fatal(err)
	}
	n, err = b.ReadDatagram(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], big) {
		t.Fatalf("big datagram: got %d bytes, want %d", n, len(big))
	}
	c, _ := a.(*xdp.Port).Counters()
	t.Logf("a %v", c)
	c, _ = b.(*xdp.Port).Counters()
	t.Logf("b %v", c)
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := b.ReadDatagram(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle read: %v", err)
	}
}
