// Package route is the link-state routing of one node: neighbour discovery
// with hellos, flooding of adjacencies as link-state advertisements (LSAs),
// and the shortest-path routing table every node computes from them.
//
// A [State] is a deterministic state machine, one per node. It does no I/O,
// reads no clock and draws no randomness: the node core hands it port
// events ([State.PortUp], [State.PortDown]), routing frames
// ([State.HandleFrame]) and time ([State.Tick] at [State.NextDeadline]),
// and drains the frames it wants sent with [State.Outputs]. Time is a
// time.Duration since an arbitrary epoch that never goes backwards.
//
// # Discovery
//
// When the node core reports that a port's reliable link is up, the State
// sends a hello on it. A hello names its sender (the frame's Src) and the
// sender's port. Receiving one records the adjacency (port, neighbour,
// neighbour's port) and, unless it is itself a reply, is answered with a
// reply hello, so a neighbour that restarted its side learns us again. A
// port that is up but has not heard its neighbour repeats its hello every
// HelloInterval. The adjacency ends when the node core reports PortDown:
// failure detection is the link layer's (heartbeats), not ours.
//
// # Flooding
//
// Each node originates an LSA listing its adjacencies, with a sequence
// number that grows with every origination, and an incarnation number
// from Config. Of two LSAs of one originator the higher (incarnation,
// sequence) is newer. An adjacency change makes the node originate a new
// LSA at the next Tick (several changes between two Ticks make one LSA);
// every RefreshInterval it re-originates anyway. A received LSA that is
// newer than the database's copy is installed and flooded on every other
// adjacent port; an older one is answered with our copy on the port it
// came from; a copy of what we hold is dropped. When an adjacency forms,
// each side sends the other its whole database. Links are reliable, so
// LSAs need no acknowledgements.
//
// A restarted node starts again at sequence 1. Its neighbours send it its
// own old LSA (in the database exchange, or as the answer to its stale
// one); a copy of its own LSA newer than its current one — or as new but
// different — makes it originate again with the sequence number after the
// copy's, which supersedes the old LSA everywhere. Config.Incarnation,
// when the driver has a boot counter, makes the new run newer at once.
//
// A restarted node can reuse a sequence number: it catches up on the
// old LSA one neighbour holds, while its earlier run's later LSA lives
// on beyond another neighbour that restarted too. Two copies of one
// (incarnation, sequence) with different adjacencies are then ordered by
// their adjacencies (the longer list, then by neighbour and ports): the
// higher is installed and flooded, the lower is answered with the higher,
// and the originator, handed a copy of its own number that differs from
// its own, originates past both. Taking the second copy for a duplicate
// left the fabric's two sides with two views of the node until its next
// refresh (one of them one-way: the nodes behind it unreachable).
//
// LSAs carry their age. An LSA that reaches MaxAge without being refreshed
// is dropped (its originator is gone or cut off); the LSA of an originator
// that no path reaches is dropped after UnreachableHold. A node that
// disappears therefore leaves every routing table as soon as its
// neighbours' new LSAs arrive, and every database soon after.
//
// # Routes
//
// The routing table is a breadth-first search on hop count over two-way
// links: a link counts only when both ends list each other (this node's
// side from its live adjacencies). It is recomputed at the Tick after
// any change of the database or of an adjacency (at SPFDelay after the
// change; by default the next Tick), so a burst of LSAs costs one
// computation.
//
// Tie-break: of the neighbours that lie on a shortest path to a
// destination, the next hop is the one with the lowest node id; of
// several ports to that neighbour, the lowest-numbered port.
//
// [State.NextHop] reads the table in O(1) without allocating.
// [State.Version] grows with every table change, for route-change events.
//
// # Frames
//
// Routing frames are link-local: class Control, Src the sending node, Dst
// noc.BroadcastNode (the node at the other end of the link), op [OpHello]
// or [OpLSA]. Payloads, all fields in network byte order:
//
//	Hello (OpHello), 8 bytes
//	offset size field
//	0      2    port         the sender's port the hello leaves on
//	2      1    flags        bit 0: reply (do not answer); others zero
//	3      1    reserved     zero
//	4      4    incarnation  the sender's incarnation
//
//	LSA (OpLSA), 20 + 8·n bytes
//	offset size field
//	0      4    origin       the node whose adjacencies these are
//	4      4    incarnation
//	8      4    sequence
//	12     4    age          milliseconds since origination, at sending
//	16     2    n            number of adjacencies
//	18     2    reserved     zero
//	20     8·n  adjacencies  each: port (2), neighbour node id (4),
//	                         neighbour's port (2); sorted by port, each
//	                         port once, neighbour never the origin
//
// Port values 0xFFFE and 0xFFFF (noc.LocalPort, noc.NoPort) and node id
// 0xFFFFFFFF (noc.BroadcastNode) are invalid in payloads. A frame that
// breaks any of these rules is rejected with an error wrapping
// [ErrMalformed], and the State is left unchanged.
//
// This package must never do I/O, read a clock, keep global state, or
// block; it must never route page-keyed traffic (that follows the path
// cache).
package route
