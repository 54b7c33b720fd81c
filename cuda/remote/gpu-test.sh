#!/usr/bin/env bash
# gpu-test.sh — GPU over the fabric on a machine with an NVIDIA GPU.
#
#   gpu-test.sh [BUNDLE]
#
# BUNDLE (default: this directory's build/ and the repository's bin/) holds
# bin/{dpu-agent,dpu-fabric}, build/{dpu-cuda-launcher,rprobe,remote/libcuda.so.1}
# and gpu/. It builds the kernels and the CUDA runtime programs with nvcc,
# stands up a two-node fabric of real agents (UDP loopback), starts the
# launcher on node 1 (real driver) and runs every program twice: locally,
# and remotely on node 0 with libdpucuda-remote as libcuda.so.1 and
# CUDA_VISIBLE_DEVICES empty (a local driver would see no GPU). It checks
# that the results are identical, reports launch cost and copy bandwidth
# against local, then tries PyTorch's CUDA init and a small tensor op and
# lists the entry points asked for and not served. PASS/FAIL lines; the log
# goes to $OUT/remote-gpu-test.log (default the work directory).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-}
if [ -z "$B" ]; then
    B=$(mktemp -d /tmp/remote-bundle.XXXXXX)
    mkdir -p "$B/bin" "$B/build"
    cp "$HERE/../../bin/dpu-agent" "$HERE/../../bin/dpu-fabric" "$B/bin/"
    cp -r "$HERE/build/." "$B/build/"
    cp -r "$HERE/gpu" "$B/gpu"
fi
W=$(mktemp -d /tmp/remote-gpu.XXXXXX)
LOGDIR=${OUT:-$W}
mkdir -p "$LOGDIR"
exec > >(tee "$LOGDIR/remote-gpu-test.log") 2>&1
FAILS=0
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    "$B/bin/dpu-fabric" down --dir "$W/fab" >/dev/null 2>&1
}
trap cleanup EXIT
section() { echo; echo "== $* =="; }
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
kv() { sed -n "s/^$2=//p" "$1" | tail -1; }
eq() { [ -n "$1" ] && [ "$1" = "$2" ]; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "inf" }'; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvcc --version | tail -1
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
ldconfig -p | grep 'libcuda.so.1 ' || true
nproc

section "build (nvcc: PTX for the driver API probe, runtime programs with the static cudart)"
cd "$W"
nvcc -ptx -arch=sm_90 -o kernels.ptx "$B/gpu/kernels.cu" || fail "nvcc kernels.ptx"
for p in vecadd matmul streams; do
    nvcc -O2 -arch=sm_90 -o "$p" "$B/gpu/$p.cu" || fail "nvcc $p"
done
echo "vecadd links: $(ldd ./vecadd | awk '{print $1}' | tr '\n' ' ')"

section "two-node fabric, launcher on node 1"
"$B/bin/dpu-fabric" up --nodes 2 --topo line --dir "$W/fab" --agent "$B/bin/dpu-agent" || { fail "dpu-fabric up"; exit 1; }
"$B/build/dpu-cuda-launcher" ${LAUNCHER_FLAGS:-} -s "$W/fab/node1/dpu0.sock" -door-file "$W/door" -slots 4 2>"$W/launcher.log" >/dev/null &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/door" ] && break; sleep 0.1; done
check "launcher serving (door $(cat "$W/door" 2>/dev/null))" test -s "$W/door"
cat "$W/launcher.log"
# remote SECONDS COMMAND...: COMMAND as a remote client, bounded, with
# CUDA_VISIBLE_DEVICES empty (PyTorch parses that variable itself, so its
# run leaves it unset: VISIBLE=keep).
remote() {
    local t=$1 vis=CUDA_VISIBLE_DEVICES=
    shift
    [ "${VISIBLE:-}" = keep ] && vis=DPU_CUDA_REMOTE_VISIBLE=unchanged
    timeout "$t" env LD_LIBRARY_PATH="$B/build/remote${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$vis" \
        DPU_SOCKET="$W/fab/node0/dpu0.sock" DPU_CUDA_REMOTE="$W/door" DPU_CUDA_REMOTE_MISSING="$W/missing.txt" \
        DPU_CUDA_REMOTE_TIMEOUT_S=120 "$@"
}

if [ "${ONLY:-}" != torch ]; then
section "the local driver sees no GPU with CUDA_VISIBLE_DEVICES empty"
CUDA_VISIBLE_DEVICES= timeout 60 ./vecadd >"$W/novis.txt" 2>&1
cat "$W/novis.txt"
check "local run without a visible GPU fails" grep -q "^error=" "$W/novis.txt"

compare() { # compare NAME KEYS...
    local name=$1
    shift
    for k in "$@"; do
        local l r
        l=$(kv "$W/$name.local" "$k")
        r=$(kv "$W/$name.remote" "$k")
        check "$name: $k identical (local $l, remote $r)" eq "$l" "$r"
    done
}

for p in vecadd matmul streams; do
    section "$p (nvcc, CUDA runtime): local, then remote"
    timeout 120 "./$p" >"$W/$p.local" 2>&1
    cat "$W/$p.local"
    remote 100 stdbuf -oL "./$p" >"$W/$p.remote" 2>"$W/$p.remote.err"
    echo "rc=$?"
    cat "$W/$p.remote"
    grep -v '^$' "$W/$p.remote.err" | head -20
done
compare vecadd vecadd_wrong vecadd_sum device
compare matmul matmul_wrong matmul_sum
compare streams streams_wrong streams_sum streams_event_ms_ok
check "vecadd: every element right remotely" eq "$(kv "$W/vecadd.remote" vecadd_wrong)" 0
check "matmul: CPU check passes remotely" eq "$(kv "$W/matmul.remote" matmul_wrong)" 0
check "streams: every element right remotely" eq "$(kv "$W/streams.remote" streams_wrong)" 0

section "driver API probe (rprobe, PTX module): local, then remote"
timeout 120 "$B/build/rprobe" kernels.ptx -bw 33554432 >"$W/rprobe.local" 2>&1
cat "$W/rprobe.local"
remote 120 stdbuf -oL "$B/build/rprobe" kernels.ptx -bw 33554432 >"$W/rprobe.remote" 2>"$W/rprobe.remote.err"
cat "$W/rprobe.remote"
head -20 "$W/rprobe.remote.err"
compare rprobe vecadd_sum matmul_sum streams_sum vecadd_wrong matmul_wrong streams_wrong streams_elapsed_ok \
    memset_dtod_wrong bw_roundtrip_ok

section "overhead against local"
LL=$(kv "$W/rprobe.local" launch_us) LR=$(kv "$W/rprobe.remote" launch_us)
echo "driver API launch (2000 x empty kernel, then synchronize): local ${LL} us, remote ${LR} us per launch ($(ratio "$LR" "$LL")x)"
RL=$(kv "$W/streams.local" rt_launch_us) RR=$(kv "$W/streams.remote" rt_launch_us)
echo "runtime launch (<<<>>>, 2000 x empty kernel): local ${RL} us, remote ${RR} us per launch ($(ratio "$RR" "$RL")x)"
for d in htod dtoh; do
    L=$(kv "$W/rprobe.local" ${d}_MBps) R=$(kv "$W/rprobe.remote" ${d}_MBps)
    echo "$d 32 MiB pageable: local ${L} MB/s, remote ${R} MB/s ($(ratio "$R" "$L")x)"
done

fi # ONLY

section "PyTorch: CUDA init and a small tensor op, local then remote"
PYTHONUNBUFFERED=1 timeout 180 python3 "$B/gpu/torch_small.py" >"$W/torch.local" 2>&1
cat "$W/torch.local"
VISIBLE=keep PYTHONUNBUFFERED=1 DPU_CUDA_REMOTE_LOG=${TORCH_LOG:-1} remote 150 python3 "$B/gpu/torch_small.py" >"$W/torch.remote" 2>&1
echo "rc=$?"
tail -40 "$W/torch.remote"
for k in available count name elementwise_sum matmul_sum; do
    l=$(kv "$W/torch.local" $k) r=$(kv "$W/torch.remote" $k)
    if eq "$l" "$r"; then echo "torch $k: identical ($r)"; else echo "torch $k: local '$l', remote '${r:-not reached}'"; fi
done

section "entry points asked for (cuGetProcAddress) and not served, per process"
cat "$W/missing.txt" 2>/dev/null | tr ' ' '\n' | sort | uniq -c | sort -rn | awk '{print $2}' | tr '\n' ' '
echo

section "launcher log"
cat "$W/launcher.log"

section "summary"
if [ "$FAILS" -eq 0 ]; then echo "all checks passed"; else echo "$FAILS check(s) failed"; fi
exit $((FAILS > 0))
