// Package hostiftest runs the host interface over the real node for
// tests: a Fabric is a few node cores (node.Core with the coherence core
// and its host sessions, exactly as the agent builds them) joined by
// node/nodetest's virtual wires, each with the host package's Backend in
// front, driven on wall-clock time. A hostif server in front of a Node is
// a host on that node; two servers in front of two Nodes are two hosts
// sharing memory. Faults are real ones: Partition cuts a node's wires,
// Config bounds capacity and pins.
//
// StartServer and StartEcho start a host socket (or a bare SOCK_SEQPACKET
// echo, a benchmark baseline) at a fresh path for a test.
package hostiftest
