// Package reallink measures the NoC over real links on one machine: a line
// of network namespaces joined by veth pairs (package fabric/veth), real
// dpu-agent processes in some of them, and in-process nodes at the ends
// that originate and count the traffic. Beside every NoC measurement it
// measures the kernel doing the same job between the same namespaces (IPv4
// forwarding of UDP, a plain UDP ping-pong), so the numbers of one run can be
// compared with each other on a noisy machine.
//
// # Pieces
//
//   - [Node] is an in-process node: a node core (package node) over real
//     ports, driven by the goroutine that calls its methods. It originates
//     frames ([Node.Blast]), answers nothing itself beyond what the core does
//     (echo), counts the frames delivered to it, and times echo round trips
//     ([Node.Echo]).
//   - [Agent] is a dpu-agent process started inside a namespace, with its
//     control socket for counters, stopped with a bound.
//   - [Line] builds the namespaces; [RouteIPv4] gives a line addresses and
//     routes and turns forwarding on in its middle namespaces;
//     [KernelForward], [KernelPingPong] and [UDPEcho] are the kernel's side.
//   - [NoCForward] and [NoCEcho] measure the NoC between two Nodes; a
//     [Flow] is the outcome of a forwarding run; [Percentile] reads round
//     trips.
//   - [Workspace] holds the fabrics of one run under a lock, and removes
//     what a killed earlier run left behind (its namespaces, and the agents
//     it recorded, killed by pid after checking their command line).
//
// The benchmarks themselves are in the package's *_integration_test.go
// files, behind internal/privtest (root: namespaces, veth, BPF, AF_XDP).
// Raw results and the commands that produced them are in bench/README.md.
//
// # What it must never do
//
// It never leaves anything behind: every namespace, veth, XDP program and
// process it creates is released by the Close/Stop/Down its constructor
// names, and every wait it does is bounded (a context, a deadline or a stall
// bound). It never changes the root namespace's network settings; sysctls
// are written inside the fabric's namespaces only. It measures; it does not
// decide what is fast enough.
package reallink
