// Package admit is where a host program's decoded request becomes the
// core's: the one table from the host wire's operations (hostif/wire) to
// the core's (coherence.HostOp), the request's fields as the core reads
// them, the user its connection's peer credentials name, and the bound
// the node puts on it.
//
// The host interface's server (hostif) admits every request of the core
// it reads, from a socket or a ring, through Request; the simulator
// (package sim) admits the bytes its hostile sessions send through the
// same function, after the same decoder (wire.DecodeRequest), so what a
// garbled request can make the core do is what the simulator checks.
//
// A bulk transfer (STORE_BULK, LOAD_BULK) is cut at page boundaries into
// the core's own stores or loads by Bulk, each admitted as Request admits
// one. Transfer keeps one transfer's pieces and their outcomes and gives
// its answer (the bytes of the pieces before the first that failed, and
// that piece's errno); Transfers is a session's transfers in flight and
// the budget of pieces they have in the core at once. Both are pure and
// deterministic: the server runs them under its connection's lock with
// the bulk area's bytes beside them, the simulator's transfer sessions
// run them as they are.
//
// Admission here is pure: it checks nothing the core checks (the page
// permission rule, quotas, holdings), and refuses only what the core has
// no operation for (huge pages).
package admit
