//go:build !(linux && cgo && rdma)

package rdma

import "github.com/aitherion/dpu/noc"

// Open fails in this build: RoCE ports need -tags rdma, cgo and
// libibverbs.
func Open(dev, local, remote string, o Options) (noc.Port, error) {
	return nil, ErrNotSupported
}
