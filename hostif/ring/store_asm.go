//go:build amd64 || arm64

package ring

import "sync/atomic"

// storeRelease stores v in w with release order only. w.Store is
// sequentially consistent, a locked instruction on amd64, which on a line
// the other side is polling costs several times a plain store.
//
//go:noescape
func storeRelease(w *atomic.Uint32, v uint32)
