// Package ring is the shared-memory transport of the host interface: a ring
// pair per dpu0.sock connection that asks for one (op RINGS), through which
// the host program submits requests and the agent returns their replies
// without a system call on either side while both are awake.
//
// # Shape
//
// One sealed memfd holds a control page and two single-producer,
// single-consumer rings of fixed-size slots: the submission ring (host →
// agent) and the completion ring (agent → host). Each slot carries one
// message exactly as it would travel on the socket (hostif/wire), with its
// length. Indices run freely over uint32 and wrap; a slot is index & mask.
// Each side keeps cached copies of both indices and touches the shared
// words only when its cache runs dry or when it publishes a batch, the
// shape of noc/port/xdp/ring.go. hostif/PROTOCOL.md §12 gives the layout
// byte by byte, the memory ordering and the wakeup protocol.
//
// Wakeups go through a bell: a SOCK_DGRAM socketpair whose one end the
// agent keeps and whose other end the host gets. The host rings it after a
// submission only when the agent raised NEED_WAKEUP (AF_XDP's need_wakeup);
// the agent rings it after publishing completions only when the host raised
// HOST_WAITING. A socketpair rather than eventfds: each side owns its own
// file description, so a hostile host can neither make the agent's end
// blocking (O_NONBLOCK lives in the shared description of an eventfd) nor
// fill a counter until the agent's write blocks.
//
// # Sides
//
// [Pair] is the agent's side: it creates the memfd (sealed against growing
// and shrinking, so the host can never make the agent's mapping fault), the
// bell, and hands the host's descriptors to the connection's reply.
// [Client] is the host's side (hostif/client uses it; hostif/c/src/ring.c
// is the same in C).
//
// # What it must never do
//
// The agent's side trusts nothing in shared memory: it copies every
// submission out before anyone parses it, checks each producer index it
// loads against its own consumer index (at most entries ahead) and each
// slot length against the slot, and keeps its own indices in private
// memory, never reading them back. A violation is [ErrCorrupt], sticky:
// the agent then closes that ring (and only that ring). Nothing here
// panics or reads outside the mapping whatever the host writes.
//
// The package holds no goroutines and takes no locks: each side is driven
// by one thread at a time (the agent's loop; the host's caller, which
// serialises submitters and reapers itself). Every use of package unsafe
// is in ring_unsafe.go.
package ring
