// Package nbio is the hot path's system calls that never block: reads and
// writes of non-blocking descriptors, MSG_DONTWAIT socket calls, an epoll
// look without a timeout, a timerfd re-arm.
//
// They are made as raw system calls (no entersyscall/exitsyscall around
// them). A call the Go runtime is told about marks its P as in a system
// call, and the first such call after the process was idle wakes the
// runtime's monitor thread, which then polls every 20 µs for the next
// millisecond: on a small machine, a thread switch or more per request for
// nothing. A call that cannot block gains nothing from that bookkeeping.
//
// Only calls that return at once belong here: a blocking call made raw
// would hold its P for as long as it blocks.
package nbio
