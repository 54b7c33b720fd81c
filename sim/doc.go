// Package sim is the deterministic simulator of the fabric: it runs N real
// node cores (package node: reliable links, link-state routing) with their
// coherence engines in one process, on any generated topology (noc/topo),
// in virtual time, with one seeded PCG source per run derived per component
// (wires, faults, workload, nodes, each client).
//
// The wires are node/nodetest's (nodetest.Wires, the same as the node and
// coherence tests'): they delay every datagram (and, with faults, drop,
// duplicate and hold some back); links are cut and restored; nodes
// fail-stop and restart as a new incarnation (a new allocation epoch, an
// empty page store, as the agent restarts), one at a time (FaultCrash) or
// half the fabric or more at once with restarts in another order
// (FaultOutage).
//
// Config.Links picks what the ports talk through. LinksReal (the default)
// runs the real link layer (noc/link) over those datagrams, and every fault
// kind works. LinksAbstract, for large fabrics, gives every port a
// nodetest.AbstractLink: a wire carries whole frames in order with the same
// seeded delay, and there are no link-layer datagrams, acks, heartbeats or
// retransmissions, so a request puts less than half as many frames on the
// wires. Routing, the path cache, the coherence engine and the host
// sessions are the same code. Flaps and crashes work on abstract links
// too: a cut wire or a failed node drops the carrier at once, losing the
// frames in flight on it, which is harsher on the engines than the real
// link layer's dead interval (the cycles in a page's tree that a swap's
// done stopped by a dead link used to make were found this way). Drop and
// delay act on link-layer datagrams and are refused on abstract links.
// Routing on abstract links is set for large fabrics (routeConfig): a node
// gathers the adjacencies that come up within 50 µs into one LSA and
// refreshes it every 10 s instead of every second, since every LSA costs
// a frame on every link of the fabric. BenchmarkAbstract1024 measures the
// mode on 1,024 nodes: requests per CPU-second in the steady state, and
// the start-up apart.
//
// RunScale (dpu-sim --scale-table) runs one world and measures it for the
// scaling table: routing convergence (virtual time until every node routes
// to every other, looked at every ConvergePoll, the frames, LSAs and
// shortest-path runs it took), the link-state database's and the path
// cache's bytes per node, frames per request, request latency, messages
// per write and the hops requests travel up their pages' trees beside the
// shortest distance of the same pairs, the graph's average and the Moore
// bound's. Its caller reads the clocks at the phases it reports.
//
// Host clients on every node ref, load, store, CAS, fetch-add, lock,
// unlock, acquire and unref a few hot pages and more cold ones. Each client
// is a host session of its node's core, as each connection is in the
// agent: the clients of one node contend for the node's lock of a page in
// the core (waiting in order, within their bounds), give up on requests
// (abandon) and go away, waiting or holding (close).
//
// Checks, while running and at the end:
//   - at most one owner per page, and none only inside a swap (or once the
//     page was lost with a failed owner);
//   - owners apply a page's versions one after the other, whoever the
//     owner is (a second owner would repeat a version); every acknowledged
//     write is the write the owner applied at its version; at the end the
//     owner holds exactly the applied writes;
//   - every replica's versions only grow and never pass the owner's;
//   - after the quiet period every page's path-cache entries form one
//     tree rooted at its owner: each up port leads to a node that counts
//     the link as a branch, each branch leads to a node hanging below it,
//     and no chain of up ports goes round a cycle;
//   - after the quiet period every mapped replica reads the owner's
//     content (convergence);
//   - every request ends within the engine's request bound;
//   - a write at the owner sends one update per live branch of the tree;
//   - CAS, fetch-add and lock histories are linearizable (porcupine, one
//     model per atomic word and per lock), across failovers too; no two
//     clients of one node ever both hold a lock; a closed session holds
//     nothing and is forgotten, an open one holds no lock its client does
//     not know of;
//   - with Config.Replicas = R > 1: when an owner crashes, a live backup
//     holds every version it committed (every acknowledged write); the
//     backup that takes the page over holds the committed version (or the
//     one write after it the owner had staged), its content equals the
//     applied writes, and from then on its versions follow on; a page
//     whose owner crashed and that no backup took over by the end is a
//     violation, unless every copy of it died (the last live copy's node
//     failed too): that page is counted lost, and requests for it must
//     end with EHOSTDOWN or ESTALE. A crashed node's locks count as released (an unlock of
//     unknown time). An owner the split rule fences (its node cut off in a
//     minority, or not yet confirmed by its backups since) does not count
//     as an owner that acts: at most one acting owner per page; none may
//     be left fenced after the quiet period.
//
// The same seed replays exactly: Result.TraceHash hashes every completion
// and fault in order. Config.DebugPage (dpu-sim --debug-page) traces every
// protocol step the engines take for one page and dumps its tree.
//
// Besides the clients: flooders (flood.go) and garblers (garbage.go),
// hostile sessions that flood and send garbage through the host wire's
// decoder and admission; transfer sessions (transfers.go, with
// Config.Transfers) that run bulk transfers through admit.Transfer and
// its budget as the agent's server does, each answer checked against its
// pieces' outcomes.
//
// Modes: SmallCache gives nodes physical pages for half the workload and
// small path caches with an idle TTL (evictions, the capacity rule);
// ReadMostly makes 95% of requests loads; Bug plants a protocol bug to
// show that the checkers catch it.
//
// What the simulator leaves out: link loss shorter than the link layer's
// dead interval is invisible to the engines (the link retransmits); disks
// are not modelled (memory tier only); node clocks are one virtual clock.
//
// The simulator is a test harness: it must never be linked into the agent,
// and it must never read the wall clock or an unseeded random source.
package sim
