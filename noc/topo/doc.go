// Package topo owns the wiring of a fabric as a graph: nodes, their
// numbered ports and the point-to-point links between them; the generators
// of the standard topologies; the metrics that judge a wiring (hop counts,
// diameter, average hops, connectivity); the Moore bound; and the planner
// behind `dpuctl topo plan`.
//
// # Graph
//
// A [Graph] has N nodes numbered 0..N-1 (as noc.NodeID). Each node's ports
// are numbered 0, 1, ... (as noc.PortID); a [Link] joins port PortA of
// node A to port PortB of node B. Generated graphs number each node's ports
// densely in the order its links were made. Self-loops and parallel links
// are refused. [Graph.Disconnect] leaves an unwired gap so that the other
// ports keep their numbers, like a pulled cable.
//
// # Generators
//
// [Generate] builds one of [Kinds]: line, ring, tree (balanced, filled
// breadth first, no node above Options.Ports ports), torus2d, smallworld
// (ring lattice, seeded rewiring, spare ports filled with seeded
// shortcuts), random-regular (seeded, connected, every node exactly k
// ports) and planned (Plan's wiring). Parameters no such graph can satisfy return an error wrapping
// [ErrImpossible]. Seeded kinds give the same graph for the same seed.
//
// # Moore bound
//
// A graph whose nodes have at most k ports and whose diameter is D has at
// most 1 + k·(1 + (k-1) + ... + (k-1)^(D-1)) nodes ([MooreBound]). Read
// backwards this gives the least diameter N nodes can have
// ([MooreDiameter]) and, filling each level of a breadth-first tree as
// fully as the bound allows, the least average hop count
// ([MooreAvgHops]). Only a few graphs meet it (the Petersen graph: N=10,
// k=3, D=2; the Hoffman–Singleton graph: N=50, k=7, D=2).
//
// # Planner
//
// [Plan] answers "N nodes, k ports each: which wiring?". It aims at the
// diameter of the largest known graph of degree k with at least N nodes
// ([RecordFor], from the table of the degree–diameter problem) and
//
//   - scores every generator;
//   - searches voltage graphs: a small base multigraph (1 to 16 nodes)
//     whose edges carry elements of a group, lifted to a graph with a
//     node per (base node, element). The groups are the metacyclic
//     Z_p ⋊_r Z_q (cyclic and direct products among them) and PSL(2, p),
//     SL(2, p) for small primes; a lift of more than N nodes is trimmed
//     (nodes far apart removed, their freed ports wired to each
//     other). A lift's symmetry makes its evaluation b breadth-first
//     searches, not N, so 1,024 nodes get some 200,000 evaluations. The
//     voltages are annealed one at a time on the hop sum plus a heavy
//     weight on the hops beyond the target diameter: many short runs,
//     then long cooler runs from the four best;
//   - improves the best wiring (or random near-regular samples) by
//     degree-preserving link swaps, half of them aimed at a pair of nodes
//     beyond the target (at the diameter, once there). Every pair's
//     distance is kept and updated incrementally after a swap (the nodes
//     that lose their last shortest-path parent through a removed link are
//     settled again, the added links' improvements spread by a pruned
//     search; a refused swap is undone from a log), so an evaluation
//     touches only what changed: 1,024 nodes get some 30,000 of them. Its
//     cost is the hops beyond the target, then the hop sum, annealed.
//
// Two such searches (streams: a lift search, then the swap search from its
// best lift; four at 128 nodes, eight at 64) run in parallel, each drawing from its own source seeded from
// the plan's seed; their results are merged in stream order, a tie going
// to the lower stream, so scheduling cannot change the plan. Every budget
// is a count of work, not a time, so the answer depends only on N, k and
// the seed. The [Proposal] reports the diameter and average
// hops beside their Moore lower bounds and the record's diameter;
// [Proposal.WriteText] is the text report and [Graph.WriteDot] the
// Graphviz picture. Generate's "planned" kind is the plan's wiring.
//
// This package does no I/O except writing reports to the io.Writer it is
// given, keeps no global state and draws randomness only from the seed it
// is handed. It must never depend on routing or the node core: those use
// it, in tests and tools.
package topo
