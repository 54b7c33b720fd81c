#!/usr/bin/env bash
# gpu-usage-test.sh — true usage and nvidia-smi under libdpucuda on a machine
# with an NVIDIA GPU (GPU 0). Skips (exit 0) without one.
#
#   - what nvidia-smi reads through NVML (its imported nvml* names);
#   - the NVML types the hook declares against the toolkit's nvml.h;
#   - PyTorch (gpu/torch_true_usage.py) under a 2 GiB cgroup limit with
#     cuBLAS and cuDNN loaded, filling the limit: the driver's per-process
#     figure (nvidia-smi --query-compute-apps, not hooked) against the limit
#     (+1% allowed) and against dpuctl gpu show;
#   - nvidia-smi under the hook in the same cgroup: total = the limit, used
#     = the process table's sum = dpuctl gpu show; free = total - used;
#   - with a per-process limit on the PyTorch process instead (nvidia-smi
#     has none of its own: NVML's view), its row = dpuctl gpu show.
#
# Environment: GPU_TESTD and DPUCTL (prebuilt binaries, default
# build/bin/*), LIMIT (bytes, default 2 GiB), OUT (where the log goes).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/gpu-usage.XXXXXX)
LOGDIR=${OUT:-$WORK}
mkdir -p "$LOGDIR"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP no NVIDIA GPU"
    exit 0
fi
exec > >(tee "$LOGDIR/gpu-usage-test.log") 2>&1
LIMIT=${LIMIT:-2147483648}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
RUN=$WORK/run
FAILS=0
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
section() { echo; echo "== $* =="; }
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
le() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
eq() { [ -n "$1" ] && [ "$1" = "$2" ]; }
near() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }
kv() { sed -n "s/^$2=//p" "$1" | tail -1; }
wait_for() { local until=$((SECONDS + $1)); shift; until "$@"; do [ "$SECONDS" -ge "$until" ] && return 1; sleep 0.1; done; }
hooked() { env LD_PRELOAD="$HERE/build/libdpucuda.so" DPU_SOCKET="$RUN/dpu0.sock" DPU_CUDA_LOG=info DPU_CUDA_REFRESH_MS=200 "$@"; }
dpuctl() { "$DPUCTL" -s "$RUN/ctl.sock" "$@"; }
gpu_field() {
    dpuctl -j gpu show | python3 -c '
import json, sys
pid, field = int(sys.argv[1]), sys.argv[2]
for p in json.load(sys.stdin) or []:
    if p["pid"] == pid and p.get("device", 0) in (0, "0"):
        print(p[field])
' "$1" "$2"
}
# drv_mib PID: the driver's per-process figure, MiB (nvidia-smi, not hooked).
drv_mib() { env -u LD_PRELOAD nvidia-smi -i 0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', *' -v p="$1" '$1 == p { print $2 }'; }
MIB=1048576

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "nvml names nvidia-smi imports (memory and processes):"
strings "$(command -v nvidia-smi)" | grep -o '^nvml[A-Za-z0-9_]*\(Process\|Memory\)[A-Za-z0-9_]*' | sort -u | tr '\n' ' '
echo

section "build"
make -s -C "$HERE" >"$WORK/make.log" 2>&1 || { cat "$WORK/make.log"; fail "make"; exit 1; }
pass "make: libdpucuda.so"
if [ -f "$CUDA_HOME/include/nvml.h" ]; then
    cat >"$WORK/nvmlabi.c" <<'C'
#include <stddef.h>
#include <stdio.h>
#include <nvml.h>
int main(void) {
    printf("detail %zu %zu %zu %zu list %zu %zu %zu %zu info %zu v1 %zu\n",
           sizeof(nvmlProcessDetail_v1_t), offsetof(nvmlProcessDetail_v1_t, usedGpuMemory),
           offsetof(nvmlProcessDetail_v1_t, computeInstanceId), offsetof(nvmlProcessDetail_v1_t, usedGpuCcProtectedMemory),
           sizeof(nvmlProcessDetailList_v1_t), offsetof(nvmlProcessDetailList_v1_t, mode),
           offsetof(nvmlProcessDetailList_v1_t, numProcArrayEntries), offsetof(nvmlProcessDetailList_v1_t, procArray),
           sizeof(nvmlProcessInfo_t), sizeof(nvmlProcessInfo_v1_t));
    return 0;
}
C
    if gcc -I"$CUDA_HOME/include" -o "$WORK/nvmlabi" "$WORK/nvmlabi.c" 2>"$WORK/nvmlabi.err"; then
        GOT=$("$WORK/nvmlabi")
        echo "nvml.h: $GOT"
        check "nvml.h's process types are the hook's" eq "$GOT" "detail 32 8 20 24 list 24 4 8 16 info 24 v1 16"
    else
        cat "$WORK/nvmlabi.err"; echo "nvml.h does not declare the detail list: not checked"
    fi
fi

GPU_TESTD=${GPU_TESTD:-$HERE/build/bin/gpu-testd}
DPUCTL=${DPUCTL:-$HERE/build/bin/dpuctl}
"$GPU_TESTD" -run-dir "$RUN" 2>"$WORK/testd.log" &
PIDS+=($!)
wait_for 10 test -S "$RUN/ctl.sock" || { cat "$WORK/testd.log"; fail "gpu-testd"; exit 1; }
CG=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
[ -n "$CG" ] || CG=$(head -1 /proc/self/cgroup | cut -d: -f3)
[ -n "$CG" ] || CG=/

section "PyTorch under a $((LIMIT / MIB)) MiB cgroup limit ($CG), cuBLAS and cuDNN loaded"
dpuctl gpu set cgroup "$CG" device 0 mem "$LIMIT" || fail "dpuctl gpu set cgroup"
T0=$SECONDS
hooked timeout 240 python3 "$HERE/gpu/torch_true_usage.py" --hold 12 >"$WORK/torch.txt" 2>"$WORK/torch.err" &
PIDS+=($!)
TP=$!
if wait_for 180 grep -q '^holding=1' "$WORK/torch.txt"; then
    cat "$WORK/torch.txt"
    PID=$(kv "$WORK/torch.txt" pid)
    sleep 0.6 # a background reading of the driver's figure
    DRV=$(drv_mib "$PID")
    USED=$(gpu_field "$PID" memory_used)
    echo "--- dpuctl gpu show"
    dpuctl gpu show
    echo "--- nvidia-smi (not hooked)"
    env -u LD_PRELOAD nvidia-smi -i 0 --query-compute-apps=pid,used_memory --format=csv
    echo "driver's per-process figure: ${DRV} MiB; dpuctl gpu show: $((USED / MIB)) MiB ($USED bytes); limit $((LIMIT / MIB)) MiB"
    check "PyTorch: OutOfMemoryError at the limit" grep -q "^oom='CUDA out of memory" "$WORK/torch.txt"
    check "the driver's figure (${DRV} MiB) <= limit + 1% ($((LIMIT / MIB * 101 / 100)) MiB)" le "${DRV:-999999}" "$((LIMIT / MIB * 101 / 100))"
    check "dpuctl gpu show ($((USED / MIB)) MiB) within 4 MiB of the driver's figure (${DRV} MiB)" near "$((USED / MIB))" "${DRV:-0}" 4
    echo "--- nvidia-smi under the hook (same cgroup)"
    hooked nvidia-smi -i 0 --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits 2>"$WORK/smi.err" | tee "$WORK/smi.txt"
    hooked nvidia-smi -i 0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>>"$WORK/smi.err" | tee "$WORK/smi-apps.txt"
    DPU_CUDA_LOG=debug hooked nvidia-smi -i 0 2>>"$WORK/smi.err" | tee "$WORK/smi-full.txt" | sed -n '1,40p'
    env LD_PRELOAD="$HERE/build/libdpucuda.so" DPU_SOCKET="$RUN/dpu0.sock" DPU_CUDA_LOG=debug \
        nvidia-smi -i 0 2>&1 >/dev/null | grep -c "process table" | sed 's/^/hook answers for the process table in nvidia-smi: /'
    grep "process table\|NVML" "$WORK/smi.err" | sort | uniq -c | head -8
    python3 - <<'PY'
import time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
t = time.perf_counter()
for _ in range(500):
    pynvml.nvmlDeviceGetComputeRunningProcesses(h)
print(f"NVML running-process query (unhooked): {(time.perf_counter() - t) / 500 * 1e6:.1f} us a call")
PY
    ST=$(cut -d, -f1 "$WORK/smi.txt" | tr -d ' '); SU=$(cut -d, -f2 "$WORK/smi.txt" | tr -d ' '); SF=$(cut -d, -f3 "$WORK/smi.txt" | tr -d ' ')
    SUM=$(awk -F', *' '{ s += $2 } END { print s + 0 }' "$WORK/smi-apps.txt")
    check "hooked nvidia-smi: total = the limit ($ST MiB)" eq "$ST" "$((LIMIT / MIB))"
    check "hooked nvidia-smi: used ($SU) = its process table's sum ($SUM)" near "$SU" "$SUM" 1
    check "hooked nvidia-smi: used ($SU) = dpuctl gpu show ($((USED / MIB)))" near "$SU" "$((USED / MIB))" 2
    FREE_WANT=$((ST > SU ? ST - SU : 0))
    check "hooked nvidia-smi: free ($SF) = total - used, or 0 past the limit" near "$SF" "$FREE_WANT" 1
    check "hooked nvidia-smi: the table lists the PyTorch process" grep -q "^$PID," "$WORK/smi-apps.txt"
    check "hooked nvidia-smi's full view lists the PyTorch process" grep -q " $PID " "$WORK/smi-full.txt"
    echo "--- a per-process limit instead (the monitor has none: NVML's own view)"
    dpuctl gpu set pid "$PID" device 0 mem "$LIMIT" >/dev/null || fail "dpuctl gpu set pid"
    dpuctl gpu set cgroup "$CG" device 0 mem 0 >/dev/null
    sleep 0.5
    hooked nvidia-smi -i 0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | tee "$WORK/smi-pid.txt"
    ROW=$(awk -F', *' -v p="$PID" '$1 == p { print $2 }' "$WORK/smi-pid.txt")
    USED2=$(gpu_field "$PID" memory_used)
    echo "per-process limit: nvidia-smi ${ROW} MiB, dpuctl gpu show $((USED2 / MIB)) MiB ($(gpu_field "$PID" limit_of))"
    check "per-process limit: nvidia-smi's row (${ROW} MiB) within 4 MiB of dpuctl gpu show" near "${ROW:-0}" "$((USED2 / MIB))" 4
else
    fail "PyTorch never filled its limit"
    cat "$WORK/torch.txt"
fi
echo "--- PyTorch's hook log"
grep -v '^$' "$WORK/torch.err" | tail -15
wait "$TP" 2>/dev/null
echo "PyTorch section: $((SECONDS - T0)) s"

section "agent log"
tail -20 "$WORK/testd.log"
section "summary"
if [ "$FAILS" -eq 0 ]; then echo "all checks passed"; else echo "$FAILS check(s) failed"; fi
exit $((FAILS > 0))
