// Package hookwire is the wire of the CUDA hook's GPU accounting ops on the
// host interface (ops 64..66 of hostif/wire: GPU_MEM_LIMIT, GPU_MEM_UPDATE,
// GPU_KERNEL_QUOTA): the byte layout of their bodies (wire.go; the C side
// is cuda/hook/src/gpu_wire.h), and Handler, what the host interface hands
// such a request to (the agent's is package cuda/ledger).
//
// It only encodes and decodes: it keeps no state and does no I/O. Every
// decoder of bytes from a host process has a fuzz test.
package hookwire
