// Package hook holds libdpucuda, the CUDA driver API hook, and its
// tests; the package itself has no Go API. See README.md for use.
//
// libdpucuda.so (C11, loaded with LD_PRELOAD) gets between a program and
// the CUDA driver however the program reaches it — linked symbols, dlsym,
// cuGetProcAddress(_v2) — and asks the node's dpu-agent over dpu0.sock
// (libdpu, hostif/c) for the process's memory limit and kernel-time quota
// on each device: allocations past the limit fail with
// CUDA_ERROR_OUT_OF_MEMORY, cuMemGetInfo, cuDeviceTotalMem and NVML show the
// limit, every allocation and free is reported as what the driver takes
// (its chunks, and each context's own memory), and kernel and graph
// launches under a quota wait for tokens. The agent's side is package cuda/ledger.
//
// # Layout
//
//	src/cuda_abi.h the driver API types the hook needs (no CUDA headers here)
//	src/hook.c …   the hook (src/hook.h lists the files and what each owns)
//	src/gpu_wire.h the GPU op bodies (cuda/hookwire/wire.go is the layout)
//	src/nvml.c     NVML as the limits make it
//	fake/          a fake libcuda.so.1 over host memory, and a fake
//	               libnvidia-ml.so.1 beside it, for machines without a GPU
//	test/          cudaprobe (a scripted driver API client) and launchbench
//	gpu/           programs for gpu-test.sh on a machine with a GPU
//	cmd/gpu-testd  a host interface with GPU accounting and nothing else
//
// The Go tests build everything with the Makefile, serve a real hostif
// server with a ledger.Accountant on a temporary socket and run cudaprobe
// under the hook against the fake driver.
//
// # What it must never do
//
// The hook must never stop a program because the agent is away: it works on
// the last limits it heard, counts locally and re-reports on reconnect. It
// must never call itself as the driver (real functions come from the driver
// library's own handle), never export anything but the entry points it
// interposes, and never add more than a load and a branch to a launch when
// no quota is set.
package hook
