// Package cuda is the home of dpu's GPU code; this package itself has no
// API. Nothing under it imports the agent: the agent, the host interface
// server and the control socket import it.
//
//	cuda/hook      libdpucuda.so, the CUDA driver API hook (C, LD_PRELOAD),
//	               its fake driver, test programs and GPU test script
//	cuda/hookwire  the hook's op bodies on the host interface, and the
//	               Handler the host interface server hands those ops to
//	cuda/ledger    the agent's accounting: per process and device memory,
//	               kernel time, limits and quota tokens (Accountant serves
//	               hookwire and gpuctl)
//	cuda/gpuctl    the control socket's GPU objects (dpuctl gpu show|set)
//	cuda/remote    GPU over the fabric: libdpucuda-remote (stands in for
//	               libcuda.so.1 on a host without a GPU) and dpu-cuda-launcher
//	               (runs its calls on a node's GPU), C, with their tests
package cuda
