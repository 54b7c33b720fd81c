// Package dpurt holds libdpurt, the runtime that bin/dpu-cc links into
// programs compiled with ThreadSanitizer's instrumentation (rt/dpurt.c,
// built by this directory's Makefile into build/libdpurt.a, with the list of
// entry points it defines in build/dpurt.syms), and the test that builds a
// program with dpu-cc and runs it against live host interface servers.
// README.md lists the entry points both compilers need and what each does.
//
// The runtime must never be instrumented itself, never call into the TSan
// runtime, and never take more than one compare on an address outside the
// process's dpu_mmap range.
package dpurt
