package xdp

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// frameSize is the size of one UMEM frame: a page, the largest size every
// driver accepts in aligned mode.
const frameSize = 4096

// bindBusyWait bounds how long a bind waits for a queue held by a socket
// being released.
const bindBusyWait = 2 * time.Second

// rxFrameCapacity is how many bytes of a received frame fit in one UMEM
// frame: the kernel keeps XDP_PACKET_HEADROOM in front of the data.
const rxFrameCapacity = frameSize - unix.XDP_PACKET_HEADROOM

// ZeroCopy says whether the socket may, must or must not share UMEM frames
// with the NIC directly.
type ZeroCopy int

// Zero-copy policies.
const (
	// ZeroCopyAuto uses zero-copy where the driver offers it and copy mode
	// elsewhere (veth has no zero-copy).
	ZeroCopyAuto ZeroCopy = iota
	// ZeroCopyOff always copies.
	ZeroCopyOff
	// ZeroCopyRequire fails where the driver has no zero-copy.
	ZeroCopyRequire
)

// socket is one AF_XDP socket with its UMEM and its four rings.
type socket struct {
	fd       int
	file     *os.File
	conn     syscall.RawConn
	umem     *umem
	fill     fillQueue
	rx       rxQueue
	tx       txQueue
	comp     completionQueue
	maps     [][]byte // UMEM and ring mappings, unmapped by close
	fdClosed bool
	zeroCopy bool
	sg       bool // multi-buffer frames (XDP_USE_SG)
}

// openSocket creates an AF_XDP socket bound to queue of device ifindex with
// ringSize entries per ring and ringSize frames per direction. It asks for
// multi-buffer frames when sg is set and falls back to single-buffer frames
// where the kernel has none.
func openSocket(ifindex int, queue, ringSize uint32, zc ZeroCopy, sg bool) (*socket, error) {
	if err := checkRingSize(ringSize); err != nil {
		return nil, err
	}
	s, err := newSocket(ifindex, queue, ringSize, zc, sg)
	if err != nil && sg && errors.Is(err, unix.EINVAL) {
		// Kernels before 6.6 know no XDP_USE_SG.
		s, err = newSocket(ifindex, queue, ringSize, zc, false)
	}
	return s, err
}

func newSocket(ifindex int, queue, ringSize uint32, zc ZeroCopy, sg bool) (_ *socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xdp: open AF_XDP socket: %w", err)
	}
	s := &socket{fd: fd, sg: sg}
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	mem, err := unix.Mmap(-1, 0, int(2*ringSize)*frameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xdp: map UMEM: %w", err)
	}
	s.maps = append(s.maps, mem)
	if s.umem, err = newUMEM(mem, frameSize, ringSize, ringSize); err != nil {
		return nil, err
	}
	if err := registerUMEM(fd, mem, frameSize); err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, int(ringSize)); err != nil {
			return nil, fmt.Errorf("xdp: size ring %d: %w", opt, err)
		}
	}
	off, err := mmapOffsets(fd)
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	fillMem, err := s.mapRing(ringMapSize[uint64](off.Fr, ringSize), unix.XDP_UMEM_PGOFF_FILL_RING)
	if err != nil {
		return nil, err
	}
	compMem, err := s.mapRing(ringMapSize[uint64](off.Cr, ringSize), unix.XDP_UMEM_PGOFF_COMPLETION_RING)
	if err != nil {
		return nil, err
	}
	rxMem, err := s.mapRing(ringMapSize[unix.XDPDesc](off.Rx, ringSize), unix.XDP_PGOFF_RX_RING)
	if err != nil {
		return nil, err
	}
	txMem, err := s.mapRing(ringMapSize[unix.XDPDesc](off.Tx, ringSize), unix.XDP_PGOFF_TX_RING)
	if err != nil {
		return nil, err
	}
	if err := s.viewRings(ringSize, off, fillMem, compMem, rxMem, txMem); err != nil {
		return nil, err
	}

	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	switch zc {
	case ZeroCopyOff:
		flags |= unix.XDP_COPY
	case ZeroCopyRequire:
		flags |= unix.XDP_ZEROCOPY
	}
	if sg {
		flags |= unix.XDP_USE_SG
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: queue}
	for deadline := time.Now().Add(bindBusyWait); ; {
		// A socket of an agent that just died releases its queue
		// asynchronously: EBUSY for a moment. A live one keeps it.
		err = unix.Bind(fd, sa)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("xdp: bind to ifindex %d queue %d: %w", ifindex, queue, err)
	}
	if opts, err := unix.GetsockoptInt(fd, unix.SOL_XDP, unix.XDP_OPTIONS); err == nil {
		s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	}

	// Hand the receiving half of the UMEM to the kernel.
	s.fill.refill(s.umem)

	// The file puts the socket in the runtime's poller: reads wait for
	// readiness with deadlines, and Close wakes them.
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("xdp: set non-blocking: %w", err)
	}
	s.file = os.NewFile(uintptr(fd), "xsk")
	if s.conn, err = s.file.SyscallConn(); err != nil {
		return nil, fmt.Errorf("xdp: raw conn: %w", err)
	}
	return s, nil
}

func (s *socket) mapRing(size int, pgoff int64) ([]byte, error) {
	m, err := unix.Mmap(s.fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xdp: map ring at %#x: %w", pgoff, err)
	}
	s.maps = append(s.maps, m)
	return m, nil
}

func (s *socket) viewRings(n uint32, off unix.XDPMmapOffsets, fillMem, compMem, rxMem, txMem []byte) error {
	fw, err := mappedWords(fillMem, off.Fr)
	if err != nil {
		return err
	}
	fe, err := mappedEntries[uint64](fillMem, off.Fr, n)
	if err != nil {
		return err
	}
	cw, err := mappedWords(compMem, off.Cr)
	if err != nil {
		return err
	}
	ce, err := mappedEntries[uint64](compMem, off.Cr, n)
	if err != nil {
		return err
	}
	rw, err := mappedWords(rxMem, off.Rx)
	if err != nil {
		return err
	}
	re, err := mappedEntries[unix.XDPDesc](rxMem, off.Rx, n)
	if err != nil {
		return err
	}
	tw, err := mappedWords(txMem, off.Tx)
	if err != nil {
		return err
	}
	te, err := mappedEntries[unix.XDPDesc](txMem, off.Tx, n)
	if err != nil {
		return err
	}
	s.fill = fillQueue{newProducerRing(fe, fw)}
	s.comp = completionQueue{newConsumerRing(ce, cw)}
	s.rx = rxQueue{newConsumerRing(re, rw)}
	s.tx = txQueue{newProducerRing(te, tw)}
	return nil
}

// statistics reads the socket's kernel counters.
func (s *socket) statistics() (st unix.XDPStatistics, err error) {
	cerr := s.conn.Control(func(fd uintptr) { st, err = socketStatistics(int(fd)) })
	return st, errors.Join(cerr, err)
}

// closeFile closes the descriptor (deferred by the runtime until no call
// is using it) and wakes a reader waiting for readiness.
func (s *socket) closeFile() error {
	if s.fdClosed {
		return nil
	}
	s.fdClosed = true
	if s.file != nil {
		return s.file.Close()
	}
	return unix.Close(s.fd)
}

// close releases everything; no goroutine may be using the rings.
func (s *socket) close() error {
	errs := []error{s.closeFile()}
	for _, m := range s.maps {
		errs = append(errs, unix.Munmap(m))
	}
	s.maps = nil
	return errors.Join(errs...)
}
