// Package afpacket is the NoC port over an AF_PACKET socket: the fallback
// where AF_XDP or BPF is not permitted or not supported. The socket is bound
// to one device and to ethertype 0x88B5, so it sees only NoC frames, and
// sends the same frames an AF_XDP port sends (package ether): the
// neighbour's MAC (learned, broadcast until known), the device's MAC,
// 0x88B5, the datagram.
//
// It needs CAP_NET_RAW and nothing else: no BPF, no XDP program on the
// device. It never touches traffic of other ethertypes and never changes
// the device's settings.
package afpacket
