#!/usr/bin/env bash
# gpu-test.sh — libdpucuda on a machine with an NVIDIA GPU (GPU 0).
#
# Builds the hook (make), a driver API program (gpu/gpuprobe.c: with the
# hook's own declarations, resolving every entry point through
# cuGetProcAddress_v2 as CUDA runtimes do; and, with the toolkit, against
# cuda.h linked to libcuda) and its kernel (gpu/spin.cu as PTX with nvcc,
# else the PTX embedded in gpuprobe), serves a dpu-agent-like host interface
# with GPU accounting (cmd/gpu-testd) and checks:
#   - the types and enums the hook declares match the toolkit's cuda.h;
#   - without the hook the program allocates past the limit;
#   - under the hook allocations stop at the limit, cuMemGetInfo and
#     cuDeviceTotalMem show the limit, and dpuctl gpu show reports the use;
#   - a quota set with dpuctl gpu set throttles a kernel loop;
#   - kill -9 releases the process's use;
#   - PyTorch, if importable: allocations stop at the limit (OutOfMemoryError),
#     mem_get_info shows the limit, a quota throttles matmuls.
# It prints PASS/FAIL lines and exits non-zero when a check failed.
#
# Environment: GPU_TESTD and DPUCTL (prebuilt binaries; default
# build/bin/*, else built with go), MEM_LIMIT (bytes, default 1 GiB), QUOTA
# (percent, default 25), CUDA_HOME (default /usr/local/cuda), OUT (where
# gpu-test.log goes; default the work directory).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d /tmp/gpu-test.XXXXXX)
LOGDIR=${OUT:-$WORK}
mkdir -p "$LOGDIR"
exec > >(tee "$LOGDIR/gpu-test.log") 2>&1

MEM_LIMIT=${MEM_LIMIT:-1073741824}
QUOTA=${QUOTA:-25}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CHUNK=67108864
RUN=$WORK/run
FAILS=0
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
}
trap cleanup EXIT

section() { echo; echo "== $* =="; }
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { # check WHAT COMMAND...
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
kv() { sed -n "s/^$2=//p" "$1" | tail -1; } # kv FILE KEY
le() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
eq() { [ -n "$1" ] && [ "$1" = "$2" ]; }
between() { le "$1" "$2" && le "$2" "$3"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "inf" }'; }
wait_for() { # wait_for SECONDS COMMAND...
    local until=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -ge "$until" ] && return 1
        sleep 0.1
    done
}
hooked() {
    env LD_PRELOAD="$HERE/build/libdpucuda.so" DPU_SOCKET="$RUN/dpu0.sock" DPU_CUDA_LOG=info \
        DPU_CUDA_REFRESH_MS=200 "$@"
}
dpuctl() { "$DPUCTL" -s "$RUN/ctl.sock" "$@"; }
# gpu_field PID FIELD: a field of the process's dpuctl gpu show -j entry.
gpu_field() {
    dpuctl -j gpu show | python3 -c '
import json, sys
pid, field = int(sys.argv[1]), sys.argv[2]
for p in json.load(sys.stdin) or []:
    if p["pid"] == pid:
        print(p[field])
' "$1" "$2"
}
gone() { [ -z "$(gpu_field "$1" pid)" ]; }
has_key() { grep -q "^$2=" "$1"; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,uuid --format=csv,noheader || fail "nvidia-smi"
command -v nvcc >/dev/null && nvcc --version | tail -2
echo "limit under test: $MEM_LIMIT bytes, quota $QUOTA%"

section "build"
if ! make -s -C "$HERE" >"$WORK/make.log" 2>&1; then
    cat "$WORK/make.log"
    fail "make (libdpucuda)"
    exit 1
fi
pass "make: libdpucuda.so"
gcc -O2 -std=c11 -Wall -o "$WORK/gpuprobe" "$HERE/gpu/gpuprobe.c" -ldl || fail "gcc gpuprobe"
PTXARG=()
LINKPROBE=
if [ -f "$CUDA_HOME/include/cuda.h" ]; then
    gcc -std=c11 -o "$WORK/abi-ours" "$HERE/gpu/abi.c" &&
        gcc -std=c11 -DREAL -I"$CUDA_HOME/include" -o "$WORK/abi-real" "$HERE/gpu/abi.c" &&
        "$WORK/abi-ours" >"$WORK/abi-ours.txt" && "$WORK/abi-real" >"$WORK/abi-real.txt"
    if diff "$WORK/abi-ours.txt" "$WORK/abi-real.txt"; then
        pass "cuda_abi.h matches $CUDA_HOME/include/cuda.h ($(wc -l <"$WORK/abi-ours.txt") sizes, offsets and enum values)"
    else
        fail "cuda_abi.h differs from cuda.h"
    fi
    if command -v nvcc >/dev/null; then
        nvcc -ptx -o "$WORK/spin.ptx" "$HERE/gpu/spin.cu" && PTXARG=(-ptx "$WORK/spin.ptx")
        nvcc -DREAL -o "$WORK/gpuprobe-link" "$HERE/gpu/gpuprobe.c" -L"$CUDA_HOME/lib64/stubs" -lcuda -ldl &&
            LINKPROBE="$WORK/gpuprobe-link"
    fi
    if [ -z "$LINKPROBE" ]; then
        gcc -O2 -std=c11 -DREAL -I"$CUDA_HOME/include" -o "$WORK/gpuprobe-link" "$HERE/gpu/gpuprobe.c" \
            -L"$CUDA_HOME/lib64/stubs" -lcuda -ldl && LINKPROBE="$WORK/gpuprobe-link"
    fi
fi
echo "kernel: ${PTXARG[*]:-embedded PTX}; linked probe: ${LINKPROBE:-none}"

GPU_TESTD=${GPU_TESTD:-$HERE/build/bin/gpu-testd}
DPUCTL=${DPUCTL:-$HERE/build/bin/dpuctl}
if [ ! -x "$GPU_TESTD" ] || [ ! -x "$DPUCTL" ]; then
    if command -v go >/dev/null; then
        (cd "$REPO" && go build -o "$WORK/gpu-testd" ./cuda/hook/cmd/gpu-testd &&
            go build -o "$WORK/dpuctl" ./cmd/dpuctl) || { fail "go build"; exit 1; }
        GPU_TESTD=$WORK/gpu-testd
        DPUCTL=$WORK/dpuctl
    else
        fail "no gpu-testd/dpuctl binaries and no go to build them"
        exit 1
    fi
fi

section "launch cost against the fake driver (make bench)"
make -s -C "$HERE" bench 2>&1 | grep -v "^make"

section "agent"
"$GPU_TESTD" -run-dir "$RUN" -mem "$MEM_LIMIT" 2>"$WORK/testd.log" &
PIDS+=($!)
wait_for 10 test -S "$RUN/dpu0.sock" -a -S "$RUN/ctl.sock" || { cat "$WORK/testd.log"; fail "gpu-testd"; exit 1; }
pass "gpu-testd serving $RUN (default limit $MEM_LIMIT bytes per process and device)"

section "without the hook (baseline)"
timeout 180 "$WORK/gpuprobe" -max $((4 * MEM_LIMIT)) -kernels 200 -kernel-us 1000 -launch-bench 20000 \
    "${PTXARG[@]}" >"$WORK/base.txt" 2>&1
cat "$WORK/base.txt"
check "without the hook it allocates 4x the limit" eq "$(kv "$WORK/base.txt" allocated)" "$((4 * MEM_LIMIT))"
BASE_WALL=$(kv "$WORK/base.txt" kernels_wall_ms)

section "under the hook: memory (cuGetProcAddress_v2 resolution), then a quota set with dpuctl"
hooked timeout 180 "$WORK/gpuprobe" -max $((4 * MEM_LIMIT)) -hold 4 -kernels 200 -kernel-us 1000 \
    "${PTXARG[@]}" >"$WORK/hooked.txt" 2>"$WORK/hooked.err" &
PIDS+=($!)
PROBE=$!
if wait_for 60 has_key "$WORK/hooked.txt" holding; then
    PID=$(kv "$WORK/hooked.txt" pid)
    echo "--- dpuctl gpu show (while holding)"
    dpuctl gpu show
    USED=$(gpu_field "$PID" memory_used)
    LIMIT=$(gpu_field "$PID" memory_limit)
    echo "--- dpuctl gpu set pid $PID mem $MEM_LIMIT quota $QUOTA"
    dpuctl gpu set pid "$PID" mem "$MEM_LIMIT" quota "$QUOTA" || fail "dpuctl gpu set"
    dpuctl gpu show
else
    fail "hooked probe never held its memory"
fi
wait "$PROBE"
cat "$WORK/hooked.txt"
echo "--- hook log"
head -20 "$WORK/hooked.err"
ALLOC=$(kv "$WORK/hooked.txt" allocated)
check "allocation refused with CUDA_ERROR_OUT_OF_MEMORY at the limit" eq "$(kv "$WORK/hooked.txt" refused_code)" 2
check "allocated ($ALLOC) <= limit and > limit - one chunk" between "$((MEM_LIMIT - CHUNK))" "$ALLOC" "$MEM_LIMIT"
check "cuDeviceTotalMem shows the limit" eq "$(kv "$WORK/hooked.txt" device_total)" "$MEM_LIMIT"
check "cuMemGetInfo total shows the limit" eq "$(kv "$WORK/hooked.txt" meminfo_start_total)" "$MEM_LIMIT"
check "cuMemGetInfo free while holding = limit - allocated" \
    eq "$(kv "$WORK/hooked.txt" meminfo_held_free)" "$((MEM_LIMIT - ALLOC))"
check "dpuctl gpu show: memory_used ($USED) = allocated" eq "${USED:-}" "$ALLOC"
check "dpuctl gpu show: memory_limit ($LIMIT) = limit" eq "${LIMIT:-}" "$MEM_LIMIT"
HOOK_WALL=$(kv "$WORK/hooked.txt" kernels_wall_ms)
echo "kernel loop: 200 x 1 ms: ${BASE_WALL} ms without the hook, ${HOOK_WALL} ms at ${QUOTA}% ($(ratio "$HOOK_WALL" "$BASE_WALL")x)"
check "quota $QUOTA% slows the kernel loop at least 2x" le "$(awk -v b="$BASE_WALL" 'BEGIN{print 2*b}')" "$HOOK_WALL"
check "usage released when the process exits" wait_for 5 gone "$PID"

if [ -n "$LINKPROBE" ]; then
    section "under the hook: linked program (cuda.h, libcuda), no quota: limit and launch cost"
    timeout 120 "$LINKPROBE" -max 0 -kernels 1 -launch-bench 20000 "${PTXARG[@]}" >"$WORK/link-base.txt" 2>&1
    hooked timeout 120 "$LINKPROBE" -max $((4 * MEM_LIMIT)) -kernels 1 -launch-bench 20000 "${PTXARG[@]}" \
        >"$WORK/link.txt" 2>"$WORK/link.err"
    cat "$WORK/link.txt"
    check "linked program: refused at the limit" eq "$(kv "$WORK/link.txt" refused_code)" 2
    check "linked program: allocated <= limit" le "$(kv "$WORK/link.txt" allocated)" "$MEM_LIMIT"
    echo "launch enqueue (empty kernel, 20000 launches): $(kv "$WORK/link-base.txt" launch_enqueue_ns) ns without the hook, $(kv "$WORK/link.txt" launch_enqueue_ns) ns with it (no quota)"
fi

section "kill -9 releases"
hooked "$WORK/gpuprobe" -max $((MEM_LIMIT / 2)) -hold 60 -kernels 1 "${PTXARG[@]}" >"$WORK/kill.txt" 2>&1 &
PIDS+=($!)
KPROBE=$!
if wait_for 60 has_key "$WORK/kill.txt" holding; then
    KPID=$(kv "$WORK/kill.txt" pid)
    dpuctl gpu show
    check "accounted before the kill" eq "$(gpu_field "$KPID" memory_used)" "$(kv "$WORK/kill.txt" allocated)"
    kill -9 "$KPID"
    check "released within 5 s of kill -9" wait_for 5 gone "$KPID"
    dpuctl gpu show
else
    fail "kill probe never held its memory"
fi
wait "$KPROBE" 2>/dev/null

section "PyTorch"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    timeout 300 python3 "$HERE/gpu/torch_alloc.py" --max $((2 * MEM_LIMIT)) --matmuls 200 >"$WORK/torch-base.txt" 2>&1
    cat "$WORK/torch-base.txt"
    check "PyTorch without the hook allocates 2x the limit" eq "$(kv "$WORK/torch-base.txt" allocated)" "$((2 * MEM_LIMIT))"
    hooked timeout 300 python3 "$HERE/gpu/torch_alloc.py" --max $((4 * MEM_LIMIT)) --hold 4 --matmuls 200 \
        >"$WORK/torch.txt" 2>"$WORK/torch.err" &
    PIDS+=($!)
    TPROBE=$!
    if wait_for 120 has_key "$WORK/torch.txt" holding; then
        TPID=$(kv "$WORK/torch.txt" pid)
        dpuctl gpu show
        TUSED=$(gpu_field "$TPID" memory_used)
        dpuctl gpu set pid "$TPID" mem "$MEM_LIMIT" quota "$QUOTA" || fail "dpuctl gpu set (torch)"
    else
        fail "PyTorch never held its memory"
    fi
    wait "$TPROBE"
    cat "$WORK/torch.txt"
    echo "--- hook log"
    grep -v "^$" "$WORK/torch.err" | head -20
    TALLOC=$(kv "$WORK/torch.txt" allocated)
    check "PyTorch: OutOfMemoryError at the limit (allocated $TALLOC)" \
        grep -q "^oom='CUDA out of memory" "$WORK/torch.txt"
    check "PyTorch: allocated <= limit" le "$TALLOC" "$MEM_LIMIT"
    check "PyTorch: mem_get_info total shows the limit" eq "$(kv "$WORK/torch.txt" mem_get_info_total)" "$MEM_LIMIT"
    check "PyTorch: dpuctl gpu show memory_used ($TUSED) >= tensors held" le "$TALLOC" "${TUSED:-0}"
    check "PyTorch: dpuctl gpu show memory_used <= limit" le "${TUSED:-1}" "$MEM_LIMIT"
    TB=$(kv "$WORK/torch-base.txt" matmul_wall_s)
    TH=$(kv "$WORK/torch.txt" matmul_wall_s)
    echo "200 matmuls 4096^2: ${TB} s without the hook, ${TH} s at ${QUOTA}% ($(ratio "$TH" "$TB")x)"
    check "PyTorch: quota $QUOTA% slows matmuls at least 1.5x" le "$(awk -v b="$TB" 'BEGIN{print 1.5*b}')" "$TH"
    check "PyTorch: usage released at exit" wait_for 5 gone "$TPID"
else
    echo "PyTorch with CUDA not available: skipped"
fi

section "agent log"
cat "$WORK/testd.log"

section "summary"
if [ "$FAILS" -eq 0 ]; then echo "all checks passed"; else echo "$FAILS check(s) failed"; fi
exit $((FAILS > 0))
