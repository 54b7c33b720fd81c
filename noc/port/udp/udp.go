package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aitherion/dpu/noc"
)

// MaxMTU is the largest UDP payload over IPv4.
const MaxMTU = 65507

// Errors of a Port.
var (
	// ErrTooLarge is returned for a datagram longer than the MTU.
	ErrTooLarge = errors.New("udp: datagram larger than MTU")
	// ErrAddress reports an unusable local or remote address or MTU.
	ErrAddress = errors.New("udp: bad address")
)

// Stats are a Port's counters.
type Stats struct {
	// Foreign counts datagrams dropped because they came from an address
	// other than the remote.
	Foreign uint64
}

// Port is a noc.Port over UDP. It is safe for one concurrent reader and one
// concurrent writer (plus SetReadDeadline and Close from anywhere).
type Port struct {
	name    string
	conn    *sock
	raw     syscall.RawConn // conn
	remote  netip.AddrPort
	mtu     int
	foreign atomic.Uint64
	poll    poller      // TryReadDatagram state; reader only
	rbatch  mmsg        // TryReadDatagrams state; reader only
	wbatch  mmsg        // WriteDatagrams state; writer only
	noGSO   atomic.Bool // the kernel refused UDP_SEGMENT on this socket
	txName  syscall.RawSockaddrAny
}

var (
	_ noc.Port        = (*Port)(nil)
	_ noc.Poller      = (*Port)(nil)
	_ noc.BatchWriter = (*Port)(nil)
	_ noc.BatchPoller = (*Port)(nil)
)

// Open binds local ("host:port"; port 0 picks one) and sends to remote.
func Open(local, remote string, mtu int) (*Port, error) {
	laddr, err := net.ResolveUDPAddr("udp", local)
	if err != nil {
		return nil, fmt.Errorf("%w: local %q: %w", ErrAddress, local, err)
	}
	raddr, err := net.ResolveUDPAddr("udp", remote)
	if err != nil {
		return nil, fmt.Errorf("%w: remote %q: %w", ErrAddress, remote, err)
	}
	c, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("udp: open %s: %w", local, err)
	}
	p, err := New(c, raddr.AddrPort(), mtu)
	if err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

// New makes a Port of a bound socket, which it takes over: it takes the
// socket out of the runtime's network poller (c is closed; the Port keeps a
// duplicate of its descriptor, which Close closes).
func New(c *net.UDPConn, remote netip.AddrPort, mtu int) (*Port, error) {
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	if !remote.IsValid() || remote.Addr().IsUnspecified() || remote.Port() == 0 {
		return nil, fmt.Errorf("%w: remote %v", ErrAddress, remote)
	}
	if mtu < 1 || mtu > MaxMTU {
		return nil, fmt.Errorf("%w: MTU %d outside [1, %d]", ErrAddress, mtu, MaxMTU)
	}
	s, err := detach(c)
	if err != nil {
		return nil, err
	}
	if err := sizeBuffers(s.fd); err != nil {
		_ = s.close()
		return nil, err
	}
	p := &Port{
		name:   fmt.Sprintf("udp:%v->%v", s.local, remote),
		conn:   s,
		raw:    s,
		remote: remote,
		mtu:    mtu,
	}
	p.poll.init(p)
	return p, nil
}

// Name implements noc.Port.
func (p *Port) Name() string { return p.name }

// MTU implements noc.Port.
func (p *Port) MTU() int { return p.mtu }

// LocalAddr returns the bound address.
func (p *Port) LocalAddr() netip.AddrPort { return p.conn.local }

// Remote returns the address every datagram goes to.
func (p *Port) Remote() netip.AddrPort { return p.remote }

// Stats returns the counters.
func (p *Port) Stats() Stats { return Stats{Foreign: p.foreign.Load()} }

// WriteDatagram implements noc.Port.
func (p *Port) WriteDatagram(b []byte) error {
	if len(b) > p.mtu {
		return fmt.Errorf("%w: %d > %d", ErrTooLarge, len(b), p.mtu)
	}
	one := [1][]byte{b}
	return p.WriteDatagrams(one[:])
}

// ReadDatagram implements noc.Port.
func (p *Port) ReadDatagram(b []byte) (int, error) {
	for {
		n, from, err := p.poll.wait(b)
		if err != nil {
			return 0, p.opError("read", err)
		}
		if p.fromRemote(from) {
			return n, nil
		}
		p.foreign.Add(1)
	}
}

// TryReadDatagram implements noc.Poller.
func (p *Port) TryReadDatagram(b []byte) (int, bool, error) {
	for {
		n, from, ok, err := p.poll.try(b)
		if err != nil {
			return 0, false, p.opError("read", err)
		}
		if !ok {
			return 0, false, nil
		}
		if p.fromRemote(from) {
			return n, true, nil
		}
		p.foreign.Add(1)
	}
}

// SetReadDeadline implements noc.Port.
func (p *Port) SetReadDeadline(t time.Time) error {
	p.conn.setReadDeadline(t)
	return nil
}

// Close implements noc.Port.
func (p *Port) Close() error {
	if err := p.conn.close(); err != nil {
		return p.opError("close", err)
	}
	return nil
}

func (p *Port) fromRemote(from netip.AddrPort) bool {
	return from.Port() == p.remote.Port() && from.Addr().Unmap() == p.remote.Addr()
}

// opError maps a closed socket to noc.ErrPortClosed and keeps deadline
// errors recognisable (errors.Is os.ErrDeadlineExceeded).
func (p *Port) opError(op string, err error) error {
	if errors.Is(err, net.ErrClosed) {
		return noc.ErrPortClosed
	}
	return fmt.Errorf("udp: %s %s: %w", op, p.name, err)
}

// ReadyFD implements noc.Waitable: the socket's descriptor.
func (p *Port) ReadyFD() (int, error) { return rawFD(p.raw) }

func rawFD(raw syscall.RawConn) (int, error) {
	fd := -1
	if err := raw.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return -1, fmt.Errorf("udp: %w", err)
	}
	return fd, nil
}
