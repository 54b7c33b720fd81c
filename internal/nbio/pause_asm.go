//go:build amd64 || arm64

package nbio

// Pause tells the CPU that the caller spins on memory another CPU writes
// (PAUSE on amd64, YIELD on arm64). A spin loop without it keeps the
// cache line it polls away from its writer, and on this class of machine a
// locked store to a polled line then costs a microsecond instead of a few
// hundred nanoseconds.
func Pause()
