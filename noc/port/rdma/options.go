package rdma

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Options shape a Port.
type Options struct {
	// Name is the port's name (default: the device name).
	Name string
	// Port is the device port number (default 1).
	Port int
	// GIDIndex picks the GID; -1 (the default) takes the first
	// IPv4-mapped GID (RoCE v2 over the netdev's IPv4 address), else the
	// first one set.
	GIDIndex int
	// MTU is the largest datagram, and the size of each ring slot
	// (default 9000: a 4 KiB page and its headers in one datagram; RC
	// segments it to the path MTU on the wire).
	MTU int
	// Slots is the number of receive slots kept posted, and of send slots
	// (default 256).
	Slots int
	// Inline is the largest datagram sent inline, from the work request
	// itself, with no DMA read of a send slot (default 220; the device
	// may grant less).
	Inline int
	// Greeting is how often the bootstrap handle is sent while the queue
	// pair is not connected (default 20 ms); once connected it is sent
	// every 25 greetings, so that a restarted peer is noticed.
	Greeting time.Duration
	Logger   *slog.Logger
}

func (o Options) withDefaults(dev string) (Options, error) {
	if o.Name == "" {
		o.Name = dev
	}
	if o.Port == 0 {
		o.Port = 1
	}
	if o.GIDIndex == 0 {
		o.GIDIndex = -1
	}
	if o.MTU == 0 {
		o.MTU = 9000
	}
	if o.Slots == 0 {
		o.Slots = 256
	}
	if o.Inline == 0 {
		o.Inline = 220
	}
	if o.Greeting == 0 {
		o.Greeting = 20 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.MTU < 64 || o.MTU > 0xFFFF:
		return o, fmt.Errorf("rdma: MTU %d outside [64, 65535]", o.MTU)
	case o.Slots < 2 || o.Slots > 1<<15:
		return o, fmt.Errorf("rdma: %d slots outside [2, 32768]", o.Slots)
	}
	return o, nil
}

// Errors of a Port.
var (
	// ErrNotSupported: this build has no RDMA support (build with
	// -tags rdma and cgo, against rdma-core's libibverbs).
	ErrNotSupported = errors.New("rdma: not supported by this build (build with -tags rdma, cgo and libibverbs)")
	// ErrNotConnected: the queue pair is not connected yet (or is being
	// reset); the datagram was not sent.
	ErrNotConnected = errors.New("rdma: queue pair not connected")
	// ErrBusy: every send slot is in flight; the datagram was not sent.
	ErrBusy = errors.New("rdma: send queue full")
	// ErrTooLarge: a datagram longer than the MTU.
	ErrTooLarge = errors.New("rdma: datagram larger than MTU")
)
