package afpacket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/ether"
	"golang.org/x/sys/unix"
)

// Errors callers branch on.
var (
	// ErrTooLarge: the datagram is larger than the port's MTU.
	ErrTooLarge = errors.New("afpacket: datagram larger than the port MTU")
	// ErrTxBusy: the socket's send buffer stayed full; the datagram was
	// not sent.
	ErrTxBusy = errors.New("afpacket: send buffer full")
)

// txSpins bounds how often WriteDatagram retries a full send buffer.
const txSpins = 64

// Options configure a port.
type Options struct {
	// Name is the port's name; the device's name when empty.
	Name string
	// PeerMAC fixes the neighbour's address; learned when empty.
	PeerMAC net.HardwareAddr
}

// Port is a NoC port over an AF_PACKET socket. It implements noc.Port and
// noc.Poller; it is safe for one reader and one writer at a time.
type Port struct {
	name string
	dev  string
	mtu  int
	nb   *ether.Neighbour
	file *os.File
	conn syscall.RawConn

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	rxMu    sync.Mutex
	rxFrame []byte // one whole frame as received
	rxDst   []byte // the caller's buffer of the read in progress
	rxN     int
	rxOK    bool
	rxErr   error
	readFn  func(fd uintptr) bool
	tryFn   func(fd uintptr)

	txMu    sync.Mutex
	txFrame []byte
	txErr   error
	writeFn func(fd uintptr)

	rxDatagrams, rxBytes, rxRefused, rxTruncated atomic.Uint64
	txDatagrams, txBytes, txBusy                 atomic.Uint64

	statsMu                sync.Mutex
	kernPackets, kernDrops uint64 // PACKET_STATISTICS, summed (reading resets the kernel's)
}

// Open opens a port on dev in the calling thread's network namespace.
func Open(dev string, opts Options) (_ *Port, err error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("afpacket: device %q: %w", dev, err)
	}
	if ifi.MTU <= ether.HeaderLen {
		return nil, fmt.Errorf("afpacket: device %s MTU %d too small", dev, ifi.MTU)
	}
	own, err := ether.MACFrom(ifi.HardwareAddr)
	if err != nil {
		return nil, fmt.Errorf("afpacket: device %s: %w", dev, err)
	}
	var peer ether.MAC
	if len(opts.PeerMAC) > 0 {
		if peer, err = ether.MACFrom(opts.PeerMAC); err != nil {
			return nil, err
		}
	}
	proto := htons(ether.EtherType)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("afpacket: open socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	// Frames this host sends would otherwise come back on the same socket.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return nil, fmt.Errorf("afpacket: ignore outgoing: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		return nil, fmt.Errorf("afpacket: bind to %s: %w", dev, err)
	}
	name := opts.Name
	if name == "" {
		name = dev
	}
	p := &Port{
		name:    name,
		dev:     dev,
		mtu:     ifi.MTU - ether.HeaderLen,
		nb:      ether.NewNeighbour(own, peer),
		rxFrame: make([]byte, ifi.MTU+ether.HeaderLen),
		txFrame: make([]byte, ifi.MTU+ether.HeaderLen),
	}
	p.readFn = p.readReady
	p.tryFn = func(fd uintptr) { p.readReady(fd) }
	p.writeFn = p.writeFrame
	p.file = os.NewFile(uintptr(fd), "afpacket")
	if p.conn, err = p.file.SyscallConn(); err != nil {
		p.file.Close()
		return nil, fmt.Errorf("afpacket: raw conn: %w", err)
	}
	return p, nil
}

// Name is the port's name.
func (p *Port) Name() string { return p.name }

// MTU is the largest datagram: the device MTU less the Ethernet header.
func (p *Port) MTU() int { return p.mtu }

// Device is the network device the port is bound to.
func (p *Port) Device() string { return p.dev }

// Neighbour is the far end of the link as this port knows it.
func (p *Port) Neighbour() *ether.Neighbour { return p.nb }

// WriteDatagram sends b to the neighbour in one Ethernet frame.
func (p *Port) WriteDatagram(b []byte) error {
	if len(b) > p.mtu {
		return fmt.Errorf("%w: %d > %d on %s", ErrTooLarge, len(b), p.mtu, p.name)
	}
	p.txMu.Lock()
	defer p.txMu.Unlock()
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	ether.PutHeader(p.txFrame, p.nb.Header())
	n := ether.HeaderLen + copy(p.txFrame[ether.HeaderLen:], b)
	p.txFrame = p.txFrame[:n]
	defer func() { p.txFrame = p.txFrame[:cap(p.txFrame)] }()
	for spin := 0; ; spin++ {
		p.txErr = nil
		if err := p.conn.Control(p.writeFn); err != nil {
			return p.closedOr(fmt.Errorf("afpacket: send on %s: %w", p.name, err))
		}
		switch p.txErr {
		case nil:
			p.txDatagrams.Add(1)
			p.txBytes.Add(uint64(len(b)))
			return nil
		case unix.EAGAIN, unix.ENOBUFS:
			if spin < txSpins {
				runtime.Gosched()
				continue
			}
			p.txBusy.Add(1)
			return fmt.Errorf("%w: %s", ErrTxBusy, p.name)
		}
		return fmt.Errorf("afpacket: send on %s: %w", p.name, p.txErr)
	}
}

func (p *Port) writeFrame(fd uintptr) {
	if _, err := unix.Write(int(fd), p.txFrame); err != nil {
		p.txErr = err
	}
}

// ReadDatagram copies the next NoC datagram into b.
func (p *Port) ReadDatagram(b []byte) (int, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	if p.closed.Load() {
		return 0, noc.ErrPortClosed
	}
	p.rxDst, p.rxOK, p.rxErr = b, false, nil
	err := p.conn.Read(p.readFn)
	p.rxDst = nil
	switch {
	case p.rxOK:
		return p.rxN, nil
	case p.rxErr != nil:
		return 0, fmt.Errorf("afpacket: read %s: %w", p.name, p.rxErr)
	case p.closed.Load():
		return 0, noc.ErrPortClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, os.ErrDeadlineExceeded
	}
	return 0, fmt.Errorf("afpacket: read %s: %w", p.name, err)
}

// readReady reads frames until one is for this port or the socket is empty.
func (p *Port) readReady(fd uintptr) bool {
	for {
		n, err := unix.Read(int(fd), p.rxFrame)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return false
		case err != nil:
			p.rxErr = err
			return true
		}
		if m, ok := p.accept(p.rxFrame[:n], p.rxDst); ok {
			p.rxN, p.rxOK = m, true
			return true
		}
	}
}

// TryReadDatagram returns the next datagram if one is waiting.
func (p *Port) TryReadDatagram(b []byte) (int, bool, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	if p.closed.Load() {
		return 0, false, noc.ErrPortClosed
	}
	p.rxDst, p.rxOK, p.rxErr = b, false, nil
	err := p.conn.Control(p.tryFn)
	p.rxDst = nil
	switch {
	case p.rxOK:
		return p.rxN, true, nil
	case p.rxErr != nil:
		return 0, false, fmt.Errorf("afpacket: read %s: %w", p.name, p.rxErr)
	case err != nil:
		return 0, false, p.closedOr(fmt.Errorf("afpacket: read %s: %w", p.name, err))
	}
	return 0, false, nil
}

// accept copies the datagram of frame into b when the frame is for this
// port.
func (p *Port) accept(frame, b []byte) (int, bool) {
	h, err := ether.ParseHeader(frame)
	if err != nil || !p.nb.Accept(h) {
		p.rxRefused.Add(1)
		return 0, false
	}
	dgram := frame[ether.HeaderLen:]
	n := copy(b, dgram)
	if n < len(dgram) {
		p.rxTruncated.Add(1)
	}
	p.rxDatagrams.Add(1)
	p.rxBytes.Add(uint64(len(dgram)))
	return n, true
}

// SetReadDeadline bounds ReadDatagram.
func (p *Port) SetReadDeadline(t time.Time) error {
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	if err := p.file.SetReadDeadline(t); err != nil {
		return fmt.Errorf("afpacket: set deadline on %s: %w", p.name, err)
	}
	return nil
}

// Counters returns the port's named counters: its own (rx_*, tx_*) and the
// socket's kernel statistics (packet_*).
func (p *Port) Counters() (map[string]uint64, error) {
	if p.closed.Load() {
		return nil, noc.ErrPortClosed
	}
	var st *unix.TpacketStats
	var serr error
	if err := p.conn.Control(func(fd uintptr) {
		st, serr = unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	}); err != nil {
		return nil, p.closedOr(err)
	}
	if serr != nil {
		return nil, fmt.Errorf("afpacket: %s statistics: %w", p.name, serr)
	}
	p.statsMu.Lock()
	p.kernPackets += uint64(st.Packets)
	p.kernDrops += uint64(st.Drops)
	packets, drops := p.kernPackets, p.kernDrops
	p.statsMu.Unlock()
	return map[string]uint64{
		"rx_datagrams":   p.rxDatagrams.Load(),
		"rx_bytes":       p.rxBytes.Load(),
		"rx_refused":     p.rxRefused.Load(),
		"rx_truncated":   p.rxTruncated.Load(),
		"tx_datagrams":   p.txDatagrams.Load(),
		"tx_bytes":       p.txBytes.Load(),
		"tx_busy":        p.txBusy.Load(),
		"packet_packets": packets,
		"packet_drops":   drops,
	}, nil
}

// Close releases the socket; a blocked ReadDatagram returns
// noc.ErrPortClosed.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.closeErr = p.file.Close()
	})
	return p.closeErr
}

func (p *Port) closedOr(err error) error {
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	return err
}

// htons is v in network byte order, as socket(2) and bind(2) want it.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

var (
	_ noc.Port   = (*Port)(nil)
	_ noc.Poller = (*Port)(nil)
)

// ReadyFD implements noc.Waitable: the packet socket's descriptor.
func (p *Port) ReadyFD() (int, error) {
	fd := -1
	if err := p.conn.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return -1, fmt.Errorf("afpacket: %w", err)
	}
	return fd, nil
}
