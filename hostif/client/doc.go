// Package client is the Go client of a node's host interface (dpu0.sock):
// alloc, free, map, load, store, CAS, fetch-add, acquire, release, lock,
// unlock, where, translate and events, each a method taking a context.
//
// A Client is one connection (one "open" of the device). It is safe for
// concurrent use: calls from several goroutines are pipelined on the
// connection, up to the server's limit of requests in flight, and replies
// are matched to calls by request id. The socket is read by the callers
// themselves, in poll(2) on a descriptor kept out of the Go runtime's
// network poller: a caller waiting for its reply takes the read turn if
// nobody holds it and reads for everyone, handing the others their replies,
// until its own comes; then it passes the turn to the next caller still
// waiting. A lone caller thus writes its request and reads its reply in its
// own thread, with one wake-up per round trip, as a C program does. While
// no call waits, a listener goroutine reads the socket for events and for
// replies nobody waits for any more. Every call is bounded:
// by its context, or by Options.Timeout when the context has no deadline. A
// call abandoned before its reply arrives is undone when the reply comes (a
// MAP is unmapped, a LOCK unlocked, an ALLOC freed), so nothing leaks.
//
// When the server offers a shared-memory ring pair (hostif/ring,
// PROTOCOL.md §12) Dial takes it, unless Options.NoRings or DPU_RINGS=0 says
// not to: every request whose reply carries no descriptor then goes through
// the submission ring, and its caller spins on the completion ring for
// Options.RingSpin (reaping for every caller), then sleeps; one reaper
// goroutine sleeps on the ring's bell for sleeping callers. The socket keeps
// HELLO, MAP and the events.
//
// Map returns a Mapping: the host's replica files mapped read-only into the
// process. See Mapping for the consistency of its reads.
//
// Mmap returns an Area: shared pages at an address of the process, read
// and written with plain loads and stores, filled by page faults through a
// userfaultfd (the Go form of libdpu's dpu_mmap). A write takes the page's
// ownership to this node; Client.Lock/Unlock/Acquire/Release and Area.Sync
// are its acquire and release points. See Area.
//
// The package must never hold a lock across a socket write or a wait, and
// never touch a Mapping's memory after unmapping it.
package client
