package xdp

import (
	"errors"
	"fmt"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/afpacket"
	"golang.org/x/sys/unix"
)

// NewQueuePorts opens up to k AF_XDP ports on dev, one per queue 0..k-1,
// sharing one XDP program: the channels of a link that stripes over the
// device's queues. It opens fewer where the device has fewer queues than k
// (the smaller of its receive and transmit queues, or the first queue the
// kernel refuses to bind), and logs it; the stripe's bootstrap agrees with
// the peer on the smaller count. Port i is named NAME/qi. opts.Queue is
// ignored. Without AF_XDP it fails as NewPort does.
func NewQueuePorts(dev string, k int, opts Options) ([]*Port, error) {
	if k < 1 || k > maxQueues {
		return nil, fmt.Errorf("xdp: %d queues asked of %s (1..%d)", k, dev, maxQueues)
	}
	opts = opts.withDefaults(dev)
	d, err := lookupDevice(dev)
	if err != nil {
		return nil, err
	}
	n := k
	if d.rxQueues > 0 {
		n = min(n, d.rxQueues)
	}
	if d.txQueues > 0 {
		n = min(n, d.txQueues)
	}
	prog, err := attachShared(d, opts)
	if err != nil {
		return nil, err
	}
	defer prog.release() // each port holds its own reference
	ports := make([]*Port, 0, n)
	for q := range uint32(n) {
		p, err := newQueuePort(d, q, fmt.Sprintf("%s/q%d", opts.Name, q), opts, prog)
		if err != nil && q > 0 && errors.Is(err, unix.EINVAL) {
			// The kernel binds no socket past the device's queues in
			// use (ethtool -L may have lowered them below the count
			// it reports).
			opts.Logger.Debug("xdp: queue refused", "dev", dev, "queue", q, "error", err.Error())
			break
		}
		if err != nil {
			for _, p := range ports {
				p.Close()
			}
			return nil, fmt.Errorf("xdp: %s queue %d: %w", dev, q, err)
		}
		ports = append(ports, p)
	}
	if len(ports) < k {
		opts.Logger.Warn("xdp: the device has fewer queues than the link's channels; the link uses one channel per queue",
			"dev", dev, "channels", k, "queues", len(ports), "rx_queues", d.rxQueues, "tx_queues", d.txQueues)
	}
	return ports, nil
}

// maxQueues is the most queues one device's ports use: the size of the
// program's socket map.
const maxQueues = 64

// OpenQueues opens k channel ports on dev, one per queue, as
// NewQueuePorts does; where AF_XDP cannot be used (see [Open]) it falls
// back to one AF_PACKET port (an AF_PACKET socket sees every queue, so a
// device gives it one channel), and logs why.
func OpenQueues(dev string, k int, opts Options) ([]noc.Port, Kind, error) {
	opts = opts.withDefaults(dev)
	if !opts.ForceAFPacket {
		ps, err := NewQueuePorts(dev, k, opts)
		if err == nil {
			out := make([]noc.Port, len(ps))
			for i, p := range ps {
				out[i] = p
			}
			return out, KindXDP, nil
		}
		reason, ok := Unavailable(err)
		if !ok {
			return nil, 0, err
		}
		logFallback(opts.Logger, dev, reason, err)
	}
	if k > 1 {
		opts.Logger.Warn("xdp: an AF_PACKET port has one channel per device; the link uses one",
			"dev", dev, "channels", k)
	}
	p, err := afpacket.Open(dev, afpacket.Options{Name: opts.Name, PeerMAC: opts.PeerMAC})
	if err != nil {
		return nil, 0, err
	}
	return []noc.Port{p}, KindAFPacket, nil
}
