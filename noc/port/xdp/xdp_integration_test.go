package xdp_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/privtest"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/afpacket"
	"github.com/aitherion/dpu/noc/port/xdp"
	"github.com/aitherion/dpu/noc/port/xdp/bpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// helperEnv selects what a re-executed test binary does (see TestMain).
const helperEnv = "DPU_XDP_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "unprivileged":
		os.Exit(helperUnprivileged())
	case "hold":
		os.Exit(helperHold())
	default:
		fmt.Fprintf(os.Stderr, "unknown %s\n", helperEnv)
		os.Exit(2)
	}
}

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

func openXDPIn(t testing.TB, f *veth.Fabric, i int, opts xdp.Options) *xdp.Port {
	t.Helper()
	p, kind := openIn(t, f, i, opts)
	if kind != xdp.KindXDP {
		t.Fatalf("node %d: port kind %v, want xdp", i, kind)
	}
	return p.(*xdp.Port)
}

type counted interface {
	Counters() (map[string]uint64, error)
}

func counters(t testing.TB, p noc.Port) map[string]uint64 {
	t.Helper()
	c, err := p.(counted).Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// datagram builds datagram seq of the exchange: seq, CRC-32 of the rest,
// then bytes derived from seq; its size runs over 12..mtu.
func datagram(buf []byte, seq uint64, mtu int) []byte {
	size := 12 + int(seq*7919%uint64(mtu-11))
	b := buf[:size]
	binary.BigEndian.PutUint64(b, seq)
	for i := 12; i < size; i++ {
		b[i] = byte(seq>>3) ^ byte(i*13)
	}
	binary.BigEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[12:]))
	return b
}

// check reports the sequence number of a received datagram, or an error
// when it is not exactly what datagram built.
func check(b []byte, mtu int, want []byte) (uint64, error) {
	if len(b) < 12 {
		return 0, fmt.Errorf("%d-byte datagram", len(b))
	}
	seq := binary.BigEndian.Uint64(b)
	if exp := datagram(want, seq, mtu); !bytes.Equal(b, exp) {
		return seq, fmt.Errorf("datagram %d corrupted: %d bytes, want %d", seq, len(b), len(exp))
	}
	return seq, nil
}

// stream sends n datagrams from src to dst while dst reads them, with at
// most window in flight (an unreliable port loses frames when the reader
// falls behind; the window keeps that rare without hiding loss). It returns
// how many distinct datagrams arrived intact and fails on corruption or
// duplicates.
func stream(t *testing.T, src, dst noc.Port, n int, window int64) int {
	mtu := min(src.MTU(), dst.MTU())
	var got atomic.Int64
	var failed atomic.Bool
	errc := make(chan error, 1)
	go func() {
		defer failed.Store(true)
		seen := make([]bool, n)
		buf := make([]byte, mtu)
		want := make([]byte, mtu)
		for got.Load() < int64(n) {
			dst.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			m, err := dst.ReadDatagram(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break // the rest was lost
			}
			if err != nil {
				errc <- err
				return
			}
			seq, err := check(buf[:m], mtu, want)
			if err != nil {
				errc <- err
				return
			}
			if seq >= uint64(n) || seen[seq] {
				errc <- fmt.Errorf("datagram %d duplicated or unknown", seq)
				return
			}
			seen[seq] = true
			got.Add(1)
		}
		errc <- nil
	}()
	buf := make([]byte, mtu)
	for seq := 0; seq < n && !failed.Load(); seq++ {
		for wait := time.Now(); int64(seq)-got.Load() >= window && time.Since(wait) < 100*time.Millisecond; {
			time.Sleep(50 * time.Microsecond)
		}
		if err := src.WriteDatagram(datagram(buf, uint64(seq), mtu)); err != nil && !errors.Is(err, xdp.ErrTxBusy) {
			t.Errorf("write %d: %v", seq, err)
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return int(got.Load())
}

// Two AF_XDP ports on the ends of a veth exchange 10,000 datagrams each
// way at once, sizes up to the MTU (multi-buffer frames included): what
// arrives is intact and not duplicated, and nearly everything arrives.
func TestXDPExchange(t *testing.T) {
	f := pair(t)
	a := openXDPIn(t, f, 0, xdp.Options{})
	b := openXDPIn(t, f, 1, xdp.Options{})
	if a.MTU() != veth.DefaultMTU-14 {
		t.Fatalf("MTU %d, want device MTU - 14 = %d", a.MTU(), veth.DefaultMTU-14)
	}
	t.Logf("attach mode %v, zero-copy %v", a.AttachMode(), a.ZeroCopy())
	const n = 10000
	var ab, ba int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ab = stream(t, a, b, n, 256) }()
	go func() { defer wg.Done(); ba = stream(t, b, a, n, 256) }()
	wg.Wait()
	t.Logf("a→b %d/%d, b→a %d/%d", ab, n, ba, n)
	for _, got := range []int{ab, ba} {
		if got < n*95/100 {
			t.Errorf("only %d of %d datagrams arrived", got, n)
		}
	}
	ca, cb := counters(t, a), counters(t, b)
	if cb["rx_datagrams"] != uint64(ab) || cb["redirected"] < uint64(ab) || ca["tx_datagrams"] != n {
		t.Errorf("counters disagree with the exchange: a %v, b %v", ca, cb)
	}
	if p, _ := b.Neighbour().Peer(); p != a.Neighbour().Own() {
		t.Errorf("b learned %v, want a's %v", p, a.Neighbour().Own())
	}
}

// linkLocal gives node i's p0 the address fe80::<i+1> without duplicate
// address detection and returns a UDP address for it.
func linkLocal(t testing.TB, f *veth.Fabric, i int) *net.UDPAddr {
	t.Helper()
	var addr *net.UDPAddr
	err := f.Do(i, func() error {
		l, err := netlink.LinkByName(veth.PortName(0))
		if err != nil {
			return err
		}
		ip := net.ParseIP(fmt.Sprintf("fe80::%d", i+1))
		a := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(l, a); err != nil {
			return err
		}
		addr = &net.UDPAddr{IP: ip, Port: 7000 + i, Zone: strconv.Itoa(l.Attrs().Index)}
		return nil
	})
	if err != nil {
		t.Fatalf("address on node %d: %v", i, err)
	}
	return addr
}

// udpIn opens a UDP socket bound to addr inside node i's namespace.
func udpIn(t testing.TB, f *veth.Fabric, i int, addr *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := f.Do(i, func() (err error) { c, err = net.ListenUDP("udp6", addr); return err }); err != nil {
		t.Fatalf("udp on node %d: %v", i, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// With the XDP program on both ends, IPv6/UDP between the namespaces still
// flows, the program counts it as passed, and NoC frames are counted as
// redirected.
func TestOtherTrafficPasses(t *testing.T) {
	f := pair(t)
	a := openXDPIn(t, f, 0, xdp.Options{})
	b := openXDPIn(t, f, 1, xdp.Options{})
	addrA, addrB := linkLocal(t, f, 0), linkLocal(t, f, 1)
	ua, ub := udpIn(t, f, 0, addrA), udpIn(t, f, 1, addrB)

	before := counters(t, b)
	const n = 200
	buf := make([]byte, 64)
	for i := range n {
		if _, err := ua.WriteToUDP([]byte("udp "+strconv.Itoa(i)), addrB); err != nil {
			t.Fatal(err)
		}
		ub.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, _, err := ub.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("UDP datagram %d did not pass the XDP program: %v", i, err)
		}
		if string(buf[:m]) != "udp "+strconv.Itoa(i) {
			t.Fatalf("UDP datagram %d: %q", i, buf[:m])
		}
	}
	for i := range n {
		if err := a.WriteDatagram([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		b.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := b.ReadDatagram(buf); err != nil {
			t.Fatalf("NoC datagram %d: %v", i, err)
		}
	}
	after := counters(t, b)
	if d := after["passed"] - before["passed"]; d < n {
		t.Errorf("passed grew by %d, want at least the %d UDP datagrams", d, n)
	}
	if d := after["redirected"] - before["redirected"]; d != n {
		t.Errorf("redirected grew by %d, want %d", d, n)
	}
	if d := after["rx_datagrams"] - before["rx_datagrams"]; d != n {
		t.Errorf("rx_datagrams grew by %d, want %d", d, n)
	}
	if after["dropped"] != 0 || after["unbound"] != 0 {
		t.Errorf("dropped %d unbound %d, want 0", after["dropped"], after["unbound"])
	}
}

// The drop knob, set from outside through the pinned maps (as the fabric's
// fault command does), drops about that share of the NoC frames and only
// those.
func TestDropPercent(t *testing.T) {
	f := pair(t)
	a := openXDPIn(t, f, 0, xdp.Options{PinDir: f.PinDir(0, 0)})
	b := openXDPIn(t, f, 1, xdp.Options{PinDir: f.PinDir(1, 0)})
	if err := veth.SetDropOneWay(f.Dir, 0, 1, 30); err != nil {
		t.Fatalf("SetDropOneWay: %v", err)
	}
	const n = 4000
	buf := make([]byte, 64)
	got := 0
	for i := range n {
		if err := a.WriteDatagram(binary.BigEndian.AppendUint32(nil, uint32(i))); err != nil {
			t.Fatal(err)
		}
		if i%64 == 63 || i == n-1 { // drain in batches: the ring never overflows
			for {
				b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				if _, err := b.ReadDatagram(buf); err != nil {
					break
				}
				got++
			}
		}
	}
	c := counters(t, b)
	share := 1 - float64(got)/n
	t.Logf("received %d of %d (%.1f%% dropped); counters %v", got, n, 100*share, c)
	if share < 0.25 || share > 0.35 {
		t.Errorf("%.1f%% dropped, want about 30%%", 100*share)
	}
	if c["dropped"]+uint64(got) != n || c["redirected"] != uint64(got) {
		t.Errorf("dropped %d + received %d != sent %d (redirected %d)", c["dropped"], got, n, c["redirected"])
	}
	// The other direction is untouched, and 0 turns the knob off.
	if err := b.WriteDatagram([]byte("back")); err != nil {
		t.Fatal(err)
	}
	a.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := a.ReadDatagram(buf); err != nil {
		t.Fatalf("reverse direction: %v", err)
	}
	if err := veth.SetDrop(f.Dir, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		a.WriteDatagram([]byte{1})
		b.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := b.ReadDatagram(buf); err != nil {
			t.Fatalf("datagram %d lost with the drop knob at 0: %v", i, err)
		}
	}
	if err := b.SetDropPercent(100); err != nil {
		t.Fatal(err)
	}
	a.WriteDatagram([]byte{1})
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := b.ReadDatagram(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("datagram passed a 100%% drop: %v", err)
	}
}

// Forced AF_PACKET ports carry the same frames: AF_PACKET to AF_PACKET and
// AF_XDP to AF_PACKET both ways.
func TestAFPacket(t *testing.T) {
	f := pair(t)
	a, ka := openIn(t, f, 0, xdp.Options{ForceAFPacket: true})
	if ka != xdp.KindAFPacket {
		t.Fatalf("forced AF_PACKET gave %v", ka)
	}
	if _, ok := a.(*afpacket.Port); !ok || a.MTU() != veth.DefaultMTU-14 {
		t.Fatalf("port %T MTU %d", a, a.MTU())
	}
	b, _ := openIn(t, f, 1, xdp.Options{ForceAFPacket: true})
	const n = 2000
	for _, got := range []int{stream(t, a, b, n, 64), stream(t, b, a, n, 64)} {
		if got < n*95/100 {
			t.Errorf("AF_PACKET: %d of %d arrived", got, n)
		}
	}
	b.Close()
	x := openXDPIn(t, f, 1, xdp.Options{})
	for _, got := range []int{stream(t, a, x, n, 64), stream(t, x, a, n, 64)} {
		if got < n*95/100 {
			t.Errorf("AF_PACKET/AF_XDP: %d of %d arrived", got, n)
		}
	}
	if c := counters(t, a); c["rx_datagrams"] == 0 || c["tx_datagrams"] != 2*n {
		t.Errorf("AF_PACKET counters %v", c)
	}
}

// A process without CAP_BPF/CAP_NET_ADMIN (uid nobody with CAP_NET_RAW
// only) falls back to AF_PACKET, says why once, and its frames reach an
// AF_XDP port.
func TestFallbackUnprivileged(t *testing.T) {
	f := pair(t)
	x := openXDPIn(t, f, 1, xdp.Options{})
	bin := exposedBinary(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=unprivileged")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		AmbientCaps: []uintptr{unix.CAP_NET_RAW},
	}
	if err := f.Start(0, cmd); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	x.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, rerr := x.ReadDatagram(buf)
	werr := cmd.Wait()
	t.Logf("helper output:\n%s", out.String())
	if werr != nil {
		t.Fatalf("helper: %v", werr)
	}
	if rerr != nil || string(buf[:n]) != "from an unprivileged agent" {
		t.Fatalf("read %q %v", buf[:n], rerr)
	}
	if !strings.Contains(out.String(), "kind=afpacket kind=afpacket") {
		t.Error("helper did not open AF_PACKET ports")
	}
	if c := strings.Count(out.String(), "AF_XDP unavailable"); c != 1 {
		t.Errorf("fallback notice logged %d times, want once", c)
	}
}

// helperUnprivileged runs inside node 0 without BPF privileges: it opens
// two ports (both must fall back, with one notice) and sends a datagram.
func helperUnprivileged() int {
	p1, k1, err := xdp.Open("p0", xdp.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer p1.Close()
	p2, k2, err := xdp.Open("p0", xdp.Options{Name: "second"})
	if err != nil {
		fmt.Println("open second:", err)
		return 1
	}
	p2.Close()
	fmt.Printf("kind=%v kind=%v\n", k1, k2)
	if err := p1.WriteDatagram([]byte("from an unprivileged agent")); err != nil {
		fmt.Println("write:", err)
		return 1
	}
	return 0
}

// exposedBinary copies the test binary where uid nobody can run it.
func exposedBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "xdp-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "xdp.test")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// An agent killed with SIGKILL leaves no program on the device (its BPF
// link dies with it) but stale pins; the next agent's port takes the
// device and the pins over.
func TestCrashedAgentReplaced(t *testing.T) {
	f := pair(t)
	pins := f.PinDir(0, 0)
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=hold", "DPU_XDP_TEST_PIN_DIR="+pins)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := f.Start(0, cmd); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	if xdpProgram(t, f, 0) == 0 {
		t.Fatal("the agent's program is not attached")
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The link goes with the last file descriptor, asynchronously.
	for deadline := time.Now().Add(5 * time.Second); xdpProgram(t, f, 0) != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the killed agent's program stays attached")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(pins, bpf.PinConfig)); err != nil {
		t.Fatalf("expected the killed agent's stale pins: %v", err)
	}
	a := openXDPIn(t, f, 0, xdp.Options{PinDir: pins})
	b := openXDPIn(t, f, 1, xdp.Options{})
	// The pins now reach the new program.
	if err := veth.SetDropOneWay(f.Dir, 1, 0, 100); err != nil {
		t.Fatal(err)
	}
	b.WriteDatagram([]byte("dropped"))
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := a.ReadDatagram(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the pinned drop knob does not reach the new program: %v", err)
	}
	if c := counters(t, a); c["dropped"] != 1 {
		t.Fatalf("dropped %d, want 1", c["dropped"])
	}
}

// helperHold opens a port with pins and waits to be killed.
func helperHold() int {
	p, err := xdp.NewPort("p0", xdp.Options{PinDir: os.Getenv("DPU_XDP_TEST_PIN_DIR")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer p.Close()
	fmt.Println("ready")
	time.Sleep(time.Minute)
	return 0
}

// A program whose BPF link a dead agent pinned is replaced when a port
// opens on the device; closing that port leaves the device bare.
func TestPinnedLeftoverReplaced(t *testing.T) {
	f := pair(t)
	linkPin := filepath.Join(f.NodePinDir(0), "leaked-link")
	err := f.Do(0, func() error {
		l, err := netlink.LinkByName("p0")
		if err != nil {
			return err
		}
		prog, err := bpf.Attach(l.Attrs().Index, bpf.Options{})
		if err != nil {
			return err
		}
		defer prog.Close()
		id, err := prog.ID()
		if err != nil {
			return err
		}
		it := new(link.Iterator)
		defer it.Close()
		for it.Next() {
			if info, err := it.Link.Info(); err == nil && info.Program == id {
				return it.Link.Pin(linkPin)
			}
		}
		return fmt.Errorf("no link runs program %d", id)
	})
	if err != nil {
		t.Fatalf("leave a pinned program behind: %v", err)
	}
	defer os.Remove(linkPin)
	old := xdpProgram(t, f, 0)
	if old == 0 {
		t.Fatal("the pinned program is not attached")
	}
	a := openXDPIn(t, f, 0, xdp.Options{})
	if now := xdpProgram(t, f, 0); now == 0 || now == old {
		t.Fatalf("device runs program %d, want a new one (leftover %d)", now, old)
	}
	a.Close()
	if now := xdpProgram(t, f, 0); now != 0 {
		t.Fatalf("program %d left after Close", now)
	}
}

// xdpProgram returns the id of the XDP program on node i's p0 (0: none).
func xdpProgram(t *testing.T, f *veth.Fabric, i int) uint32 {
	t.Helper()
	var id uint32
	if err := f.Do(i, func() error {
		l, err := netlink.LinkByName("p0")
		if err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached {
			id = l.Attrs().Xdp.ProgId
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// Close wakes a blocked reader with ErrPortClosed; deadlines bound reads.
func TestCloseAndDeadline(t *testing.T) {
	f := pair(t)
	for _, force := range []bool{false, true} {
		p, kind := openIn(t, f, 0, xdp.Options{ForceAFPacket: force})
		p.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		if _, err := p.ReadDatagram(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%v: read past deadline: %v", kind, err)
		}
		p.SetReadDeadline(time.Time{})
		errc := make(chan error, 1)
		go func() { _, err := p.ReadDatagram(make([]byte, 8)); errc <- err }()
		time.Sleep(20 * time.Millisecond)
		if err := p.Close(); err != nil {
			t.Fatalf("%v: close: %v", kind, err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, noc.ErrPortClosed) {
				t.Fatalf("%v: blocked read returned %v, want ErrPortClosed", kind, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%v: Close did not wake the reader", kind)
		}
		if err := p.WriteDatagram([]byte{1}); !errors.Is(err, noc.ErrPortClosed) {
			t.Fatalf("%v: write after close: %v", kind, err)
		}
		if p.Close() != nil {
			t.Fatalf("%v: second Close failed", kind)
		}
	}
	if xdpProgram(t, f, 0) != 0 {
		t.Fatal("program left on the device after Close")
	}
}

// A link that goes down loses what is sent meanwhile, without breaking
// the ports; traffic flows again when it comes back. A device of the
// common MTU of 1500 works with single-buffer frames.
func TestLinkDownUpAndSmallMTU(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	f, err := veth.Up(veth.Spec{Dir: dir, Nodes: 2, Edges: []veth.Edge{{A: 0, PortA: 0, B: 1, PortB: 0}}, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { veth.Down(dir) })
	a := openXDPIn(t, f, 0, xdp.Options{})
	b := openXDPIn(t, f, 1, xdp.Options{})
	if a.MTU() != 1486 {
		t.Fatalf("MTU %d, want 1486", a.MTU())
	}
	if got := stream(t, a, b, 1000, 64); got < 950 {
		t.Fatalf("%d of 1000 arrived", got)
	}
	if err := f.SetLink(0, 1, false); err != nil {
		t.Fatal(err)
	}
	downErrs := 0
	for i := range 50 {
		err := a.WriteDatagram([]byte{byte(i)})
		if errors.Is(err, syscall.ENETDOWN) {
			downErrs++
		} else if err != nil {
			t.Fatalf("write on a down link: %v", err)
		}
	}
	if downErrs < 49 {
		t.Errorf("%d of 50 writes on a down link reported ENETDOWN", downErrs)
	}
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := b.ReadDatagram(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read across a down link: %v", err)
	}
	if err := f.SetLink(0, 1, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // carrier
	// At most the one frame queued when the link went down is still sent.
	a.WriteDatagram([]byte("after"))
	stale := 0
	for {
		b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := b.ReadDatagram(make([]byte, 8))
		if err != nil {
			break
		}
		if n == 1 {
			stale++
		}
	}
	if stale > 1 {
		t.Errorf("%d stale datagrams sent after the link came back, want at most 1", stale)
	}
	if got := stream(t, a, b, 1000, 64); got < 950 {
		t.Fatalf("after the link came back %d of 1000 arrived", got)
	}
	t.Logf("a counters %v", counters(t, a))
}

// Opening and closing ports leaks no file descriptor (socket, BPF maps,
// program, link) and no mapping (rings, UMEM).
func TestCloseReleasesEverything(t *testing.T) {
	f := pair(t)
	count := func(path string) int {
		if path == "/proc/self/fd" {
			ents, err := os.ReadDir(path)
			if err != nil {
				t.Fatal(err)
			}
			return len(ents)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte{'\n'})
	}
	cycle := func() {
		a := openXDPIn(t, f, 0, xdp.Options{PinDir: f.PinDir(0, 0)})
		c, _ := openIn(t, f, 1, xdp.Options{ForceAFPacket: true})
		a.WriteDatagram([]byte("x"))
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // first use sets up lazily created runtime state
	fds, maps := count("/proc/self/fd"), count("/proc/self/maps")
	const n = 20
	for range n {
		cycle()
	}
	if got := count("/proc/self/fd"); got != fds {
		t.Errorf("%d file descriptors after %d open/close cycles, %d before", got, n, fds)
	}
	// A leaking port would leave 5 mappings per cycle (UMEM and 4 rings).
	if got := count("/proc/self/maps"); got > maps+n {
		t.Errorf("%d mappings after %d open/close cycles, %d before", got, n, maps)
	}
	if xdpProgram(t, f, 0) != 0 {
		t.Error("program left on the device")
	}
	if ents, _ := os.ReadDir(f.PinDir(0, 0)); len(ents) != 0 {
		t.Errorf("pins left: %v", ents)
	}
}

// TestTxBatchHoldsUntilFlush: with TxBatch the port queues datagrams and
// wakes the kernel once per batch or on Flush; after Flush every datagram
// arrives.
func TestTxBatchHoldsUntilFlush(t *testing.T) {
	f := pair(t)
	a := openXDPIn(t, f, 0, xdp.Options{TxBatch: 8})
	b := openXDPIn(t, f, 1, xdp.Options{})
	// let the peer MAC be learned: without it frames go to broadcast, which is fine
	const n = 20 // two full batches kick by themselves, 4 wait for Flush
	for i := range n {
		if err := a.WriteDatagram([]byte{byte(i), 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	got := map[byte]bool{}
	buf := make([]byte, b.MTU())
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < n {
		k, err := b.ReadDatagram(buf)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
		if k == 4 {
			got[buf[0]] = true
		}
	}
	if err := a.Flush(); err != nil { // nothing pending: a no-op
		t.Fatal(err)
	}
}
