// Package examples holds host programs written against libdpu, the C
// library of the host interface, and the test that runs them on live
// fabrics. The programs are C (src/counter_cas.c, src/counter_lock.c, built by this
// directory's Makefile through pkg-config and hostif/c/build/dpu.pc); the Go
// files are only that test: it starts dpu-fabric fabrics of real dpu-agent
// processes over UDP loopback, allocates a counter with dpuctl mem alloc,
// runs one example process on each of two different nodes and checks the
// final count with dpuctl mem read.
//
// The examples show the host API as a program uses it; they must never
// reach into the agent or the wire format, only dpu.h.
package examples
