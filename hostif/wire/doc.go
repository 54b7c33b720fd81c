// Package wire is the byte layout of the host interface (dpu0.sock): the
// 32-byte message header shared by requests, replies and events, the op and
// event numbers, and the fixed layout of every op's body. hostif/PROTOCOL.md
// describes the same layout byte by byte; this package is its executable form
// and the C library in hostif/c mirrors it.
//
// # What it owns
//
//   - encoding requests (clients) and decoding them (the server), with every
//     field checked: a request that decodes without error is well formed;
//   - encoding and decoding reply and event bodies;
//   - the protocol version range this build speaks.
//
// # What it must never do
//
// It does no I/O, holds no state and never trusts a length it has not
// checked. Decoders never allocate and never retain the input: byte slices
// they return alias the input buffer.
package wire
