package hostif

import (
	"context"
	"fmt"
	"syscall"

	"github.com/aitherion/dpu/hostif/wire"
)

// GPUHandler serves the GPU accounting ops of the CUDA hook
// (wire.OpGPUFirst..wire.OpGPULast); package gpu has the agent's. Set it
// in Options.GPU; without one the server answers those ops ENOSYS.
//
// Contract:
//
//   - ServeGPU is called concurrently, once per request, with the raw
//     request body (it aliases a buffer reused after the call returns). It
//     appends the reply body to reply (capacity wire.MaxBody) and returns
//     it, or returns an error: a syscall.Errno (wrapped with %w is fine)
//     reaches the host as that errno, anything else as EIO. It returns
//     once ctx is done.
//   - GPUClosed is called once for every connection that sent at least
//     one GPU op, after the connection ended and its last ServeGPU
//     returned. The server holds no lock while calling either.
type GPUHandler interface {
	ServeGPU(ctx context.Context, peer GPUPeer, op wire.Op, body, reply []byte) ([]byte, error)
	GPUClosed(peer GPUPeer)
}

// GPUPeer identifies the connection a GPU op came on: the connection id
// (the HELLO reply's ConnID) and the peer's credentials.
type GPUPeer struct {
	Conn uint64
	PID  int32
	UID  uint32
	GID  uint32
}

func (c *conn) gpuPeer() GPUPeer {
	return GPUPeer{Conn: c.id, PID: c.cred.PID, UID: c.cred.UID, GID: c.cred.GID}
}

// serveGPU passes a GPU op to the handler.
func (s *Server) serveGPU(ctx context.Context, c *conn, r *wire.Request, rep *reply) error {
	h := s.opts.GPU
	if h == nil {
		return fmt.Errorf("%s: GPU accounting is not served here: %w", r.Op, syscall.ENOSYS)
	}
	c.gpuUsed.Store(true)
	body, err := h.ServeGPU(ctx, c.gpuPeer(), r.Op, r.Data, rep.body)
	if err != nil {
		return fmt.Errorf("%s: %w", r.Op, err)
	}
	if len(body) > wire.MaxBody {
		return fmt.Errorf("%s: reply of %d bytes: %w", r.Op, len(body), syscall.EIO)
	}
	rep.body = body
	return nil
}
