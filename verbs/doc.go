// Package verbs holds the tests of libdpuverbs, the RC verbs device of the
// dpu fabric (C, in src/; built by this directory's Makefile and by the
// repository's make build into bin/libdpuverbs.so).
//
// Unmodified verbs programs load the device in place of rdma-core's
// libibverbs:
//
//	LD_PRELOAD=bin/libdpuverbs.so DPU_SOCKET=RUN_DIR/dpu0.sock PROGRAM
//
// Protection domains, memory regions, completion queues and RC queue pairs
// become fabric objects: a region that allows remote READ or ATOMIC access
// has an image in fabric pages that peers LOAD, CAS and FETCH_ADD; SENDs and
// WRITE notices are STOREs into the receiving QP's mailbox, fabric pages the
// receiver owns and its progress thread drains. A port's GID is the GVA of
// the context's directory, which names its queue pairs and regions. The
// design, what is supported and what is not: docs/verbs.md.
//
// The tests run programs nobody here wrote (every ibv_* program of Debian's
// ibverbs-utils, and perftest's ib_write_lat, ib_read_lat, ib_atomic_lat, ib_send_lat,
// ib_write_bw, ib_read_bw, ib_send_bw)
// between processes attached to the two nodes of a fabric, and
// test/verbs_check.c, a plain verbs program that checks the answers to bad
// input, and test/verbs_data.c, which checks every byte of a 4 MiB WRITE,
// SEND and READ between the nodes. The decoders of what peers write in fabric pages (src/wire.c) are
// reached from Go through cgo (wire.go) for their fuzz tests. Without the programs or the rdma-core headers they skip, unless
// DPU_PRIV_TESTS=require (CI), which makes that a failure.
package verbs
