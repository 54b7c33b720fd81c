package reallink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Kernel-side constants.
const (
	// kernelBatch is how many datagrams one sendmmsg/recvmmsg moves.
	kernelBatch = 64
	// rcvBuf is the counter's socket buffer (forced past rmem_max), so
	// that the counter's socket is not what drops.
	rcvBuf = 8 << 20
	// udpPort is the port the kernel baselines use.
	udpPort = 9000
	// maxSendFailures bounds transient send errors in a row (a full device
	// queue) before the blaster gives up.
	maxSendFailures = 10000
)

// KernelForward sends count UDP datagrams with payload bytes each from node
// from to node to of a line made an IPv4 network by RouteIPv4 (from < to),
// as fast as sendmmsg takes them, and counts at to what arrives (recvmmsg).
// Forwarded is the transmit counter of the last middle node's East device
// (0 when from and to are neighbours). It returns when every datagram
// arrived, when nothing arrived for a stall bound after the last send, or
// when ctx ends.
func KernelForward(ctx context.Context, f *veth.Fabric, from, to, payload, count int) (Flow, error) {
	if from >= to {
		return Flow{}, fmt.Errorf("reallink: KernelForward from %d to %d: want from < to", from, to)
	}
	dst := netip.AddrPortFrom(IPv4(to, West), udpPort)
	rx, err := listenUDPIn(f, to, dst)
	if err != nil {
		return Flow{}, err
	}
	defer rx.Close()
	if err := forceRcvBuf(rx, rcvBuf); err != nil {
		return Flow{}, err
	}
	var tx *net.UDPConn
	if err := f.Do(from, func() (err error) {
		tx, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return Flow{}, fmt.Errorf("reallink: UDP socket on node %d: %w", from, err)
	}
	defer tx.Close()

	middle := to - 1
	var fwd0 uint64
	if middle > from {
		if fwd0, err = txPackets(f, middle, Device(East)); err != nil {
			return Flow{}, err
		}
	}

	// The counter.
	var got atomic.Uint64
	var lastAt atomic.Int64 // UnixNano of the last arrival
	var sendDone atomic.Bool
	counted := make(chan error, 1)
	go func() { counted <- countUDP(ctx, rx, uint64(count), &got, &lastAt, &sendDone) }()

	// The blaster.
	var fl Flow
	msgs := make([]ipv4.Message, kernelBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, payload)}
	}
	pc := ipv4.NewPacketConn(tx)
	t0 := time.Now()
	var sendErr error
	for fails := 0; fl.Sent < count && ctx.Err() == nil; {
		n := min(kernelBatch, count-fl.Sent)
		k, err := pc.WriteBatch(msgs[:n], 0)
		fl.Sent += k
		if err == nil {
			fails = 0
			continue
		}
		transient := errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ECONNREFUSED)
		if fails++; !transient || fails > maxSendFailures {
			sendErr = fmt.Errorf("reallink: send (after %d failures in a row): %w", fails, err)
			break
		}
	}
	fl.SendTime = time.Since(t0)
	sendDone.Store(true)
	cerr := <-counted
	fl.Delivered = got.Load()
	if at := lastAt.Load(); at > t0.UnixNano() {
		fl.Elapsed = time.Duration(at - t0.UnixNano())
	}
	if middle > from {
		fwd1, err := txPackets(f, middle, Device(East))
		if err != nil {
			return fl, err
		}
		fl.Forwarded = fwd1 - fwd0
	}
	return fl, errors.Join(sendErr, cerr, ctx.Err())
}

// countUDP counts datagrams arriving on c until want arrived, or nothing
// arrived for stallBound after sendDone, or ctx ends.
func countUDP(ctx context.Context, c *net.UDPConn, want uint64, got *atomic.Uint64, lastAt *atomic.Int64, sendDone *atomic.Bool) error {
	msgs := make([]ipv4.Message, kernelBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	pc := ipv4.NewPacketConn(c)
	quietSince := time.Now()
	for got.Load() < want && ctx.Err() == nil {
		if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			return fmt.Errorf("reallink: counter: %w", err)
		}
		n, err := pc.ReadBatch(msgs, 0)
		if n > 0 {
			got.Add(uint64(n))
			now := time.Now()
			lastAt.Store(now.UnixNano())
			quietSince = now
			continue
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("reallink: counter: %w", err)
		}
		if !sendDone.Load() {
			quietSince = time.Now()
		} else if time.Since(quietSince) > stallBound {
			return nil
		}
	}
	return nil
}

// KernelPingPong times count UDP round trips of payload bytes from node a
// to an echo on node b, its neighbour in a line made an IPv4 network by
// RouteIPv4: the plain-socket baseline of a one-hop request/response.
func KernelPingPong(ctx context.Context, f *veth.Fabric, a, b, payload, count int) ([]time.Duration, error) {
	var aAddr, bAddr netip.Addr
	switch b {
	case a + 1:
		aAddr, bAddr = IPv4(a, East), IPv4(b, West)
	case a - 1:
		aAddr, bAddr = IPv4(a, West), IPv4(b, East)
	default:
		return nil, fmt.Errorf("reallink: ping-pong between %d and %d: not neighbours", a, b)
	}
	echoAddr := netip.AddrPortFrom(bAddr, udpPort)
	srv, err := listenUDPIn(f, b, echoAddr)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	var c *net.UDPConn
	if err := f.Do(a, func() (err error) {
		c, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(aAddr, 0)), net.UDPAddrFromAddrPort(echoAddr))
		return err
	}); err != nil {
		return nil, fmt.Errorf("reallink: UDP socket on node %d: %w", a, err)
	}
	defer c.Close()

	sctx, stop := context.WithCancel(ctx)
	echoed := make(chan error, 1)
	go func() { echoed <- UDPEcho(sctx, srv) }()
	defer func() {
		stop()
		<-echoed
	}()

	out := make([]byte, payload)
	in := make([]byte, 2048)
	rtts := make([]time.Duration, 0, count)
	for range count {
		if err := ctx.Err(); err != nil {
			return rtts, err
		}
		if err := c.SetReadDeadline(time.Now().Add(echoBound)); err != nil {
			return rtts, err
		}
		t0 := time.Now()
		if _, err := c.Write(out); err != nil {
			return rtts, fmt.Errorf("reallink: ping: %w", err)
		}
		if _, err := c.Read(in); err != nil {
			return rtts, fmt.Errorf("reallink: pong: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// UDPEcho sends every datagram arriving on c back to its sender until ctx
// ends (noticed within 50 ms).
func UDPEcho(ctx context.Context, c *net.UDPConn) error {
	buf := make([]byte, 2048)
	for ctx.Err() == nil {
		if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			return err
		}
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reallink: echo: %w", err)
		}
		if _, err := c.WriteToUDPAddrPort(buf[:n], from); err != nil {
			return fmt.Errorf("reallink: echo: %w", err)
		}
	}
	return nil
}

// listenUDPIn binds a UDP socket to addr inside node i's namespace.
func listenUDPIn(f *veth.Fabric, i int, addr netip.AddrPort) (*net.UDPConn, error) {
	var c *net.UDPConn
	if err := f.Do(i, func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	}); err != nil {
		return nil, fmt.Errorf("reallink: UDP socket on node %d: %w", i, err)
	}
	return c, nil
}

// forceRcvBuf sets SO_RCVBUFFORCE (root may exceed rmem_max).
func forceRcvBuf(c *net.UDPConn, n int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("reallink: SO_RCVBUFFORCE: %w", serr)
	}
	return nil
}
