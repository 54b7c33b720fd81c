// Package libdpu builds and tests the C library of the host interface:
// include/dpu.h, build/libdpu.so, build/libdpu.a and build/dpu.pc, made by
// this directory's Makefile from src/dpu.c and src/ring.c (the host side of
// the shared-memory ring pair; plain C11 atomics and POSIX threads, no Go
// runtime). The Go files here are only the tests: they build the library
// with make, start host interface servers on a fabric of node cores and run the
// C test program (test/dpu_test.c) against them, plain, linked against the
// shared library and under AddressSanitizer, and the C benchmark; and they
// run test/ring_test.c against hostif/ring/ringtest's stand-in agent, over
// the ring pair and over the socket.
//
// The library must never depend on anything but libc and pthreads, nor
// export a symbol outside the dpu_ prefix and atomic_cas_remote.
package libdpu
