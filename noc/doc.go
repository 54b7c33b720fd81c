// Package noc is the network-on-chip of the fabric: the frame every DPU
// exchanges with its neighbours and the Port a frame travels over.
//
// # Frame
//
// A frame is a fixed 48-byte header followed by a payload. All multi-byte
// fields are in network byte order (big endian).
//
//	offset size field
//	0      1    version      (FrameVersion = 1; others are rejected)
//	1      1    class        Load, Store, Atomic or Control
//	2      1    op           operation inside the class (coherence and routing own the values)
//	3      1    flags        FlagReply, FlagError, FlagHuge, FlagPath; others reserved
//	4      4    src          source node id
//	8      4    dst          destination node id (BroadcastNode: the neighbour on the link)
//	12     1    hops         hop count, incremented by every router that forwards the frame
//	13     1    priority     arbitration priority, higher first
//	14     2    length       payload length in bytes
//	16     8    request id   chosen by the requester, echoed in the reply
//	24     16   gva          Hi then Lo
//	40     8    version      page version
//	48     ...  payload      length bytes; bytes after the payload (link padding) are ignored
//
// [Frame] is a gopacket DecodingLayer: decoding fills it in place, points its
// Payload into the input and allocates nothing. Encoding writes into a
// caller-owned buffer ([Frame.AppendTo]) or a gopacket SerializeBuffer.
//
// Other files of this package and its sub-packages hold the topology and
// planner (topo), link-state routing (route), the reliable link layer (link)
// and the port implementations (mem, udp).
//
// This package does no I/O; a Port is the boundary where I/O happens.
package noc
