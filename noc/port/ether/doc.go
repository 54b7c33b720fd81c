// Package ether frames NoC datagrams as Ethernet frames for the ports of
// package noc/port/xdp (AF_XDP) and noc/port/afpacket (AF_PACKET): a 14-byte header (the
// neighbour's MAC, this port's MAC, ethertype 0x88B5) followed by the
// datagram the link layer handed to the port.
//
// It also keeps the [Neighbour]: the MAC of the DPU at the other end of a
// point-to-point link, learned from the frames that arrive (or fixed by the
// operator), and broadcast until it is known.
//
// This package does no I/O and never allocates on the frame path. It never
// interprets the datagram after the header: that is the link layer's job.
//
// On a real Ethernet the sender's NIC pads frames shorter than 60 bytes; the
// receiver then sees up to 46 bytes of zeros after a short datagram. The
// NoC frame carries its own payload length, so the link layer must rely on
// that and not on the datagram length (on veth nothing is padded).
package ether
