// Package arbiter is the ownership arbiter of one DPU (the ownership
// protocol of package coherence, "Ownership protocol"): it puts in one
// order the requests for the pages this node's host owns — acquires
// (ownership transfer), write-throughs and atomics — raises and bounds
// pins (the owner's "lock registers"), and reports host faults. It also
// provides the "hardware timers": Wheel, a hierarchical timing wheel that
// the coherence engine uses too (swaps, retransmissions, request
// deadlines).
//
// # Ordering
//
// A request's arrival tick is Arrival / Config.TickLen (Arrival is the now of
// Submit). Requests are decided when their tick closes, ticks in order:
// arrival order across ticks beats everything. Only requests of the same
// tick are ordered among themselves, by this total order:
//
//  1. higher Priority first;
//  2. more Losses first (anti-starvation: the requester that lost most);
//  3. earlier WaitStart first (the requester that has waited longest);
//  4. lower Port id first (noc.LocalPort, the own host, is a high id);
//  5. lower Node id first;
//  6. lower request ID first, then submission order.
//
// Requests are then decided one by one in that order against the page's
// state, so the order is also the order the owner executes writes and
// atomics in, and the order in which acquires win.
//
// An uncontended write or atomic does not wait for its tick: when its page
// is owned here, not swapping, and no request of the page waits for a tick,
// Submit grants it at once. Nothing can be ordered before it (nothing of
// its page has arrived), and granting a write or an atomic denies no one;
// a request of the same tick that arrives after it is simply decided after
// it. This is the owner's fast path: a compare-and-swap on an idle page
// costs no tick.
//
// # Answers and bounds
//
// Every request gets its first answer when its arrival tick closes (or at
// once, on the fast path), at most one TickLen after it arrived
// (AnswerBound): Grant, Deny (with a Reason,
// meaning "retry"), Exception (with a Reason), or Queued. A Queued request
// gets exactly one final answer no later than Answer.Deadline, which is
// at most Config.MaxWait (rounded up to the timer granularity) after it was
// queued (FinalBound). No request waits unboundedly. If more than
// Config.MaxPending requests wait for their tick, Submit denies at once
// (ReasonBusy).
//
// Decisions against the page state:
//
//   - not owned here: deny, ReasonNotOwner (the engine answers
//     ReasonNoSuchPage itself for pages it does not know at all);
//   - an unknown Kind: exception, ReasonBadRequest;
//   - acquire of an idle, unpinned page: grant. The page becomes swapping
//     until the engine calls SwapDone (ownership moved: the arbiter forgets
//     the page and denies its queue with ReasonMoved, so those requests
//     retry toward the new owner along the flipped path) or SwapAbort (the
//     page is idle again and its queue is served in order). An acquire from
//     the own host (Port noc.LocalPort) is granted without a swap;
//   - write or atomic: granted unless the page is swapping; a pin does not
//     stop them (a lock excludes other acquirers, the owner still executes
//     writes in order);
//   - anything the page's state blocks (acquire of a pinned page, anything
//     while swapping), or an acquire while older acquires wait: queued in
//     decision order, if the page's queue (Config.QueueLen) has room;
//     otherwise denied at once, ReasonPinned or ReasonSwapping;
//   - a queued request whose deadline passes: deny, ReasonTimeout.
//
// When a page becomes less busy (Unpin, SwapAbort) its queue is served in
// order: each waiter the page no longer blocks is granted (a granted
// acquire makes the page swapping again, so later acquires keep waiting).
//
// The requester keeps Losses and WaitStart itself: it counts every deny and
// timeout for the page and keeps the time of its first attempt.
//
// # Pins and host faults
//
// The owner's host raises a pin with Pin (holder, bound ≤ Config.MaxPin) and
// lowers it with Unpin. A lock is acquire + pin; unlock is unpin. The pin's
// bound is a timer on the wheel. If it fires, the host did not release in
// time: Advance returns a FaultReport (page, holder, when pinned, how long
// held, the bound, the action) and applies the recovery policy:
//
//   - the pin is revoked (Unpin by the holder then fails with ErrNotPinned);
//   - every queued request is answered with an exception, ReasonHostFault,
//     not granted: the holder may have left the page mid-update, so the
//     waiters must decide (like a robust mutex's EOWNERDEAD) before they
//     retry; new requests are decided normally from then on.
//
// The agent forwards the report to its host and to the monitor group.
//
// # Results and time
//
// Methods that decide (Advance, Unpin, SwapDone, SwapAbort, Disown) return
// slices owned by the arbiter, valid until the next call; copy what must
// outlive it. Time is the now passed to every call (a now earlier than one
// already seen counts as the latest); NextDeadline says when Advance must
// next be called. The arbiter must never read a clock, start a goroutine,
// block, use randomness or call back into its caller.
package arbiter
