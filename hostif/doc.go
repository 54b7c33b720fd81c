// Package hostif is the host interface of a node: the server behind
// RUN_DIR/dpu0.sock, the "char device" through which the host's programs
// (the C library, the Go client, the CUDA hook) use the shared address space.
//
// # Shape
//
// A connection is an open. Its first request is HELLO (version negotiation,
// and the connection's own read-only replica status table handed over as a
// descriptor); then
// the client sends fixed-layout requests, each with a 64-bit id, as many as
// MaxOutstanding at once, and reads replies (in any order, matched by id) and
// events on the same socket. hostif/PROTOCOL.md is the byte-by-byte
// description; package hostif/wire is its code.
//
// The server is in front of a [Backend], the node's core behind one verb
// ([Backend.Do] takes a [Call]: a [Verb] and its arguments, in a
// [Session]). Every connection is a session of the Backend, opened when
// HELLO is answered and closed when the connection ends; every request of
// the connection, on its socket or its ring, pipelined or not, is a call
// in that session. What a session holds (refs, acquisitions, locks) and
// the node's lock of a page between its sessions (one holder, the others
// waiting in order within their bounds, TRY and EDEADLK) are the
// Backend's: the server aggregates nothing. It owns what is per host and
// is a view rather than protocol state:
//
//   - credentials: SO_PEERCRED/SO_PEERGROUPS of every connection, handed
//     to the core with each of its calls; the core checks them against
//     the owner uid/gid/mode every page gets at alloc (the server checks
//     no permission itself);
//   - replica files: one sealed memfd per page mapped on this host, shared
//     read-only with every process that maps it, kept current from the
//     server's own writes and the Backend's events, with an entry (seqlock,
//     version, valid/stale) in the status table of each connection that
//     maps it, so a library read is a memory load; a connection's table
//     describes only the pages it maps;
//   - the LVA↔GVA map of each host process (TRANSLATE);
//   - which connection a session is, so that the events naming a session
//     (a revoked pin, a lost ownership) reach that connection;
//   - cleanup: a connection that ends closes its session (the Backend gives
//     back its refs, locks and acquisitions and abandons its requests in
//     flight), and the server drops its holds on the replica files and its
//     LVA↔GVA entries.
//
// # I/O
//
// Each connection has one reading goroutine. It reads up to 16 requests per
// recvmmsg (never more than the free request slots) and sends the replies
// that are ready with one sendmmsg; the driver's loop takes a ring's
// submissions (rings.go). Both hand every decoded request to the one
// dispatcher (dispatch.go):
//
//   - a request of the core (the data path, and alloc, free, acquire,
//     release, lock, unlock) goes to the backend's [Pipeline] as the
//     core's own request (coherence.Request: the one shape a
//     request has between the decoded wire request and the frame), with
//     the batch's others (Submit); the request carries its task through
//     the core (Request.Tag), not a goroutine or a table, and its
//     completion brings it back as the core's value (coherence.Completion, [Server.Complete]), answered by
//     whoever steps the backend's core.
//     The core admits it (permission, quota, the page's attributes asked
//     of its home first where it must) and bounds it. After it has
//     flushed the batch's ready replies, the reader hands its goroutine
//     to a backend that is an [Awaiter] while the connection's requests
//     are in flight: the agent's adaptive mode steps its core on it for
//     answers from other nodes, within its spin budget. A lock that waits
//     its turn so waits in the core, holding a request slot and nothing
//     else;
//   - requests the server serves itself without waiting (TRANSLATE,
//     SUBSCRIBE, CLOCK) run on the caller's goroutine;
//   - the rest run on a goroutine of their own, through the blocking
//     [Backend.Do]: MAP and UNMAP (they make, load, share and retire the
//     replica files, several backend calls per request with the replica
//     table's waits between them), RINGS and MAPS (server work only), the
//     GPU ops (the GPU handler may wait). A session's open and close also
//     use Do. The server's own reloads of stale replica files are
//     requests of the core in the server's session, submitted to the
//     Pipeline by one goroutine of the server, their completions handed to
//     [Server.Complete] like the others'.
//
// Replies and events go through a combining outbox (whoever finds it idle
// writes everything queued), bounded by WriteTimeout. Package
// hostif/internal/seqpacket holds that socket code.
//
// # What it must never do
//
// It never trusts a client: every request is decoded and checked (garbage
// gets EINVAL, repeated garbage a disconnect), every wait and Backend call
// has a deadline, and no client can stall another (per-connection bounds on
// requests in flight, events queued and time to read a reply). It holds no
// lock while calling the Backend or writing to a socket, and it never
// writes page content anywhere but the replica files it owns.
//
// The node's Backend is package host's, over the node's core; package
// hostif/hostiftest runs it over a fabric of real node cores for tests.
// The client side is hostif/client (Go) and hostif/c (C library).
package hostif
