package agent

import (
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/rdma"
	"github.com/aitherion/dpu/noc/port/udp"
	"github.com/aitherion/dpu/noc/port/xdp"
)

// udpFallbackMTU is the datagram MTU of a UDP port whose route MTU cannot
// be read.
const udpFallbackMTU = 1472

// udpMTU is the datagram MTU of a UDP port to remote: the largest the route
// carries without IP fragmentation, up to 9000 bytes (udp.PathMTU), so a
// 4 KiB page and its headers cross a loopback or jumbo link in one
// datagram; on a 1500-byte Ethernet the link layer fragments. Both ends of
// a link compute the same value from the same route.
func udpMTU(remote string) int {
	mtu, err := udp.PathMTU(remote)
	if err != nil {
		return udpFallbackMTU
	}
	return mtu
}

// txBatch is how many datagrams an AF_XDP port queues before it wakes the
// kernel; the run loop flushes after every burst (noc.Flusher).
const txBatch = 32

func init() {
	RegisterPort(PortUDP, func(spec PortSpec, cfg *Config, log *slog.Logger) (noc.Port, string, error) {
		return openUDP(spec, cfg, log, openUDPChannel)
	})
	openNetdev := func(force bool) PortOpener {
		return func(spec PortSpec, cfg *Config, log *slog.Logger) (noc.Port, string, error) {
			k := channelsOf(spec, cfg)
			devs, err := netdevChannels(spec, k)
			if err != nil {
				return nil, "", err
			}
			if len(devs) < k { // one device: its queues are the channels
				opts := xdp.Options{Name: spec.Name, ForceAFPacket: force, Logger: log, TxBatch: txBatch}
				if cfg.XDPPinDir != "" {
					opts.PinDir = filepath.Join(cfg.XDPPinDir, devs[0])
				}
				chans, kind, err := xdp.OpenQueues(devs[0], k, opts)
				if err != nil {
					return nil, "", err
				}
				p, err := joinQueues(spec, cfg, log, chans)
				if err != nil {
					return nil, "", err
				}
				logChannels(log, spec, p)
				return p, kind.String(), nil
			}
			kinds := make([]string, k)
			p, err := openChannels(spec, cfg, log, k, func(i int) (noc.Port, error) {
				dev := devs[i]
				name := spec.Name
				if k > 1 {
					name = dev
				}
				opts := xdp.Options{Name: name, ForceAFPacket: force, Logger: log, TxBatch: txBatch}
				if cfg.XDPPinDir != "" {
					opts.PinDir = filepath.Join(cfg.XDPPinDir, dev)
				}
				p, kind, err := xdp.Open(dev, opts)
				if err != nil {
					return nil, err
				}
				kinds[i] = kind.String()
				return p, nil
			})
			if err != nil {
				return nil, "", err
			}
			logChannels(log, spec, p)
			return p, kinds[0], nil
		}
	}
	RegisterPort(PortRDMA, func(spec PortSpec, cfg *Config, log *slog.Logger) (noc.Port, string, error) {
		k := channelsOf(spec, cfg)
		p, err := openChannels(spec, cfg, log, k, func(i int) (noc.Port, error) {
			local, err := offsetAddr(spec.Args[1], i)
			if err != nil {
				return nil, err
			}
			remote, err := offsetAddr(spec.Args[2], i)
			if err != nil {
				return nil, err
			}
			name := spec.Name
			if k > 1 {
				name = fmt.Sprintf("%s/qp%d", spec.Name, i)
			}
			return rdma.Open(spec.Args[0], local, remote, rdma.Options{Name: name, Logger: log})
		})
		if err != nil {
			return nil, "", err
		}
		logChannels(log, spec, p)
		return p, PortRDMA, nil
	})
	RegisterPort(PortXDP, openNetdev(false))
	RegisterPort(PortAFPacket, openNetdev(true))
}

// portCounters returns the port's own counters (an AF_XDP port's per-cpu
// redirected/passed/dropped, summed), sorted by name.
func portCounters(p noc.Port) ([]ctl.Counter, error) {
	cp, ok := p.(interface {
		Counters() (map[string]uint64, error)
	})
	if !ok {
		return nil, nil
	}
	m, err := cp.Counters()
	if err != nil {
		return nil, fmt.Errorf("port %s counters: %w", p.Name(), err)
	}
	out := make([]ctl.Counter, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, ctl.Counter{Name: k, Value: m[k]})
	}
	return out, nil
}

// openUDP opens a udp port: one channel per address pair (LOCAL-ADDR and
// REMOTE-ADDR, their ports offset by the channel's index), each by open.
func openUDP(spec PortSpec, cfg *Config, log *slog.Logger, open func(local, remote string) (noc.Port, error)) (noc.Port, string, error) {
	p, err := openChannels(spec, cfg, log, channelsOf(spec, cfg), func(i int) (noc.Port, error) {
		local, err := offsetAddr(spec.Args[0], i)
		if err != nil {
			return nil, err
		}
		remote, err := offsetAddr(spec.Args[1], i)
		if err != nil {
			return nil, err
		}
		return open(local, remote)
	})
	if err != nil {
		return nil, "", err
	}
	logChannels(log, spec, p)
	return p, PortUDP, nil
}

// openUDPChannel binds one channel of a udp port.
func openUDPChannel(local, remote string) (noc.Port, error) {
	p, err := udp.Open(local, remote, udpMTU(remote))
	if err != nil {
		return nil, explainAddrInUse(err, local)
	}
	return p, nil
}
