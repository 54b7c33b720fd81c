// Package udp is a noc.Port over a UDP socket: the link a local multi-node
// fabric uses on loopback (no root needed), and the fallback on networks
// where AF_XDP is not available.
//
// A Port is bound to one local address and sends every datagram to one
// configured remote address. Datagrams from any other address are dropped
// and counted (Stats.Foreign): the socket is not connected, so a peer that
// restarts on the same address keeps working, and strays never reach the
// link layer.
//
// Port also implements noc.Poller, noc.BatchPoller, noc.BatchWriter and
// noc.Waitable: TryReadDatagram is one recvfrom(2) with MSG_DONTWAIT,
// allocation-free, TryReadDatagrams one recvmmsg(2), WriteDatagrams
// sendmmsg(2), and ReadyFD the descriptor a driver's own epoll set waits
// for. The socket is taken out of the Go runtime's network poller when the
// Port is made: a datagram wakes only the driver that waits for it, never a
// poller thread as well (blocking reads wait in poll(2) instead).
//
// Throughput: a Port's socket asks for SocketBuffer (4 MiB) of send and
// receive buffer, so a link's whole window of large datagrams fits at the
// receiver; PathMTU says how large a datagram the route to a peer carries
// without IP fragmentation (capped at JumboMTU, 9000 bytes: one 4 KiB page
// per datagram on loopback and jumbo links). WriteDatagrams sends each
// run of consecutive datagrams of one size (the last of a run may be
// shorter) as one UDP GSO message (UDP_SEGMENT): the kernel walks its
// socket and routing layers once for up to 64 datagrams, and the receiver
// gets the same datagrams one by one. A kernel or route that refuses
// segmentation is asked no more on that socket. Receive-side coalescing
// (UDP_GRO) is not used: a coalesced read needs buffers of 64 KiB and a
// split before the link layer.
//
// # What it must never do
//
// It never interprets the bytes it carries, never sends to any address but
// the configured remote, never retries or buffers (the link layer above owns
// reliability), and never blocks without the bound set by SetReadDeadline;
// Close wakes blocked readers.
package udp
