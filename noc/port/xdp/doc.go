// Package xdp is the NoC port over a real network device: an AF_XDP socket
// per link with the NoC XDP program (package noc/port/xdp/bpf) on the device, and the
// fallback to an AF_PACKET socket (package noc/port/afpacket) where AF_XDP or BPF
// is not permitted or not supported. [Open] picks; [NewPort] is AF_XDP only.
//
// # Frames
//
// Every datagram travels as one Ethernet frame: the neighbour's MAC (learned
// from its frames, broadcast until then), the device's MAC, ethertype 0x88B5
// (noc.EtherType), the datagram (package ether). The port MTU is the device
// MTU less 14. The XDP program sends 0x88B5 frames to the socket and passes
// everything else to the kernel untouched.
//
// # AF_XDP
//
// The shape follows gVisor's pkg/xdp: one file per ring (fillqueue.go,
// rxqueue.go, txqueue.go, completionqueue.go, over the generic index
// arithmetic of ring.go), the UMEM in umem.go, every use of unsafe in
// xdp_unsafe.go. Ring indices are shared with the kernel as atomics;
// each side keeps cached copies and touches the shared words in batches.
// Ring sizes are powers of two; UMEM frames are 4096 bytes.
//
// The UMEM is split in halves so the reading and the writing goroutine
// share no frame and no lock: receive frames cycle fill → RX → reader →
// fill, send frames free → TX → completion → free. Frames larger than a
// UMEM frame (a 4 KiB page plus headers) use multi-buffer descriptors
// (XDP_USE_SG, kernel ≥ 6.6); an older kernel gets a port MTU of 3826.
//
// Reads wait in the Go runtime's poller (the socket is an *os.File), so
// deadlines and Close wake them. The sockets ask for XDP_USE_NEED_WAKEUP:
// a send wakes the kernel with sendto only when the TX ring asks for it
// (copy mode always does: the copy happens in that call), a reader wakes
// an idle driver with recvfrom when the fill ring asks.
//
// Zero-copy is used where the driver offers it (the kernel falls back to
// copy mode otherwise; veth has no zero-copy); Options.ZeroCopy can forbid
// or require it.
//
// # Errors
//
// WriteDatagram fails with an error matching syscall.ENETDOWN while the
// device or its carrier is down; nothing is queued then, so no stale burst
// follows when the link returns (at most the frame that found it down).
// ErrTxBusy means the TX ring stayed full for a millisecond; ErrTooLarge a
// datagram over the MTU. Either way the datagram is lost, as on any
// unreliable port.
//
// # Resources
//
// Close detaches the program (its BPF link), removes its pins, closes the
// maps and the socket, and unmaps the rings and the UMEM. A crashed agent's
// program goes away with its link; one that outlived it is replaced by the
// next port opened on the device (see package xdp/bpf).
//
// # Queues
//
// A port binds one receive queue (Options.Queue, default 0). On a
// multi-queue NIC, steer ethertype 0x88B5 to that queue (ethtool ntuple)
// or use one combined channel; NoC frames on other queues are counted as
// "unbound" and passed to the kernel.
//
// [NewQueuePorts] and [OpenQueues] open one port per queue 0..K-1 of one
// device, the channels of a multi-channel link: one AF_XDP socket (and
// UMEM) per queue, one XDP program for the device (its socket map holds
// every queue's socket; the last port to close detaches it). A socket
// sends on its own transmit queue and receives what arrives on its
// receive queue. veth keeps a frame's queue from one end to the other, so
// channel i runs on queue i both ways; a NIC puts a frame where its RSS or
// flow steering says, so a channel's datagrams may be read from another
// queue's socket, and the link's stripe then accounts them by the channel
// their header names (link.StripeConfig.SharedMedium). A device with fewer
// queues than asked (the smaller of its receive and transmit queues, or
// the first queue the kernel will not bind) gets one port per queue, with a
// warning; an AF_PACKET fallback has one channel per device.
//
// This package never touches frames of other ethertypes and never changes
// a device's settings beyond attaching its XDP program.
package xdp
