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
#   - the context's own memory is charged (measured through NVML);
#   - NVML (memory v1/v2, running processes, count) agrees with
#     cuMemGetInfo and dpuctl gpu show under a limit; nvidia-smi under the
#     hook; for 63 x (1 MiB+1), 16384 x 1 B and 65536 x 4000 B allocations
#     the device's real growth (nvidia-smi, unhooked) equals the charge, and
#     the charge stays within the limit plus one 2 MiB granule;
#   - a cgroup's limit is shared by two processes; a cgroup quota throttles
#     cuGraphLaunch; cgroup limits survive an agent restart;
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
# smi_used: the device's memory in use, bytes, as nvidia-smi (not hooked) sees it.
smi_used() { echo $(($(env -u LD_PRELOAD nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits) * 1048576)); }
# probe_start NAME COMMAND...: a cudaprobe reading commands from a fifo; ask NAME CMD sends one.
probe_start() {
    local name=$1
    shift
    mkfifo "$WORK/$name.in"
    : >"$WORK/$name.out"
    "$@" <"$WORK/$name.in" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    eval "exec {FD_$name}>\"$WORK/$name.in\""
}
lines() { wc -l <"$1"; }
more_lines() { [ "$(lines "$1")" -gt "$2" ]; }
accounted() { [ -n "$(gpu_field "$1" memory_used)" ]; }
limit_is() { [ "$(gpu_field "$1" memory_limit)" = "$2" ]; }
ask() { # ask NAME COMMAND...: prints the answer line
    local name=$1 fdvar=FD_$1
    shift
    local n
    n=$(lines "$WORK/$name.out")
    echo "$*" >&"${!fdvar}"
    wait_for 120 more_lines "$WORK/$name.out" "$n" || { echo "no-answer"; return 1; }
    sed -n "$((n + 1))p" "$WORK/$name.out"
}
field() { echo "$1" | awk -v i="$2" '{print $(i + 1)}'; } # field "ok a b" 1 -> a
GRANULE=2097152

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
TESTD_PID=$!
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
CTX=$(sed -n 's/.*device 0: a context took \([0-9]*\) bytes.*/\1/p' "$WORK/hooked.err" | head -1)
echo "context memory charged (measured through NVML): ${CTX:-none} bytes"
check "the primary context's own memory is charged (${CTX:-0} bytes)" le 1 "${CTX:-0}"
CTX=${CTX:-0}
check "allocation refused with CUDA_ERROR_OUT_OF_MEMORY at the limit" eq "$(kv "$WORK/hooked.txt" refused_code)" 2
check "allocated ($ALLOC) + context <= limit and > limit - context - one chunk" \
    between "$((MEM_LIMIT - CTX - CHUNK))" "$ALLOC" "$((MEM_LIMIT - CTX))"
check "cuDeviceTotalMem shows the limit" eq "$(kv "$WORK/hooked.txt" device_total)" "$MEM_LIMIT"
check "cuMemGetInfo total shows the limit" eq "$(kv "$WORK/hooked.txt" meminfo_start_total)" "$MEM_LIMIT"
check "cuMemGetInfo free while holding = limit - allocated - context" \
    eq "$(kv "$WORK/hooked.txt" meminfo_held_free)" "$((MEM_LIMIT - ALLOC - CTX))"
check "dpuctl gpu show: memory_used ($USED) = allocated + context" eq "${USED:-}" "$((ALLOC + CTX))"
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

section "NVML under a limit, and what the driver really takes (cudaprobe, real driver)"
B0=$(smi_used)
probe_start np hooked "$HERE/build/cudaprobe" -m proc
echo "init: $(ask np init 0)"
grep -v "^$" "$WORK/np.err" | head -5
NPID=$(field "$(ask np pid)" 1)
wait_for 5 accounted "$NPID"
NCTX=$(gpu_field "$NPID" memory_used)
S1=$(smi_used)
echo "context: charged ${NCTX} bytes; the device's use grew $((S1 - B0)) bytes (nvidia-smi, MiB resolution)"
check "context charge (${NCTX}) within 8 MiB of the device's growth ($((S1 - B0)))" \
    between "$((S1 - B0 - 8388608))" "${NCTX:-0}" "$((S1 - B0 + 8388608))"
L2=$((NCTX + 64 * 1048576))
dpuctl gpu set pid "$NPID" mem "$L2" >/dev/null || fail "dpuctl gpu set pid (nvml probe)"
wait_for 5 limit_is "$NPID" "$L2"
ask np "alloc 3145728" >/dev/null
ask np "alloc 100" >/dev/null
USEDN=$(gpu_field "$NPID" memory_used)
NV=$(ask np nvml-mem 0)
NV2=$(ask np nvml-mem2 0)
MI=$(ask np meminfo)
PR=$(ask np nvml-procs 0)
PR1=$(ask np nvml-procs1 0)
echo "dpuctl memory_used=$USEDN limit=$L2; nvml-mem: $NV; nvml-mem2: $NV2; cuMemGetInfo: $MI; procs v3: $PR; v1: $PR1"
echo "nvml-count: $(ask np nvml-count); nvml-util 0: $(ask np nvml-util 0)"
check "charge of 3 MiB + 100 B = context + 4 MiB + one 2 MiB chunk" eq "$USEDN" "$((NCTX + 6 * 1048576))"
check "NVML total = limit" eq "$(field "$NV" 1)" "$L2"
check "NVML used = dpuctl gpu show memory_used" eq "$(field "$NV" 3)" "$USEDN"
check "NVML free = cuMemGetInfo free" eq "$(field "$NV" 2)" "$(field "$MI" 1)"
check "cuMemGetInfo total = NVML total" eq "$(field "$MI" 2)" "$L2"
check "NVML v2 agrees (total, used, free)" eq "$(field "$NV2" 1) $(field "$NV2" 3) $(field "$NV2" 4)" \
    "$L2 $(field "$NV" 2) $USEDN"
check "NVML running processes v3 = this process with its charge" eq "$PR" "ok 1 $NPID:$USEDN"
check "NVML running processes v1 = this process with its charge" eq "$PR1" "ok 1 $NPID:$USEDN"
echo "--- nvidia-smi under the hook (while this probe holds its charge)"
hooked nvidia-smi -i 0 --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits 2>/dev/null |
    tee "$WORK/smi-hooked.txt"
check "nvidia-smi under the hook: total = the default limit ($MEM_LIMIT)" \
    eq "$(cut -d, -f1 "$WORK/smi-hooked.txt" | tr -d ' ')" "$((MEM_LIMIT / 1048576))"
hooked nvidia-smi -i 0 2>&1 | sed -n '8,12p'
S1=$(smi_used)
echo "uncharged: the device's use beyond the charge before the patterns: $((S1 - B0 - USEDN)) bytes (driver memory taken after the context was measured)"
for pat in "63 1048577" "16384 1" "65536 4000"; do
    R=$(ask np many $pat)
    S=$(smi_used)
    U=$(gpu_field "$NPID" memory_used)
    echo "many $pat: $R; charged $((U - USEDN)) bytes more (dpuctl), the device's use grew $((S - S1)) bytes (nvidia-smi); process total on the device $((S - B0)), limit $L2"
    check "many $pat: what the device took ($((S - S1))) = what was charged ($((U - USEDN)))" eq "$((S - S1))" "$((U - USEDN))"
    check "many $pat: the charge ($U) <= limit + one granule" le "$U" "$((L2 + GRANULE))"
    ask np freemany >/dev/null
done
ask np exit >/dev/null

section "a cgroup's limit shared by two processes; a cgroup quota on graph launches; limits across an agent restart"
CG=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
[ -n "$CG" ] || CG=$(head -1 /proc/self/cgroup | cut -d: -f3)
LG=$((2 * NCTX + 1024 * 1048576))
dpuctl gpu set cgroup "$CG" mem "$LG" || fail "dpuctl gpu set cgroup"
dpuctl gpu limits
probe_start c1 hooked "$HERE/build/cudaprobe"
probe_start c2 hooked "$HERE/build/cudaprobe" -m dlsym
ask c1 init 0 >/dev/null
ask c2 init 0 >/dev/null
C1=$(field "$(ask c1 pid)" 1)
C2=$(field "$(ask c2 pid)" 1)
A1=$(ask c1 "alloc $((600 * 1048576))")
A2=$(ask c2 "alloc $((600 * 1048576))")
A3=$(ask c2 "alloc $((300 * 1048576))")
dpuctl gpu show
check "c1 allocates 600 MiB under the shared $LG-byte limit" eq "$(field "$A1" 0)" ok
check "c2 is refused 600 MiB more (2 contexts + 1.2 GiB > limit)" eq "$A2" "err 2"
check "c2 gets 300 MiB" eq "$(field "$A3" 0)" ok
SUM=$(($(gpu_field "$C1" memory_used) + $(gpu_field "$C2" memory_used)))
MI2=$(ask c2 meminfo)
NV1=$(ask c1 nvml-mem 0)
echo "c2 cuMemGetInfo: $MI2; c1 NVML: $NV1; dpuctl sum $SUM"
check "c2 cuMemGetInfo free = shared limit - both processes' use" eq "$(field "$MI2" 1)" "$((LG - SUM))"
check "c1 NVML used = both processes' use" eq "$(field "$NV1" 3)" "$SUM"
ask c1 exit >/dev/null
ask c2 exit >/dev/null
dpuctl gpu set cgroup "$CG" mem 0 quota "$QUOTA" || fail "dpuctl gpu set cgroup quota"
timeout 120 "$WORK/gpuprobe" -max 0 -kernels 200 -kernel-us 1000 -graph 10 "${PTXARG[@]}" >"$WORK/graph-base.txt" 2>&1
hooked timeout 120 "$WORK/gpuprobe" -max 0 -kernels 200 -kernel-us 1000 -graph 10 "${PTXARG[@]}" \
    >"$WORK/graph.txt" 2>"$WORK/graph.err"
GB=$(kv "$WORK/graph-base.txt" kernels_wall_ms)
GH=$(kv "$WORK/graph.txt" kernels_wall_ms)
[ -n "$GH" ] || { tail -5 "$WORK/graph.txt" "$WORK/graph.err"; }
echo "20 graph launches of 10 x 1 ms kernels: ${GB} ms without the hook, ${GH} ms at a cgroup quota of ${QUOTA}% ($(ratio "$GH" "$GB")x)"
check "cgroup quota $QUOTA% slows cuGraphLaunch at least 2x" le "$(awk -v b="$GB" 'BEGIN{print 2*b}')" "$GH"
dpuctl gpu set cgroup "$CG" mem "$LG" quota "$QUOTA" >/dev/null
kill "$TESTD_PID"
wait "$TESTD_PID" 2>/dev/null
"$GPU_TESTD" -run-dir "$RUN" -mem "$MEM_LIMIT" 2>>"$WORK/testd.log" &
PIDS+=($!)
TESTD_PID=$!
wait_for 10 test -S "$RUN/ctl.sock" || fail "gpu-testd restart"
sleep 0.5
echo "--- dpuctl gpu limits after the restart"
dpuctl gpu limits | tee "$WORK/limits-after.txt"
check "the cgroup's limit survived the agent restart" grep -q "cgroup $CG" "$WORK/limits-after.txt"
dpuctl gpu set cgroup "$CG" mem 0 quota 0 || fail "dpuctl gpu set cgroup (remove)"
check "a zero limit removes the cgroup's" sh -c "! \"$DPUCTL\" -s \"$RUN/ctl.sock\" gpu limits | grep -q \"cgroup $CG\""

section "kill -9 releases"
hooked "$WORK/gpuprobe" -max $((MEM_LIMIT / 2)) -hold 60 -kernels 1 "${PTXARG[@]}" >"$WORK/kill.txt" 2>&1 &
PIDS+=($!)
KPROBE=$!
if wait_for 60 has_key "$WORK/kill.txt" holding; then
    KPID=$(kv "$WORK/kill.txt" pid)
    dpuctl gpu show
    check "accounted before the kill (allocated + context)" le "$(kv "$WORK/kill.txt" allocated)" "$(gpu_field "$KPID" memory_used)"
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
    check "PyTorch: dpuctl gpu show memory_used <= limit + one granule" le "${TUSED:-1}" "$((MEM_LIMIT + GRANULE))"
    TNV=$(sed -n "s/.*this process has \([0-9.]*\) MiB memory in use.*/\1/p" "$WORK/torch.txt")
    check "PyTorch's OOM report (NVML, per process: ${TNV:-none} MiB) = dpuctl gpu show memory_used" \
        eq "${TNV:-}" "$(awk -v b="${TUSED:-0}" 'BEGIN { printf "%.2f", b / 1048576 }')"
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
