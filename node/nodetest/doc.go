// Package nodetest wires node cores together with virtual links and drives
// them in virtual time, deterministically: the same seed and the same calls
// give the same datagrams in the same order. It is the in-memory fabric of
// the node, routing and simulator tests.
package nodetest
