package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
)

// Multi-channel links: a port whose link stripes over K channels opens K
// channel ports and joins them with link.StripedPort. Per kind:
//
//	udp       channel i binds LOCAL's port + i and sends to REMOTE's port + i
//	xdp       DEV is a comma-separated list of K devices (several NICs), one
//	          channel each; or one device, whose queues 0..K-1 are the
//	          channels (one AF_XDP socket each; fewer where the device has
//	          fewer queues, logged)
//	afpacket  DEV lists K devices, one channel each (one device: one
//	          channel, logged)
//
// Both ends of a link must be configured with channels; the stripe's
// bootstrap agrees on the smaller count.

// channelsOf is how many channels spec's link stripes over.
func channelsOf(spec PortSpec, cfg *Config) int {
	k := spec.Channels
	if k == 0 {
		k = cfg.Channels
	}
	return max(k, 1)
}

// parseChannels parses a channel count.
func parseChannels(s string) (int, error) {
	k, err := strconv.Atoi(s)
	if err == nil && (k < 1 || k > link.MaxChannels) {
		err = fmt.Errorf("channels %d outside [1, %d]", k, link.MaxChannels)
	}
	return k, err
}

// openChannels opens spec's k channels with open (channel i of k) and
// joins them (logging every channel that comes up or is dropped); one
// channel is returned as it is. On error every channel
// opened is closed.
func openChannels(spec PortSpec, cfg *Config, log *slog.Logger, k int, open func(i int) (noc.Port, error)) (noc.Port, error) {
	chans := make([]noc.Port, 0, k)
	for i := range k {
		p, err := open(i)
		if err != nil {
			for _, c := range chans {
				c.Close()
			}
			return nil, fmt.Errorf("channel %d: %w", i, err)
		}
		chans = append(chans, p)
	}
	if k == 1 {
		return chans[0], nil
	}
	return link.NewStripedPort(spec.Name, chans, stripeConfig(cfg, k), link.WithChannelLog(log))
}

// joinQueues joins the ports of one device's queues; one is returned as it
// is. The receiving NIC picks a frame's queue, so a datagram is accounted
// to the channel its header names (SharedMedium).
func joinQueues(spec PortSpec, cfg *Config, log *slog.Logger, chans []noc.Port) (noc.Port, error) {
	if len(chans) == 1 {
		return chans[0], nil
	}
	sc := stripeConfig(cfg, len(chans))
	sc.SharedMedium = true
	return link.NewStripedPort(spec.Name, chans, sc, link.WithChannelLog(log))
}

// stripeConfig derives a stripe's timers from the link's: a channel is
// dropped well before the link would be declared dead.
func stripeConfig(cfg *Config, k int) link.StripeConfig {
	sc := link.DefaultStripeConfig(k, 0)
	sc.MTU = 0 // the smallest channel's
	sc.DeadInterval = max(cfg.DeadInterval/3, 2*time.Millisecond)
	sc.HeartbeatInterval = max(sc.DeadInterval/8, time.Millisecond)
	return sc
}

// offsetAddr returns "host:port+i".
func offsetAddr(addr string, i int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("port %q: %w", port, err)
	}
	if i > 0 && n == 0 {
		return "", errors.New("a multi-channel link needs fixed ports (not 0)")
	}
	if n+i > 0xFFFF {
		return "", fmt.Errorf("port %d + channel %d past 65535", n, i)
	}
	return net.JoinHostPort(host, strconv.Itoa(n+i)), nil
}

// netdevChannels splits a netdev port's DEV argument into one device per
// channel; one device with k > 1 is returned alone (its queues are the
// channels).
func netdevChannels(spec PortSpec, k int) ([]string, error) {
	devs := strings.Split(spec.Args[0], ",")
	if len(devs) != k && len(devs) != 1 {
		return nil, fmt.Errorf("%d devices for %d channels", len(devs), k)
	}
	return devs, nil
}

// linkChannels lists a striped port's channels with their counters for
// the control socket (none for a one-channel link).
func linkChannels(p noc.Port) []ctl.Channel {
	sp, ok := striped(p)
	if !ok {
		return nil
	}
	_, cs := sp.Stats()
	out := make([]ctl.Channel, len(cs))
	for i, c := range cs {
		st := ctl.LinkDown
		if c.Up {
			st = ctl.LinkUp
		}
		out[i] = ctl.Channel{Index: i, Name: sp.Channels()[i].Name(), State: st, Counters: []ctl.Counter{
			{Name: "tx_datagrams", Value: c.TxDatagrams}, {Name: "tx_bytes", Value: c.TxBytes},
			{Name: "rx_datagrams", Value: c.RxDatagrams}, {Name: "rx_bytes", Value: c.RxBytes},
			{Name: "tx_control", Value: c.TxControl}, {Name: "rx_control", Value: c.RxControl},
			{Name: "lost", Value: c.Lost}, {Name: "errors", Value: c.Errors},
			{Name: "in_flight", Value: uint64(c.InFlight)}, {Name: "ups", Value: c.Ups}, {Name: "downs", Value: c.Downs},
		}}
	}
	return out
}

// logChannels notes a striped port's channel count once it is open.
func logChannels(log *slog.Logger, spec PortSpec, p noc.Port) {
	if sp, ok := striped(p); ok {
		log.Info("multi-channel link", "port", spec.Name, "channels", len(sp.Channels()))
	}
}

// striped finds the striped port under p's wrappers.
func striped(p noc.Port) (*link.StripedPort, bool) { return under[*link.StripedPort](p) }

// under finds the port of type T that p is or wraps (a secure link, a
// capture tap: each wrapper has Inner).
func under[T noc.Port](p noc.Port) (T, bool) {
	for range 8 {
		if t, ok := p.(T); ok {
			return t, true
		}
		w, ok := p.(interface{ Inner() noc.Port })
		if !ok {
			break
		}
		p = w.Inner()
	}
	var zero T
	return zero, false
}
