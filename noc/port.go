package noc

import (
	"errors"
	"time"
)

// Port is one end of a point-to-point link to a neighbour DPU: it moves raw
// link-layer datagrams and nothing more. Delivery is unreliable (a datagram
// may be dropped, duplicated, delayed or reordered); the link layer above it
// makes it reliable. Implementations: mem (in-process pair), udp, and the
// AF_XDP / AF_PACKET ports, side by side under noc/port.
//
// A Port is safe for one concurrent reader and one concurrent writer.
type Port interface {
	// Name is the local name of the port ("p0", "veth3", ...).
	Name() string
	// MTU is the largest datagram WriteDatagram accepts.
	MTU() int
	// WriteDatagram sends b. It does not keep b after it returns.
	WriteDatagram(b []byte) error
	// ReadDatagram copies the next datagram into b and returns its length.
	// It blocks until a datagram arrives, the deadline passes
	// (os.ErrDeadlineExceeded) or the port is closed (ErrPortClosed).
	// Datagrams longer than b are truncated.
	ReadDatagram(b []byte) (int, error)
	// SetReadDeadline bounds ReadDatagram; the zero time removes the bound.
	SetReadDeadline(t time.Time) error
	// Close releases the port; blocked reads return ErrPortClosed.
	Close() error
}

// Poller is implemented by ports that can be busy-polled: TryReadDatagram
// returns at once, with ok false when nothing is waiting.
type Poller interface {
	TryReadDatagram(b []byte) (n int, ok bool, err error)
}

// Waitable is implemented by ports whose arrivals a driver can wait for
// with epoll: ReadyFD is a descriptor that polls readable (level-triggered)
// while a datagram waits for TryReadDatagram. The descriptor stays the
// port's; the driver only registers it, and removes it before Close.
type Waitable interface {
	ReadyFD() (int, error)
}

// BatchWriter is implemented by ports that send many datagrams with one
// system call (sendmmsg): WriteDatagrams sends bufs in order and keeps none
// of them.
type BatchWriter interface {
	WriteDatagrams(bufs [][]byte) error
}

// BatchPoller is implemented by ports that receive many datagrams with one
// system call (recvmmsg): TryReadDatagrams fills up to len(bufs) buffers
// without waiting, sets their lengths in lens and returns how many.
type BatchPoller interface {
	TryReadDatagrams(bufs [][]byte, lens []int) (int, error)
}

// Flusher is implemented by ports that may hold written datagrams to send
// them in batches: a driver calls Flush after every burst of writes, and
// nothing written before the call stays held after it.
type Flusher interface {
	Flush() error
}

// ErrPortClosed is returned by a closed port.
var ErrPortClosed = errors.New("noc: port closed")

// PortID is the local index of a port on one DPU (0, 1, ...). Port ids are
// dense and small (a DPU has a handful of ports).
type PortID uint16

// NoPort means "no port": the owner's up port, or a frame that originated
// locally.
const NoPort PortID = 0xFFFF

// LocalPort stands for this node's own host where a set of ports is kept
// (for example a path cache entry whose replica is held by the local host).
const LocalPort PortID = 0xFFFE
