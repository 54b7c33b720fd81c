# dpu — build, run, test.
GO      ?= go
BIN     := bin
RUN_DIR ?= $(CURDIR)/run
NODES   ?= 4
TOPO    ?= ring
PKGS    := ./...
GOTESTFLAGS ?=

.PHONY: all build bpf bpf-deps mutate clib rt verbs verbs-deps cuda-remote examples run stop test lint fmt vet bench bench-sim bench-peers generate generate-check clean completion man docs docs-check

all: build

build: clib rt verbs bpf
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	cp verbs/build/libdpuverbs.so $(BIN)/libdpuverbs.so

# The C library of the host interface (libdpu.so, libdpu.a, dpu.pc).
clib:
	$(MAKE) -s -C hostif/c

# GPU over the fabric: libdpucuda-remote (as libcuda.so.1) and dpu-cuda-launcher
# (cuda/remote/build/).
cuda-remote: clib
	$(MAKE) -s -C cuda/remote

# libdpurt, the runtime bin/dpu-cc links into instrumented programs (cc/).
rt: clib
	$(MAKE) -s -C cc

# libdpuverbs, the RC verbs device unmodified verbs programs preload
# (docs/verbs.md); needs rdma-core's headers (Debian: libibverbs-dev),
# installed first when they are missing.
verbs: clib
	@[ -f /usr/include/infiniband/verbs.h ] || $(MAKE) -s verbs-deps
	$(MAKE) -s -C verbs

# What the verbs device and its tests need from Debian (CI's .ci/run
# installs the same): the headers, ibverbs-utils' ibv_* programs and
# perftest. Waits for a concurrent apt rather than failing; sudo when not
# root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
verbs-deps:
	$(SUDO) apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends libibverbs-dev ibverbs-utils perftest

# The C examples (shared counters over atomic_cas_remote and dpu_lock; C11
# atomics built with bin/dpu-cc and with plain cc).
examples: build
	$(MAKE) -C examples

# Start a local fabric of $(NODES) agents over UDP loopback and show it working
# (a fabric already running there is stopped first, once the new one's
# NODES and TOPO are known to be buildable).
run: build
	$(BIN)/dpu-fabric up --replace --nodes $(NODES) --topo $(TOPO) --dir $(RUN_DIR)
	@echo
	@echo "== dpuctl route show (node 0) =="
	@$(BIN)/dpuctl -s $(RUN_DIR)/node0/ctl.sock route show
	@echo
	@echo "Try:"
	@echo "  $(BIN)/dpuctl -s $(RUN_DIR)/node0/ctl.sock link show"
	@echo "  $(BIN)/dpuctl -s $(RUN_DIR)/node1/ctl.sock -j route show"
	@echo "  $(BIN)/dpuctl -s $(RUN_DIR)/node2/ctl.sock neigh show"
	@echo "  $(BIN)/dpuctl -s $(RUN_DIR)/node0/ctl.sock stats"
	@echo "  G=\$$($(BIN)/dpuctl -d $(RUN_DIR)/node0/dpu0.sock mem alloc); $(BIN)/dpuctl -d $(RUN_DIR)/node2/dpu0.sock mem add \$$G 1"
	@echo "  $(BIN)/dpuctl topo plan --nodes 64 --ports 4"
	@echo "  $(BIN)/dpu-fabric down --dir $(RUN_DIR)"

stop:
	-$(BIN)/dpu-fabric down --dir $(RUN_DIR)

# The whole test suite (CI runs it with GOTESTFLAGS=-race). Every step runs
# whatever failed before it: one go test over every package, then the
# simulator's checkers against the planted bugs (compiled only with -tags
# dpubug); the exit status is non-zero when any step failed, and the last
# lines name the steps that did.
# (The steps run fmt and vet through $(SUBMAKE), not $(MAKE), so that make -n
# test prints the recipe instead of running it.)
SUBMAKE = $(firstword $(MAKE))
test: build
	@failed=""; \
	$(SUBMAKE) -s fmt || failed="$$failed fmt"; \
	$(SUBMAKE) -s vet || failed="$$failed vet"; \
	echo "== go test $(GOTESTFLAGS) $(PKGS)"; \
	$(GO) test $(GOTESTFLAGS) -count=1 -timeout 30m $(PKGS) || failed="$$failed go-test"; \
	echo "== go test -tags dpubug (the checkers against the planted bugs)"; \
	$(GO) test $(GOTESTFLAGS) -count=1 -tags dpubug -run 'Planted|ViolationsFail' ./sim/ ./cmd/dpu-sim/ ./agent/ || failed="$$failed go-test-dpubug"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: all steps passed"

lint: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# go vet prints nothing until it is done (a minute on a cold cache): say what
# it checks, then a line every 15 s while it runs.
vet: bpf
	@echo "== go vet: $$($(GO) list $(PKGS) | wc -l) packages"; \
	$(GO) vet $(PKGS) & vet=$$!; \
	( t=0; while sleep 15; do t=$$((t+15)); echo "   go vet: still running ($${t}s)"; done ) & tick=$$!; \
	wait $$vet; rc=$$?; kill $$tick 2>/dev/null; exit $$rc

bench: bpf
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# The simulator's scaling table (docs/simulator.md, "Scale"): one seeded
# world per node count on the planner's wiring of degree 4 and on a 2-D
# torus, abstract links, a row each (routing convergence, LSDB and path
# cache bytes per node, frames and latency per request, hops against the
# Moore bound, wall and CPU seconds). SCALE_NODES picks the node counts;
# the default took about 2 minutes of CPU (4 Dec 2026), most of it the planner's and
# the 1,024-node rows'.
SCALE_NODES ?= 16,64,256,1024
bench-sim:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/dpu-sim ./cmd/dpu-sim
	$(BIN)/dpu-sim --scale-table $(SCALE_NODES)

# dpu compare-and-swap beside a SEQPACKET echo, Redis and memcached, one
# table from one run (bench/README.md; BENCH_QUICK=1 for a short run).
bench-peers: build
	BENCH_QUICK=$(BENCH_QUICK) bench/peers/run.sh

# The XDP program's object (noc/port/xdp/bpf/noc_bpfel.o, embedded in the
# agent): a build output, compiled from noc.c by bpf2go when it is missing
# or older than its source. Needs clang, llvm-strip and the libbpf headers,
# installed first when they are missing.
BPF_OBJ := noc/port/xdp/bpf/noc_bpfel.o
bpf: $(BPF_OBJ)
$(BPF_OBJ): noc/port/xdp/bpf/noc.c noc/port/xdp/bpf/gen.go
	@{ command -v clang && command -v llvm-strip && [ -f /usr/include/bpf/bpf_helpers.h ]; } >/dev/null || $(MAKE) -s bpf-deps
	noc/port/xdp/bpf/generate.sh

# What the XDP program's build needs from Debian (CI's .ci/run installs the
# same). Waits for a concurrent apt rather than failing.
bpf-deps:
	$(SUDO) apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends clang llvm libbpf-dev linux-libc-dev

# Rebuild the XDP program's object and its Go bindings with bpf2go (the
# bindings, noc_bpfel.go, are committed; the object is not).
generate:
	noc/port/xdp/bpf/generate.sh

# Fail when the committed bpf2go outputs differ from what the sources give.
generate-check: generate
	@if [ -n "$$(git status --porcelain -- noc/port/xdp/bpf)" ]; then \
		echo "noc/port/xdp/bpf: committed bpf2go bindings are stale; run make generate and commit:"; \
		git status --short -- noc/port/xdp/bpf; git diff --stat -- noc/port/xdp/bpf; exit 1; fi

# dpuctl's shell completion and man page, generated from its own help text.
completion: build
	$(BIN)/dpuctl completion bash > $(BIN)/dpuctl.bash
	$(BIN)/dpuctl completion zsh > $(BIN)/_dpuctl

man: build
	$(BIN)/dpuctl man > $(BIN)/dpuctl.1

# The diagrams of docs/: SVG drawn from their graphviz sources (dot, from
# Debian's graphviz); the SVGs are committed, docs-check fails when stale.
DIAGRAMS := $(patsubst %.dot,%.svg,$(wildcard docs/diagrams/*.dot))

docs: $(DIAGRAMS)

docs/diagrams/%.svg: docs/diagrams/%.dot
	dot -Tsvg $< -o $@

docs-check:
	@for f in docs/diagrams/*.dot; do \
		dot -Tsvg $$f | cmp -s - $${f%.dot}.svg || { echo "$${f%.dot}.svg is stale: run make docs and commit"; exit 1; }; \
	done

clean:
	rm -rf $(BIN) $(BPF_OBJ)
	$(MAKE) -s -C hostif/c clean
	$(MAKE) -s -C examples clean
	$(MAKE) -s -C cc clean
	$(MAKE) -s -C verbs clean

include images/image.mk

# Mutation testing of the core packages (tools/mutate, docs/mutation.md):
# MUTATE_N sampled mutants per package plus the listed known bugs, each
# against the package's tests (-short) and, for survivors, a short dpu-sim
# sweep. Not part of make test.
MUTATE_N    ?= 12
MUTATE_SEED ?= 1
MUTATE_ARGS ?=
mutate: bpf
	@mkdir -p $(BIN)
	$(GO) run ./tools/mutate -n $(MUTATE_N) -seed $(MUTATE_SEED) -o $(BIN)/mutation.md $(MUTATE_ARGS)
