#!/usr/bin/env bash
# Regenerates the XDP program's object and Go bindings (noc_bpfel.{o,go})
# from noc.c with bpf2go. The bindings are committed; the object is a build
# output (make bpf, which make build runs, calls this script).
#
# Needs: clang, llvm-strip, and the kernel/libbpf headers
# (Debian: apt-get install -y clang llvm libbpf-dev linux-libc-dev).
set -euo pipefail
cd "$(dirname "$0")"
arch_include="/usr/include/$(uname -m)-linux-gnu"
export BPF2GO_CFLAGS="-O2 -g -Wall -Werror -I${arch_include}"
export BPF2GO_CC="${BPF2GO_CC:-clang}"
export BPF2GO_STRIP="${BPF2GO_STRIP:-llvm-strip}"
go generate ./...
