// Package node is the deterministic core of one DPU: the reliable link of
// every port, link-state routing, frame forwarding, and the protocol engine
// plugged in as a Handler (the coherence engine). It is a single-threaded
// state machine: it is handed time and input events and produces datagrams
// for its ports. It does no I/O, reads no clock and draws no randomness of
// its own.
//
// Time is a time.Duration since an arbitrary epoch chosen by the driver; it
// never goes backwards. The real agent drives a Core with real ports and the
// monotonic clock; the simulator drives many Cores with virtual links and
// virtual time.
//
// Frame dispatch at a node:
//   - routing control frames (noc.Frame.IsRouting) go to link-state routing;
//   - frames flagged noc.FlagPath (page-keyed: they follow the path cache),
//     and frames addressed to this node, go to the Handler;
//   - every other frame is forwarded toward its Dst by the routing table,
//     its hop count incremented, without involving the Handler.
package node
