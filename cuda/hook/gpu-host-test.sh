#!/usr/bin/env bash
# gpu-host-test.sh — libdpucuda's host account and later contexts on a
# machine with an NVIDIA GPU (GPU 0), against the real driver:
#   - pinned host memory (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister)
#     is charged by its pages to the process's host account, refused past a
#     host limit set with dpuctl gpu set ... device host, released by
#     cuMemFreeHost and cuMemHostUnregister; a GPU limit does not cover it;
#   - contexts made with cuCtxCreate_v3 and _v4 are charged (measured through
#     NVML, as _v2's) and released when destroyed.
#
#   gpu-host-test.sh BUNDLE
#
# BUNDLE holds gpu-testd, dpuctl, libdpucuda.so and cudaprobe (make, then
# go build ./cuda/hook/cmd/gpu-testd ./cmd/dpuctl). PASS/FAIL lines; the log
# goes to $OUT/gpu-host-test.log (default the work directory).
set -uo pipefail

B=$(cd "${1:?usage: gpu-host-test.sh BUNDLE}" && pwd)
WORK=$(mktemp -d /tmp/gpu-host-test.XXXXXX)
RUN=$WORK/run
LOGDIR=${OUT:-$WORK}
mkdir -p "$LOGDIR"
exec > >(tee "$LOGDIR/gpu-host-test.log") 2>&1
MIB=1048576
FAILS=0
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
eq() { [ -n "$1" ] && [ "$1" = "$2" ]; }
wait_for() {
    local until=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -ge "$until" ] && return 1
        sleep 0.1
    done
}
dpuctl() { "$B/dpuctl" -s "$RUN/ctl.sock" "$@"; }
# used PID DEVICE: the process's memory in use on a device (64: host), as dpuctl gpu show -j says.
used() {
    dpuctl -j gpu show | python3 -c '
import json, sys
pid, dev = int(sys.argv[1]), int(sys.argv[2])
for p in json.load(sys.stdin) or []:
    if p["pid"] == pid and p["device"] == dev:
        print(p["memory_used"])
' "$1" "$2"
}
used_is() { [ "$(used "$1" "$2")" = "$3" ]; }
charged() { local u; u=$(used "$1" 0); [ -n "$u" ] && [ "$u" != 0 ]; }
lines() { wc -l <"$1"; }
more_lines() { [ "$(lines "$1")" -gt "$2" ]; }
ask() {
    local n
    n=$(lines "$WORK/p.out")
    echo "$*" >&"$FD"
    wait_for 60 more_lines "$WORK/p.out" "$n" || { echo "no-answer"; return 1; }
    sed -n "$((n + 1))p" "$WORK/p.out"
}
field() { echo "$1" | awk -v i="$2" '{print $(i + 1)}'; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || fail "nvidia-smi"
"$B/gpu-testd" -run-dir "$RUN" -mem 4G 2>"$WORK/testd.log" &
PIDS+=($!)
wait_for 10 test -S "$RUN/dpu0.sock" -a -S "$RUN/ctl.sock" || { cat "$WORK/testd.log"; fail "gpu-testd"; exit 1; }

mkfifo "$WORK/p.in"
: >"$WORK/p.out"
env LD_PRELOAD="$B/libdpucuda.so" DPU_SOCKET="$RUN/dpu0.sock" DPU_CUDA_LOG=info DPU_CUDA_REFRESH_MS=200 \
    "$B/cudaprobe" -m proc -v 12080 <"$WORK/p.in" >"$WORK/p.out" 2>"$WORK/p.err" &
PIDS+=($!)
exec {FD}>"$WORK/p.in"
echo "init: $(ask init 0)"
P=$(field "$(ask pid)" 1)
wait_for 10 charged "$P"
CTX2=$(used "$P" 0)
echo "the _v2 context of pid $P: ${CTX2} bytes charged"

echo "--- pinned host memory under a host limit of 8 MiB (dpuctl gpu set pid $P device host mem 8M)"
dpuctl gpu set pid "$P" device host mem 8M || fail "dpuctl gpu set ... device host"
dpuctl gpu limits
H1=$(ask hostalloc $((4 * MIB)))
echo "hostalloc 4 MiB: $H1"
check "cuMemHostAlloc 4 MiB: charged 4 MiB to the host account" wait_for 5 used_is "$P" 64 $((4 * MIB))
H2=$(ask allochost $((3 * MIB + 1)))
echo "allochost 3 MiB + 1: $H2"
check "cuMemAllocHost 3 MiB + 1: charged by pages (7 MiB + 4096)" wait_for 5 used_is "$P" 64 $((7 * MIB + 4096))
R=$(ask hostalloc "$MIB")
check "cuMemHostAlloc past the host limit refused with CUDA_ERROR_OUT_OF_MEMORY ($R)" eq "$R" "err 2"
G=$(ask hostregister $((MIB - 4096)))
echo "hostregister 1 MiB - 4 KiB: $G"
check "cuMemHostRegister: charged (8 MiB in all)" wait_for 5 used_is "$P" 64 $((8 * MIB))
dpuctl gpu show
check "cuMemFreeHost released" eq "$(ask freehost "$(field "$H1" 1)")" "ok"
check "cuMemHostUnregister released" eq "$(ask hostunregister "$(field "$G" 1)")" "ok"
ask freehost "$(field "$H2" 1)" >/dev/null
check "host account back to 0" wait_for 5 used_is "$P" 64 0
A=$(ask alloc $((16 * MIB)))
check "a GPU allocation beside, under the GPU limit (4 GiB, not the host's): $A" eq "$(field "$A" 0)" "ok"

echo "--- contexts made with cuCtxCreate_v3 and _v4"
ask free "$(field "$A" 1)" >/dev/null
ask ctxdestroy 0 >/dev/null
check "the _v2 context released" wait_for 5 used_is "$P" 0 0
echo "ctx3 0: $(ask ctx3 0)"
wait_for 5 charged "$P"
C3=$(used "$P" 0)
check "the _v3 context charged (${C3} bytes; _v2's was ${CTX2})" test "${C3:-0}" -gt $((CTX2 / 2))
ask ctxdestroy 0 >/dev/null
check "the _v3 context released" wait_for 5 used_is "$P" 0 0
echo "ctx4 0: $(ask ctx4 0)"
wait_for 5 charged "$P"
C4=$(used "$P" 0)
check "the _v4 context charged (${C4} bytes)" test "${C4:-0}" -gt $((CTX2 / 2))
ask ctxdestroy 0 >/dev/null
check "the _v4 context released" wait_for 5 used_is "$P" 0 0
ask exit >/dev/null
grep -v '^$' "$WORK/p.err" | tail -20

echo
if [ "$FAILS" -eq 0 ]; then echo "all checks passed"; else echo "$FAILS check(s) failed"; fi
exit $((FAILS > 0))
