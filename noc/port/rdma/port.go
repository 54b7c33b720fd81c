//go:build linux && cgo && rdma

package rdma

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aitherion/dpu/noc"
)

// waitSlice bounds one blocking wait of the reader, so that a closed port
// or a reset queue pair is noticed promptly.
const waitSlice = 100 * time.Millisecond

// inlineID marks an inline send's completion (it holds no send slot).
const inlineID = ^uint64(0)

// Port is a noc.Port over one RC queue pair. Safe for one concurrent reader
// and one concurrent writer, plus SetReadDeadline and Close from anywhere.
type Port struct {
	name string
	log  *slog.Logger
	o    Options
	v    *verbs

	// life: every call that touches the QP holds it shared; Close takes
	// it exclusively before it frees the QP. qmu: the reader and writer
	// hold it shared around QP operations, a reset exclusively.
	life sync.RWMutex
	qmu  sync.RWMutex

	connected atomic.Bool
	failed    atomic.Bool   // a completion reported an error: reset
	resets    atomic.Uint64 // generation of the send-slot bookkeeping
	closed    atomic.Bool
	deadline  atomic.Int64 // unix ns; 0: none

	// writer-only
	free      []int
	inFlight  int
	resetSeen uint64

	// bootstrap
	udp    *net.UDPConn
	remote netip.AddrPort
	boot   *Bootstrap
	done   chan struct{}
	wg     sync.WaitGroup

	stats struct {
		txDatagrams, txInline, rxDatagrams, busy, notConnected atomic.Uint64
		wcErrors, resets, connects, foreign, badHandles        atomic.Uint64
	}
}

var _ noc.Port = (*Port)(nil)

// Open opens device dev (an RDMA device name, such as rxe0 or mlx5_0) and
// bootstraps its queue pair over UDP between local and remote ("host:port"
// on the RoCE netdev's addresses).
func Open(dev, local, remote string, o Options) (noc.Port, error) {
	o, err := o.withDefaults(dev)
	if err != nil {
		return nil, err
	}
	raddr, err := net.ResolveUDPAddr("udp", remote)
	if err != nil {
		return nil, fmt.Errorf("rdma: remote %q: %w", remote, err)
	}
	laddr, err := net.ResolveUDPAddr("udp", local)
	if err != nil {
		return nil, fmt.Errorf("rdma: local %q: %w", local, err)
	}
	v, err := openVerbs(dev, o)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", laddr)
	if err != nil {
		v.close()
		return nil, fmt.Errorf("rdma: bootstrap socket %s: %w", local, err)
	}
	p := &Port{
		name:   o.Name,
		log:    o.Logger.With("port", o.Name, "dev", dev),
		o:      o,
		v:      v,
		udp:    c,
		remote: netip.AddrPortFrom(raddr.AddrPort().Addr().Unmap(), raddr.AddrPort().Port()),
		boot:   NewBootstrap(rand.Uint64() | 1),
		done:   make(chan struct{}),
	}
	p.resetSlots()
	p.log.Info("rdma port", "qpn", v.qpn(), "gid", netip.AddrFrom16(v.gid), "gid_index", v.gidIndex,
		"path_mtu", 128<<v.pathMTU, "inline", v.inline, "slots", v.slots)
	p.wg.Add(1)
	go p.bootstrap()
	return p, nil
}

// Name implements noc.Port.
func (p *Port) Name() string { return p.name }

// MTU implements noc.Port.
func (p *Port) MTU() int { return p.o.MTU }

// WriteDatagram implements noc.Port: small datagrams go inline, others
// from a registered send slot.
func (p *Port) WriteDatagram(b []byte) error {
	if len(b) > p.o.MTU {
		return fmt.Errorf("%w: %d > %d", ErrTooLarge, len(b), p.o.MTU)
	}
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	if !p.connected.Load() {
		p.stats.notConnected.Add(1)
		return ErrNotConnected
	}
	p.qmu.RLock()
	defer p.qmu.RUnlock()
	if r := p.resets.Load(); r != p.resetSeen {
		p.resetSlots()
		p.resetSeen = r
	}
	p.reap()
	if p.inFlight >= p.v.slots {
		p.stats.busy.Add(1)
		return ErrBusy
	}
	id, slot := inlineID, -1
	if len(b) > p.v.inline {
		slot = p.free[len(p.free)-1]
		id = uint64(slot)
	}
	if err := p.v.postSend(b, slot, id); err != nil {
		p.failed.Store(true)
		return err
	}
	if slot >= 0 {
		p.free = p.free[:len(p.free)-1]
	} else {
		p.stats.txInline.Add(1)
	}
	p.inFlight++
	p.stats.txDatagrams.Add(1)
	return nil
}

// resetSlots makes every send slot free (writer, or before it runs).
func (p *Port) resetSlots() {
	p.free = p.free[:0]
	for i := range p.v.slots {
		p.free = append(p.free, i)
	}
	p.inFlight = 0
}

// reap takes the send completions, freeing their slots.
func (p *Port) reap() {
	for {
		id, st, _, ok := p.v.poll(p.v.scq)
		if !ok {
			return
		}
		p.inFlight--
		if id != inlineID && int(id) < p.v.slots {
			p.free = append(p.free, int(id))
		}
		if st != wcSuccess {
			p.wcError("send", st)
		}
	}
}

func (p *Port) wcError(dir string, st int) {
	p.stats.wcErrors.Add(1)
	if !p.failed.Swap(true) && st != wcFlush {
		p.log.Warn("rdma completion error: resetting the queue pair", "dir", dir, "status", wcStatus(st))
	}
}

// ReadDatagram implements noc.Port.
func (p *Port) ReadDatagram(b []byte) (int, error) {
	p.life.RLock()
	defer p.life.RUnlock()
	for {
		if p.closed.Load() {
			return 0, noc.ErrPortClosed
		}
		n, ok, err := p.tryRead(b)
		if ok || err != nil {
			return n, err
		}
		wait := waitSlice
		if d := p.deadline.Load(); d != 0 {
			left := time.Until(time.Unix(0, d))
			if left <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			wait = min(wait, left)
		}
		if err := p.v.arm(); err != nil {
			return 0, err
		}
		if n, ok, err := p.tryRead(b); ok || err != nil {
			return n, err
		}
		if err := p.v.wait(int((wait + time.Millisecond - 1) / time.Millisecond)); err != nil {
			return 0, err
		}
	}
}

// tryRead takes one receive completion, if there is one.
func (p *Port) tryRead(b []byte) (int, bool, error) {
	p.qmu.RLock()
	defer p.qmu.RUnlock()
	for {
		id, st, n, ok := p.v.poll(p.v.rcq)
		if !ok {
			return 0, false, nil
		}
		if st != wcSuccess || int(id) >= p.v.slots {
			p.wcError("receive", st)
			continue
		}
		m := copy(b, p.v.received(int(id), n))
		if err := p.v.postRecv(int(id)); err != nil {
			p.failed.Store(true)
		}
		p.stats.rxDatagrams.Add(1)
		return m, true, nil
	}
}

// SetReadDeadline implements noc.Port.
func (p *Port) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		p.deadline.Store(0)
	} else {
		p.deadline.Store(t.UnixNano())
	}
	p.life.RLock()
	if !p.closed.Load() {
		p.v.wakeUp()
	}
	p.life.RUnlock()
	return nil
}

// Close implements noc.Port.
func (p *Port) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	close(p.done)
	p.udp.Close()
	p.v.wakeUp()
	p.wg.Wait()
	p.life.Lock() // every reader and writer has left
	p.v.close()
	p.life.Unlock()
	return nil
}

// Counters returns the port's counters by name.
func (p *Port) Counters() (map[string]uint64, error) {
	s := &p.stats
	conn := uint64(0)
	if p.connected.Load() {
		conn = 1
	}
	return map[string]uint64{
		"rdma_connected":      conn,
		"rdma_tx_datagrams":   s.txDatagrams.Load(),
		"rdma_tx_inline":      s.txInline.Load(),
		"rdma_rx_datagrams":   s.rxDatagrams.Load(),
		"rdma_busy":           s.busy.Load(),
		"rdma_not_connected":  s.notConnected.Load(),
		"rdma_wc_errors":      s.wcErrors.Load(),
		"rdma_qp_resets":      s.resets.Load(),
		"rdma_qp_connects":    s.connects.Load(),
		"rdma_boot_foreign":   s.foreign.Load(),
		"rdma_boot_malformed": s.badHandles.Load(),
	}, nil
}

// bootstrap runs the handle exchange: it greets the peer, connects the
// queue pair when the greeting completes, and resets it when it fails or
// the peer starts over.
func (p *Port) bootstrap() {
	defer p.wg.Done()
	buf := make([]byte, 2*HandleLen)
	psn := rand.Uint32() & 0xFFFFFF
	var lastSent time.Time
	for {
		if p.closed.Load() {
			return
		}
		if p.failed.Load() {
			p.resetQP()
			psn = rand.Uint32() & 0xFFFFFF
			lastSent = time.Time{}
		}
		every := p.o.Greeting
		if p.connected.Load() {
			every *= 25
		}
		if time.Since(lastSent) >= every {
			p.sendHandle(psn)
			lastSent = time.Now()
		}
		_ = p.udp.SetReadDeadline(time.Now().Add(p.o.Greeting))
		n, from, err := p.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if from.Port() != p.remote.Port() || from.Addr().Unmap() != p.remote.Addr() {
			p.stats.foreign.Add(1)
			continue
		}
		var h Handle
		if err := h.Decode(buf[:n]); err != nil {
			p.stats.badHandles.Add(1)
			continue
		}
		switch p.boot.Hear(&h) {
		case Reset:
			p.log.Info("rdma peer changed: resetting the queue pair", "peer_session", h.Self.Session, "peer_gen", h.Self.Gen)
			p.resetQP()
			psn = rand.Uint32() & 0xFFFFFF
			lastSent = time.Time{}
		case Connect:
			if int(h.MTU) < p.o.MTU {
				p.log.Warn("rdma peer's receive slots are smaller than this port's MTU", "peer_mtu", h.MTU, "mtu", p.o.MTU)
			}
			p.qmu.Lock()
			err := p.v.connect(&h, psn)
			p.qmu.Unlock()
			if err != nil {
				p.log.Warn("rdma connect", "err", err)
				p.failed.Store(true)
				continue
			}
			p.boot.DidConnect()
			p.stats.connects.Add(1)
			p.connected.Store(true)
			p.log.Info("rdma queue pair connected", "peer_qpn", h.QPN, "peer_gid", h.GID)
			p.sendHandle(psn)
			lastSent = time.Now()
		}
	}
}

// resetQP takes the queue pair back to INIT with a new generation.
func (p *Port) resetQP() {
	p.connected.Store(false)
	p.qmu.Lock()
	err := p.v.reset()
	p.resets.Add(1)
	p.qmu.Unlock()
	p.failed.Store(err != nil)
	if err != nil {
		p.log.Warn("rdma reset", "err", err)
	}
	p.boot.DidReset()
	p.stats.resets.Add(1)
}

func (p *Port) sendHandle(psn uint32) {
	h := Handle{QPN: p.v.qpn(), PSN: psn, GID: netip.AddrFrom16(p.v.gid), LID: p.v.lid,
		MTU: uint16(p.o.MTU), Slots: uint32(p.v.slots)}
	p.boot.Fill(&h)
	var b [HandleLen]byte
	if _, err := h.Encode(b[:]); err != nil {
		return
	}
	_, _ = p.udp.WriteToUDPAddrPort(b[:], p.remote)
}
