package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/afpacket"
	"github.com/aitherion/dpu/noc/port/xdp/bpf"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Kind is the kind of socket behind a port.
type Kind int

// Port kinds.
const (
	KindXDP      Kind = iota + 1 // AF_XDP socket with the NoC XDP program
	KindAFPacket                 // AF_PACKET socket (fallback)
)

func (k Kind) String() string {
	switch k {
	case KindXDP:
		return "xdp"
	case KindAFPacket:
		return "afpacket"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Options configure a port. The zero value is a working configuration.
type Options struct {
	// Name is the port's name; the device's name when empty.
	Name string
	// Queue is the receive queue the AF_XDP socket binds to. NoC frames
	// must arrive on it: a single-queue device, or a NIC that steers
	// ethertype 0x88B5 there.
	Queue uint32
	// ForceAFPacket skips AF_XDP and opens an AF_PACKET port.
	ForceAFPacket bool
	// AttachMode is how the XDP program is attached (auto: driver where
	// the driver supports it, generic elsewhere).
	AttachMode bpf.Mode
	// ZeroCopy is the zero-copy policy (auto: where the driver offers it).
	ZeroCopy ZeroCopy
	// RingSize is the number of entries of each ring and of UMEM frames
	// per direction, a power of two (default 1024: 8 MiB of UMEM).
	RingSize uint32
	// PinDir, when set, is a bpffs directory where the port pins its XDP
	// program's counters and config maps for other processes (the fabric's
	// fault command); Close removes the pins.
	PinDir string
	// PeerMAC fixes the neighbour's address; learned when empty.
	PeerMAC net.HardwareAddr
	// ReplaceForeign replaces an XDP program on the device that is not the
	// NoC program. Without it such a device is refused (and Open falls
	// back to AF_PACKET).
	ReplaceForeign bool
	// TxBatch, when above 1, lets WriteDatagram queue up to TxBatch
	// datagrams before it wakes the kernel (one sendto for the batch); the
	// writer must then call Flush after every burst (noc.Flusher). 0 or 1
	// wakes the kernel on every write.
	TxBatch int
	// Logger receives the fallback notice; slog.Default() when nil.
	Logger *slog.Logger
}

func (o Options) withDefaults(dev string) Options {
	if o.Name == "" {
		o.Name = dev
	}
	if o.RingSize == 0 {
		o.RingSize = defaultRingSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// openXDP opens an AF_XDP port; tests replace it to inject failures.
var openXDP = func(dev string, opts Options) (noc.Port, error) { return NewPort(dev, opts) }

// Open opens a NoC port on dev in the calling thread's network namespace:
// an AF_XDP port where AF_XDP and BPF are permitted and supported, an
// AF_PACKET port otherwise (logged once per process, with the reason) or when
// opts.ForceAFPacket is set. The port is a *Port or an *afpacket.Port;
// both have Counters.
func Open(dev string, opts Options) (noc.Port, Kind, error) {
	opts = opts.withDefaults(dev)
	if !opts.ForceAFPacket {
		p, err := openXDP(dev, opts)
		if err == nil {
			return p, KindXDP, nil
		}
		reason, ok := Unavailable(err)
		if !ok {
			return nil, 0, err
		}
		logFallback(opts.Logger, dev, reason, err)
	}
	p, err := afpacket.Open(dev, afpacket.Options{Name: opts.Name, PeerMAC: opts.PeerMAC})
	if err != nil {
		return nil, 0, err
	}
	return p, KindAFPacket, nil
}

// Unavailable reports whether err from opening an AF_XDP port means AF_XDP
// cannot be used here (not permitted, not supported by the kernel or the
// device, or the device runs someone else's XDP program), and a short
// reason. Other errors (no such device, bad options) are not.
func Unavailable(err error) (reason string, ok bool) {
	switch {
	case err == nil:
		return "", false
	case errors.Is(err, bpf.ErrForeignProgram):
		return "another XDP program is attached to the device", true
	case errors.Is(err, ebpf.ErrNotSupported):
		return "the kernel lacks a BPF feature the NoC program needs", true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return "", false
	}
	switch errno {
	case unix.EPERM, unix.EACCES:
		return "not permitted (needs CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN)", true
	case unix.ENOBUFS:
		return "UMEM exceeds the locked-memory limit (RLIMIT_MEMLOCK or CAP_IPC_LOCK)", true
	case unix.EAFNOSUPPORT, unix.EPROTONOSUPPORT, unix.ENOSYS:
		return "the kernel has no AF_XDP or BPF support", true
	case unix.EOPNOTSUPP, errnoENOTSUPP:
		return "the kernel or driver does not support this AF_XDP/XDP mode", true
	}
	return "", false
}

// errnoENOTSUPP is the kernel-internal ENOTSUPP (524) some BPF paths leak.
const errnoENOTSUPP = syscall.Errno(524)

var fallbackOnce sync.Once

// logFallback warns once per process, with the first reason; later
// fallbacks are logged at debug level.
func logFallback(l *slog.Logger, dev, reason string, err error) {
	warned := false
	fallbackOnce.Do(func() {
		warned = true
		l.Warn("AF_XDP unavailable, NoC ports fall back to AF_PACKET (slower, same frames); "+
			"this notice is logged once",
			"dev", dev, "reason", reason, "error", err.Error())
	})
	if !warned {
		l.Debug("AF_XDP unavailable, AF_PACKET port", "dev", dev, "reason", reason, "error", err.Error())
	}
}
