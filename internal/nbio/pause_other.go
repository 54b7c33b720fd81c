//go:build !amd64 && !arm64

package nbio

// Pause does nothing where the CPU has no spin hint.
func Pause() {}
