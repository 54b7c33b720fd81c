// Package mem is the in-process twin of a point-to-point link: [Pair] returns
// two connected [Port]s that implement noc.Port and noc.Poller, so link-layer
// and router tests run without sockets, root or a network namespace.
//
// # Faults
//
// The link a pair stands for is as unreliable as its [Config] asks: each
// datagram written may be dropped (Drop), written twice (Duplicate), overtaken
// by up to the next three datagrams (Reorder) and held for Delay plus a
// uniformly random part of Jitter (jitter larger than the spacing of writes
// reorders too). There is no bandwidth model: a datagram takes no time to
// serialise. Each direction holds at most Queue datagrams; a write that finds
// it full is dropped and counted (Stats.Overflow).
//
// # Determinism
//
// All randomness comes from a PCG source per direction seeded from
// Config.Seed. Driven by a single goroutine, a pair with a fixed seed makes the
// same decisions in the same order every run. Without Delay and Jitter the
// pair reads no clock at all; with them it reads Config.Clock (time.Now by
// default). A simulator with virtual time supplies its own Clock and reads
// with TryReadDatagram (blocking reads wait in real time).
//
// # What it must never do
//
// It never blocks a writer (a full queue drops), never hands out memory it
// still owns (reads copy), and never waits without a bound other than the one
// the caller set with SetReadDeadline; Close wakes blocked readers.
package mem
