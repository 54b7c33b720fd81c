package hookwire

import "context"

// Op is a GPU accounting op of the host interface: its number in the
// message header of hostif/wire (the range OpGPUFirst..OpGPULast reserved
// there).
type Op uint16

// The GPU accounting ops.
const (
	OpMemLimit    Op = 64 // ask the memory limit and what is left
	OpMemUpdate   Op = 65 // report an allocation or release
	OpKernelQuota Op = 66 // ask a kernel-time quota before a launch
	OpMemProcs    Op = 67 // list the processes under the caller's memory limit
)

func (o Op) String() string {
	switch o {
	case OpMemLimit:
		return "gpu-mem-limit"
	case OpMemUpdate:
		return "gpu-mem-update"
	case OpKernelQuota:
		return "gpu-kernel-quota"
	case OpMemProcs:
		return "gpu-mem-procs"
	}
	return "gpu(" + itoa(uint16(o)) + ")"
}

func itoa(v uint16) string {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// Handler serves the GPU accounting ops of the CUDA hook. The host
// interface server hands it every op of the GPU range; the agent's is a
// ledger.Accountant. Without one the server answers those ops ENOSYS.
//
// Contract:
//
//   - ServeGPU is called concurrently, once per request, with the raw
//     request body (it aliases a buffer reused after the call returns). It
//     appends the reply body to reply and returns it, or returns an error:
//     a syscall.Errno (wrapped with %w is fine) reaches the host as that
//     errno, anything else as EIO. It returns once ctx is done.
//   - GPUClosed is called once for every connection that sent at least
//     one GPU op, after the connection ended and its last ServeGPU
//     returned. The server holds no lock while calling either.
type Handler interface {
	ServeGPU(ctx context.Context, peer Peer, op Op, body, reply []byte) ([]byte, error)
	GPUClosed(peer Peer)
}

// Peer identifies the connection a GPU op came on: the connection id (the
// HELLO reply's ConnID) and the peer's credentials (SO_PEERCRED).
type Peer struct {
	Conn uint64
	PID  int32
	UID  uint32
	GID  uint32
}
