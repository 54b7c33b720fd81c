//go:build !amd64 && !arm64

package ring

import "sync/atomic"

// storeRelease stores v in w; without an assembly release store it is
// w.Store, which orders at least as strongly.
func storeRelease(w *atomic.Uint32, v uint32) { w.Store(v) }
