// Package remote is GPU over the fabric: a CUDA driver library for hosts
// without a GPU, and the launcher that runs its calls on a node that has
// one. This package holds their tests; the code is C.
//
//	src/client.c     libdpucuda-remote.so: installed as libcuda.so.1 (build/remote/),
//	                 it forwards the driver API — device queries, contexts,
//	                 memory, copies both ways, modules and libraries, launches,
//	                 streams, events, synchronisation, cuGetProcAddress and the
//	                 CUDA runtime's export tables — to a launcher
//	src/launcher.c   dpu-cuda-launcher: attached to its node's host interface,
//	                 it serves client sessions on the real driver (memory,
//	                 transfer and advise services), one thread per slot
//	                 Asynchronous work (launches, async memsets and copies,
//	                 event records, stream waits, host functions) returns at
//	                 once and is sent in order, batched, by a sender thread;
//	                 its errors come back at the next synchronising call
//	src/mbox.c       fabric mailboxes: each side owns an inbox of fabric pages
//	                 on its node and STOREs messages and bulk data into the
//	                 peer's; bulk pages (CRC-32C each) move in 64-page chunks,
//	                 one bulk transfer each, striped over a pool of threads
//	wire.go          the staging page format on the Go side (held to wire.h)
//	test/copyprobe.c checked, timed copies both ways (bulk tests, bench-copy.sh)
//	test/pagefuzz.c  the staging page decoder against random and changed pages
//	src/wire.h       the messages
//	fake/fakegpu.c   a CPU stand-in for libcuda.so.1 (the tests' driver)
//	test/rprobe.c    a driver API program run locally and remotely
//	test/asyncprobe.c  the asynchronous semantics against the fake
//	test/fabbw.c     the fabric's raw rate for staging pages (no GPU)
//	test/dispatchfuzz.c  the launcher's request decoder against random requests
//	gpu-test.sh      the same on a machine with a GPU, with nvcc-built programs
//	                 and PyTorch, through a two-node fabric of real agents
package remote
