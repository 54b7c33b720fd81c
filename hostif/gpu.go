package hostif

import (
	"context"
	"fmt"
	"syscall"

	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/hostif/wire"
)

// GPU accounting ops (wire.OpGPUFirst..wire.OpGPULast) are handed to
// Options.GPU, a hookwire.Handler (package cuda/ledger has the agent's);
// without one they are answered ENOSYS.

func (c *conn) gpuPeer() hookwire.Peer {
	return hookwire.Peer{Conn: c.id, PID: c.cred.PID, UID: c.cred.UID, GID: c.cred.GID}
}

// serveGPU passes a GPU op to the handler.
func (s *Server) serveGPU(ctx context.Context, c *conn, r *wire.Request, rep *reply) error {
	h := s.opts.GPU
	if h == nil {
		return fmt.Errorf("%s: GPU accounting is not served here: %w", r.Op, syscall.ENOSYS)
	}
	c.gpuUsed.Store(true)
	body, err := h.ServeGPU(ctx, c.gpuPeer(), hookwire.Op(r.Op), r.Data, rep.body)
	if err != nil {
		return fmt.Errorf("%s: %w", r.Op, err)
	}
	if len(body) > wire.MaxBody {
		return fmt.Errorf("%s: reply of %d bytes: %w", r.Op, len(body), syscall.EIO)
	}
	rep.body = body
	return nil
}
