// Package rdma is the RoCE port: a noc.Port over one RC queue pair, through
// rdma-core's libibverbs (cgo, behind the rdma build tag; without it Open
// returns ErrNotSupported and the pure-Go build is unchanged).
//
// # Shape
//
// One port is one reliable-connected queue pair with its own protection
// domain, a send and a receive completion queue (the writer and the
// reader never share one), and two registered rings of Slots slots of MTU
// bytes in C memory: receive slots are all kept posted; a datagram longer
// than the inline limit is copied into a free send slot and sent from
// there, a shorter one is sent inline (the device copies it out of the
// work request during the call: no DMA read, no slot). The reader blocks
// on the receive queue's completion channel (armed, then polled again,
// then waited on with poll(2) together with an eventfd that SetReadDeadline
// and Close use to wake it), in slices of 100 ms at most.
//
// A multi-channel link over RoCE is K such ports (K queue pairs), one per
// channel, joined by noc/link's StripedPort; channel i bootstraps on the
// UDP ports LOCAL+i and REMOTE+i.
//
// # Bootstrap
//
// The queue pairs of the two ends connect over the link's bootstrap path:
// a UDP socket between the two ends' addresses on the RoCE netdev. Each end
// sends its [Handle] (session and QP generation, QPN, first PSN, GID, LID,
// slot size and count; 64 bytes with a CRC32C, fuzzed) every Greeting until
// connected and every 25 Greetings after. [Bootstrap] decides: an end
// connects (RTR then RTS, toward the peer's QPN, PSN and GID) once the
// peer's handle names the end's current identity, a three-way greeting; it
// resets its QP (RESET, INIT, receives reposted, a new generation and PSN)
// when a completion reports an error or when the peer's identity changes
// under a connected QP (the peer restarted or reset), and greets again.
// Late handles of an older generation or a retired peer session are
// ignored, so a restart settles in one round.
//
// # Reliability
//
// RC delivers in order and retransmits in hardware: on a healthy queue
// pair nothing is lost, and an end whose receives are all in use is
// waited for (RNR retry, infinite) rather than dropped. The link layer
// (noc/link) still runs over this port, and must: a queue pair that
// errors (the peer died: retries exceeded; the link went away) flushes
// every work request in flight, and the reset that follows loses them;
// RC's ack also only says the peer's device placed the bytes, not that
// its agent took them. The link layer's sessions and epochs turn a peer
// restart into a clean link restart and its retransmission recovers what
// a reset lost. On a healthy QP its retransmission timer simply never
// fires (Stats.Retransmits stays 0), so the cost is its header and acks.
//
// # What changes on a real ConnectX / BlueField
//
// Nothing in the code: the device name (mlx5_0, ...) replaces rxe0, and
// the GID of the netdev's IPv4 address is found the same way. In practice:
// the device does RoCE in hardware (soft-RoCE does it in the kernel's
// network stack, with copies); lossless Ethernet (PFC/ECN, DCQCN) must be
// configured on the fabric for RoCE's retry-based recovery to stay rare;
// the path MTU is the netdev's (4096 with jumbo frames); inline sizes and
// queue depths are larger (the device grants what it supports); on a
// BlueField the agent runs on the Arm cores and opens the ECPF/representor
// device that faces the fabric. Completion events could move to a shared
// completion channel per agent and the blocking wait to the Go poller.
//
// # What it must never do
//
// It never hands the device Go memory other than an inline send's bytes
// for the duration of the post, never frees the queue pair while a reader
// or writer is inside it, and never waits without a bound.
package rdma
