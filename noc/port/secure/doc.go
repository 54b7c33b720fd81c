// Package secure makes any noc.Port an authenticated, encrypted link: a
// node is its static key, not its address.
//
// A secure Port wraps an inner port (UDP, AF_XDP, AF_PACKET, mem; every
// channel of a link is a port of its own) and speaks to the neighbour in
// sessions made by the Noise protocol framework's XX pattern,
//
//	Noise_XX_25519_AESGCM_SHA256, prologue "dpu noc link v1"
//
//	-> e
//	<- e, ee, s, es
//	-> s, se
//
// which authenticates both ends' static Curve25519 keys and derives a
// pair of transport keys (github.com/flynn/noise does the handshake). A
// static key that the fabric's key list (Fabric, from the agent's
// fabric-keys file) does not name ends the handshake: such a node is never
// a neighbour, whatever address it holds. AES-GCM is used because both the
// hosts' x86 cores and the DPUs' Arm cores have it in hardware.
//
// # Datagrams
//
// Every datagram after the handshake is sealed on its own, as WireGuard
// does: a 13-byte header (type, the receiver's session index, a 64-bit
// counter) that is the AEAD's associated data, the counter as its nonce,
// then ciphertext and a 16-byte tag (Overhead = 29 bytes, taken from the
// MTU). Datagrams may be lost, duplicated or reordered below: the receiver
// keeps a sliding window of RFC 6479 kind over the last 1984 counters, so
// each is accepted at most once and a datagram older than the window is
// refused. Nothing that fails authentication reaches the link layer.
//
// # Bundles
//
// Sealing costs about the same for 100 bytes as for 1400, so a port
// written many small datagrams at once (WriteDatagrams: the agent's loop
// writes everything a step produced for a port in one call) seals
// consecutive ones that fit in the MTU together: one bundle message (type
// 5, the same header, counter and tag as data) whose plaintext is the
// datagrams, each after a 2-byte length. A bundle is one counter of the
// replay window, so it is accepted at most once, as a whole; the reader
// checks that its lengths fill it exactly (two or more non-empty
// datagrams) before delivering any of them, and then delivers them one by
// one, in order, before reading the inner port again. Nothing waits to
// fill a bundle: what is written is sealed at once, and a datagram with
// no neighbour that fits goes as a plain data message.
//
// # Sessions
//
// Either side starts a handshake when it has something to send and no
// session (the datagram that prompted it is dropped: the port is
// unreliable and the link layer retransmits). When both start at once the
// one with the larger session index stays the initiator. The previous
// session stays acceptable while a new one takes over. A restarted peer
// (no state, same key) re-handshakes: the old session's datagrams name an
// index the new incarnation does not have and are dropped, and a datagram
// for an unknown index makes the receiver start a handshake, paced by
// Config.HandshakeRetry. The initiator renews a session after
// Config.RekeyAfter; no session is used after Config.RejectAfter or 2^60
// datagrams. Init and finish messages cost public-key work, so at most
// Config.HandshakeRate of them are processed per second; the rest are
// dropped before any of it.
//
// # Cookies
//
// A flood of forged inits (from the neighbour's address: the inner port
// takes nothing from any other) would spend that rate limit and keep the
// real neighbour out. So, as in WireGuard, a port under load (more than
// HandshakeRate/4 inits without a valid mac in about the last second)
// answers such an init with a cookie message (type 6: the init's sender
// index and a 16-byte cookie) instead of doing public-key work; the reply
// goes to the port's remote, where only the real neighbour (or someone on
// its path) reads it. The initiator sends its init again at once, with a
// 16-byte mac (HMAC-SHA256 with the cookie key over the init) appended,
// and appends one to its inits while the cookie is fresh (2 minutes). An
// init with a valid mac is served from the rate limit whatever the load.
// Cookies are HMACs of a random secret replaced every 2 minutes (the one
// before stays good until the next replacement). A node of this link
// version without cookies interoperates: it never sends a cookie, so it
// is never sent a mac, and it drops cookie messages as malformed (under a
// flood it is then no better off than before).
//
// # What it does not do
//
// It does not hide that two addresses talk, nor the responder's public key
// from whoever sends it an init (XX sends it encrypted, but to anyone); it
// does not stop an on-path attacker from dropping datagrams, which looks
// like a dead link; and keys are not rotated: a node whose private key
// leaks must be removed from every node's key list.
package secure
