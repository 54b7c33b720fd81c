package xdp

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/ether"
	"github.com/aitherion/dpu/noc/port/xdp/bpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Errors callers branch on.
var (
	// ErrTooLarge: the datagram is larger than the port's MTU.
	ErrTooLarge = errors.New("xdp: datagram larger than the port MTU")
	// ErrTxBusy: no TX frame or ring slot came free within the bound; the
	// datagram was not sent.
	ErrTxBusy = errors.New("xdp: transmit ring full")
)

const (
	defaultRingSize = 1024
	// rxReleaseBatch bounds how many received descriptors are held before
	// the RX slots and their frames go back to the kernel.
	rxReleaseBatch = 64
	// txWait bounds how long WriteDatagram waits for a TX frame.
	txWait = time.Millisecond
)

// Port is a NoC port over an AF_XDP socket bound to one receive queue of
// one device, with the NoC XDP program attached to the device. It
// implements noc.Port and noc.Poller; it is safe for one reader and one
// writer at a time (more are serialised).
type Port struct {
	name    string
	dev     string
	ifindex int
	queue   uint32
	mtu     int
	nb      *ether.Neighbour
	sock    *socket
	prog    *sharedProgram // the device's XDP program, shared by its queues' ports

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	rxMu           sync.Mutex
	rxBuf          []byte // the read in progress (under rxMu)
	rxN            int
	rxOK           bool
	rxSinceRelease uint32
	readFn         func(fd uintptr) bool
	wakeFn         func(fd uintptr)

	txMu      sync.Mutex
	txDown    bool // the last wake-up found the device down
	txDescs   []unix.XDPDesc
	txBatch   int // wake the kernel every txBatch writes (and on Flush)
	txPending int // writes queued since the last wake-up
	kickErr   error
	kickFn    func(fd uintptr)

	stats portStats
}

type portStats struct {
	rxDatagrams, rxBytes, rxRefused, rxTruncated, rxInvalid atomic.Uint64
	txDatagrams, txBytes, txBusy, txDropped                 atomic.Uint64
}

// NewPort opens an AF_XDP port on dev (in the calling thread's network
// namespace) without falling back to AF_PACKET; see [Open].
func NewPort(dev string, opts Options) (*Port, error) {
	opts = opts.withDefaults(dev)
	d, err := lookupDevice(dev)
	if err != nil {
		return nil, err
	}
	if d.rxQueues > 0 && int(opts.Queue) >= d.rxQueues {
		return nil, fmt.Errorf("xdp: device %s has %d receive queues, no queue %d", dev, d.rxQueues, opts.Queue)
	}
	prog, err := attachShared(d, opts)
	if err != nil {
		return nil, err
	}
	p, err := newQueuePort(d, opts.Queue, opts.Name, opts, prog)
	prog.release() // the port holds its own reference
	if err != nil {
		return nil, err
	}
	return p, nil
}

// device is what a port needs to know of its network device.
type device struct {
	name               string
	index, mtu         int
	rxQueues, txQueues int // as the kernel reports them; 0: unknown
	own, peer          ether.MAC
}

func lookupDevice(dev string) (device, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return device{}, fmt.Errorf("xdp: device %q: %w", dev, err)
	}
	attrs := link.Attrs()
	if attrs.MTU <= ether.HeaderLen {
		return device{}, fmt.Errorf("xdp: device %s MTU %d too small", dev, attrs.MTU)
	}
	own, err := ether.MACFrom(attrs.HardwareAddr)
	if err != nil {
		return device{}, fmt.Errorf("xdp: device %s: %w", dev, err)
	}
	return device{name: dev, index: attrs.Index, mtu: attrs.MTU, rxQueues: attrs.NumRxQueues,
		txQueues: attrs.NumTxQueues, own: own}, nil
}

// sharedProgram is the XDP program of a device, shared by the ports bound
// to its queues; the last port to close detaches it.
type sharedProgram struct {
	*bpf.Program
	refs atomic.Int32
}

// attachShared attaches the NoC program to d (one reference held) and pins
// its control maps when opts asks.
func attachShared(d device, opts Options) (*sharedProgram, error) {
	prog, err := bpf.Attach(d.index, bpf.Options{Mode: opts.AttachMode, ReplaceForeign: opts.ReplaceForeign})
	if err != nil {
		return nil, err
	}
	if opts.PinDir != "" {
		if err := prog.Pin(opts.PinDir); err != nil {
			prog.Close()
			return nil, err
		}
	}
	sp := &sharedProgram{Program: prog}
	sp.refs.Store(1)
	return sp, nil
}

func (sp *sharedProgram) acquire() { sp.refs.Add(1) }

// release drops one reference; the last one closes the program.
func (sp *sharedProgram) release() error {
	if sp.refs.Add(-1) == 0 {
		return sp.Program.Close()
	}
	return nil
}

// newQueuePort opens the AF_XDP socket of one queue of d and registers it
// with prog (the port takes a reference of its own).
func newQueuePort(d device, queue uint32, name string, opts Options, prog *sharedProgram) (_ *Port, err error) {
	peer := d.peer
	if len(opts.PeerMAC) > 0 {
		if peer, err = ether.MACFrom(opts.PeerMAC); err != nil {
			return nil, err
		}
	}
	// A frame of the device MTU fits one UMEM frame, or it needs
	// multi-buffer descriptors.
	wantSG := d.mtu > rxFrameCapacity
	sock, err := openSocket(d.index, queue, opts.RingSize, opts.ZeroCopy, wantSG)
	if err != nil {
		return nil, err
	}
	p := &Port{
		name:    name,
		dev:     d.name,
		ifindex: d.index,
		queue:   queue,
		mtu:     d.mtu - ether.HeaderLen,
		nb:      ether.NewNeighbour(d.own, peer),
		sock:    sock,
		txDescs: make([]unix.XDPDesc, 0, (d.mtu+frameSize-1)/frameSize),
		txBatch: max(opts.TxBatch, 1),
	}
	if wantSG && !sock.sg {
		p.mtu = rxFrameCapacity - ether.HeaderLen
		opts.Logger.Warn("xdp: kernel has no multi-buffer AF_XDP; port MTU reduced",
			"dev", d.name, "device_mtu", d.mtu, "port_mtu", p.mtu)
	}
	p.readFn = p.readReady
	p.wakeFn = p.wakeRx
	p.kickFn = p.kickTx
	if err := prog.Register(queue, sock.fd); err != nil {
		p.closed.Store(true)
		sock.close()
		return nil, err
	}
	prog.acquire()
	p.prog = prog
	return p, nil
}

// Name is the port's name.
func (p *Port) Name() string { return p.name }

// MTU is the largest datagram: the device MTU less the Ethernet header.
func (p *Port) MTU() int { return p.mtu }

// Device is the network device the port is bound to.
func (p *Port) Device() string { return p.dev }

// ZeroCopy reports whether the socket runs in zero-copy mode.
func (p *Port) ZeroCopy() bool { return p.sock.zeroCopy }

// AttachMode is the mode the XDP program runs in (driver or generic).
func (p *Port) AttachMode() bpf.Mode { return p.prog.Mode() }

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
	if p.txDown {
		// Queue nothing while the device is down, or the frames would
		// all go out, stale, when it comes back.
		if err := p.kick(); err != nil {
			return err
		}
	}
	s := p.sock
	nd := (ether.HeaderLen + len(b) + frameSize - 1) / frameSize
	if !p.reserveTx(nd) && (p.txPending == 0 || p.flushLocked() != nil || !p.reserveTx(nd)) {
		p.stats.txBusy.Add(1)
		return fmt.Errorf("%w: %s", ErrTxBusy, p.name)
	}
	descs := p.txDescs[:0]
	rest := b
	for i := range nd {
		base := s.umem.popTx()
		f := s.umem.frame(base)
		n := 0
		if i == 0 {
			ether.PutHeader(f, p.nb.Header())
			n = ether.HeaderLen
		}
		c := copy(f[n:], rest)
		rest = rest[c:]
		descs = append(descs, unix.XDPDesc{Addr: base, Len: uint32(n + c)})
	}
	s.tx.putFrame(descs)
	s.tx.submit()
	p.stats.txDatagrams.Add(1)
	p.stats.txBytes.Add(uint64(len(b)))
	if p.txPending++; p.txPending < p.txBatch {
		return nil
	}
	return p.flushLocked()
}

// Flush wakes the kernel for the datagrams WriteDatagram queued without
// doing so (Options.TxBatch). It implements noc.Flusher.
func (p *Port) Flush() error {
	p.txMu.Lock()
	defer p.txMu.Unlock()
	if p.txPending == 0 || p.closed.Load() {
		return nil
	}
	return p.flushLocked()
}

func (p *Port) flushLocked() error {
	p.txPending = 0
	return p.kick()
}

// reserveTx makes sure nd TX frames and ring slots are free, reclaiming
// sent frames and waking the kernel for a bounded time.
func (p *Port) reserveTx(nd int) bool {
	s := p.sock
	var start time.Time
	for spin := 0; ; spin++ {
		s.comp.reap(s.umem)
		if len(s.umem.txFree) >= nd && s.tx.free(uint32(nd)) >= uint32(nd) {
			return true
		}
		if spin == 0 {
			start = time.Now()
		} else if time.Since(start) > txWait {
			return false
		}
		if p.kick() != nil {
			return false
		}
		if spin > 4 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// kick wakes the kernel to send what the TX ring holds, when it asked to be
// woken. Copy mode always asks: the send happens inside this call.
func (p *Port) kick() error {
	if !p.sock.tx.needWakeup() {
		return nil
	}
	p.kickErr = nil
	if err := p.sock.conn.Control(p.kickFn); err != nil {
		return fmt.Errorf("xdp: send on %s: %w", p.name, err)
	}
	p.txDown = p.kickErr == unix.ENETDOWN
	switch p.kickErr {
	case nil:
		return nil
	case unix.EAGAIN, unix.ENOBUFS:
		// The device is busy: the frames stay queued for the next wake-up.
		return nil
	case unix.EBUSY:
		// The device dropped the frame (link down, queue stopped): an
		// unreliable port loses it.
		p.stats.txDropped.Add(1)
		return nil
	}
	return fmt.Errorf("xdp: send on %s: %w", p.name, p.kickErr)
}

func (p *Port) kickTx(fd uintptr) {
	if _, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0); e != 0 {
		p.kickErr = e
	}
}

// ReadDatagram copies the next NoC datagram into b.
func (p *Port) ReadDatagram(b []byte) (int, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	if p.closed.Load() {
		return 0, noc.ErrPortClosed
	}
	if n, ok := p.receive(b); ok {
		return n, nil
	}
	p.rxBuf, p.rxOK = b, false
	err := p.sock.conn.Read(p.readFn)
	p.rxBuf = nil
	switch {
	case p.rxOK:
		return p.rxN, nil
	case p.closed.Load():
		return 0, noc.ErrPortClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, os.ErrDeadlineExceeded
	}
	return 0, fmt.Errorf("xdp: read %s: %w", p.name, err)
}

// readReady runs inside conn.Read each time the socket may be readable.
func (p *Port) readReady(fd uintptr) bool {
	if n, ok := p.receive(p.rxBuf); ok {
		p.rxN, p.rxOK = n, true
		return true
	}
	if p.sock.fill.needWakeup() {
		p.wakeRx(fd)
	}
	return false
}

// TryReadDatagram returns the next datagram if one is waiting.
func (p *Port) TryReadDatagram(b []byte) (int, bool, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	if p.closed.Load() {
		return 0, false, noc.ErrPortClosed
	}
	n, ok := p.receive(b)
	if !ok && p.sock.fill.needWakeup() {
		p.sock.conn.Control(p.wakeFn)
	}
	return n, ok, nil
}

// wakeRx tells a driver that sleeps on an empty fill ring that it has
// frames again (XDP_USE_NEED_WAKEUP).
func (p *Port) wakeRx(fd uintptr) {
	unix.RawSyscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// receive takes the next accepted frame off the RX ring and copies its
// datagram into b. Frames not for this port are recycled and skipped.
func (p *Port) receive(b []byte) (int, bool) {
	s := p.sock
	for {
		avail := s.rx.available()
		if avail == 0 {
			p.releaseRx()
			return 0, false
		}
		nd, whole := s.rx.packetDescs(0, avail)
		if !whole {
			// The kernel publishes a frame's descriptors together; wait
			// for the rest rather than parse half a frame.
			if nd, whole = s.rx.packetDescs(0, s.rx.refresh()); !whole {
				p.releaseRx()
				return 0, false
			}
		}
		n, ok := p.copyFrame(b, nd)
		s.rx.consume(nd)
		p.rxSinceRelease += nd
		if p.rxSinceRelease >= rxReleaseBatch || s.rx.cachedProducer == s.rx.cachedConsumer {
			p.releaseRx()
		}
		if ok {
			return n, true
		}
	}
}

// copyFrame copies the datagram of the frame in the first nd ready
// descriptors into b and gives their UMEM frames back for refilling.
func (p *Port) copyFrame(b []byte, nd uint32) (int, bool) {
	s := p.sock
	accepted, valid := false, true
	copied, total := 0, 0
	for i := range nd {
		d := s.rx.peek(i)
		seg, ok := s.umem.bytes(d)
		if !ok || !s.umem.isRx(d.Addr) {
			valid = false
			continue
		}
		s.umem.pushRx(d.Addr)
		if i == 0 {
			h, err := ether.ParseHeader(seg)
			if err != nil {
				valid = false
				continue
			}
			accepted = p.nb.Accept(h)
			seg = seg[ether.HeaderLen:]
		}
		if accepted && valid {
			copied += copy(b[copied:], seg)
			total += len(seg)
		}
	}
	switch {
	case !valid:
		p.stats.rxInvalid.Add(1)
		return 0, false
	case !accepted:
		p.stats.rxRefused.Add(1)
		return 0, false
	}
	if total > copied {
		p.stats.rxTruncated.Add(1)
	}
	p.stats.rxDatagrams.Add(1)
	p.stats.rxBytes.Add(uint64(total))
	return copied, true
}

// releaseRx hands consumed RX slots and their frames back to the kernel.
func (p *Port) releaseRx() {
	s := p.sock
	if s.rx.unreleased() > 0 {
		s.rx.release()
	}
	if len(s.umem.rxSpare) > 0 {
		s.fill.refill(s.umem)
	}
	p.rxSinceRelease = 0
}

// SetReadDeadline bounds ReadDatagram.
func (p *Port) SetReadDeadline(t time.Time) error {
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	if err := p.sock.file.SetReadDeadline(t); err != nil {
		return fmt.Errorf("xdp: set deadline on %s: %w", p.name, err)
	}
	return nil
}

// SetDropPercent makes the XDP program drop about pct percent of the NoC
// frames this port receives (fault injection; 0 turns it off).
func (p *Port) SetDropPercent(pct float64) error {
	if p.closed.Load() {
		return noc.ErrPortClosed
	}
	return p.prog.SetDropPercent(pct)
}

// Counters returns the port's named counters: the XDP program's verdicts
// summed over CPUs (redirected, passed, dropped, unbound), the socket's
// kernel statistics (xsk_*) and the port's own (rx_*, tx_*).
func (p *Port) Counters() (map[string]uint64, error) {
	if p.closed.Load() {
		return nil, noc.ErrPortClosed
	}
	out := make(map[string]uint64, 20)
	pc, err := p.prog.Counters()
	if err != nil {
		return nil, err
	}
	pc.Each(func(name string, v uint64) { out[name] = v })
	st, err := p.sock.statistics()
	if err != nil {
		return nil, fmt.Errorf("xdp: %s statistics: %w", p.name, err)
	}
	out["xsk_rx_dropped"] = st.Rx_dropped
	out["xsk_rx_invalid_descs"] = st.Rx_invalid_descs
	out["xsk_tx_invalid_descs"] = st.Tx_invalid_descs
	out["xsk_rx_ring_full"] = st.Rx_ring_full
	out["xsk_rx_fill_ring_empty"] = st.Rx_fill_ring_empty_descs
	out["xsk_tx_ring_empty"] = st.Tx_ring_empty_descs
	out["rx_datagrams"] = p.stats.rxDatagrams.Load()
	out["rx_bytes"] = p.stats.rxBytes.Load()
	out["rx_refused"] = p.stats.rxRefused.Load()
	out["rx_truncated"] = p.stats.rxTruncated.Load()
	out["rx_invalid"] = p.stats.rxInvalid.Load()
	out["tx_datagrams"] = p.stats.txDatagrams.Load()
	out["tx_bytes"] = p.stats.txBytes.Load()
	out["tx_busy"] = p.stats.txBusy.Load()
	out["tx_dropped"] = p.stats.txDropped.Load()
	return out, nil
}

// Close releases the socket, its rings and its UMEM, and detaches the XDP
// program when no other queue's port of the device uses it. A blocked ReadDatagram returns noc.ErrPortClosed.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		errs := []error{p.sock.closeFile()} // wakes a blocked reader
		p.rxMu.Lock()
		p.txMu.Lock()
		errs = append(errs, p.prog.release(), p.sock.close())
		p.txMu.Unlock()
		p.rxMu.Unlock()
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

var (
	_ noc.Port   = (*Port)(nil)
	_ noc.Poller = (*Port)(nil)
)

// ReadyFD implements noc.Waitable: the AF_XDP socket, readable while its RX
// ring holds descriptors.
func (p *Port) ReadyFD() (int, error) {
	if p.closed.Load() {
		return -1, noc.ErrPortClosed
	}
	return p.sock.fd, nil
}
