#!/usr/bin/env bash
# gpu-test.sh — GPU over the fabric on a machine with an NVIDIA GPU.
#
#   gpu-test.sh [BUNDLE]
#
# BUNDLE (default: this directory's build/ and the repository's bin/) holds
# bin/{dpu-agent,dpu-fabric}, build/{dpu-cuda-launcher,rprobe,etprobe,
# remote/libcuda.so.1,trace/libcuda.so.1} (make all trace)
# and gpu/. It builds the kernels and the CUDA runtime programs with nvcc,
# stands up a two-node fabric of real agents (UDP loopback), starts the
# launcher on node 1 (real driver) and runs every program twice: locally,
# and remotely on node 0 with libdpucuda-remote as libcuda.so.1 and
# CUDA_VISIBLE_DEVICES empty (a local driver would see no GPU). It checks
# that the results are identical, reports launch cost and copy bandwidth
# against local, then tries PyTorch's CUDA init and a small tensor op and
# lists the entry points asked for and not served. A plain C program runs
# cuBLAS (cublasCreate, SGEMM, a BF16 GEMM) against a CPU reference, locally
# and remotely, and PyTorch's matrix products are checked against the CPU.
# PASS/FAIL lines; the log goes to $OUT/remote-gpu-test.log (default the
# work directory), with the remote runs' own logs (*.log.gz), every entry
# point looked up (procs.txt) and the driver names the cuBLAS libraries
# hold (cublas-driver-names.txt) beside it.
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
for p in vecadd matmul streams asyncapi multicopy; do
    nvcc -O2 -arch=sm_90 -o "$p" "$B/gpu/$p.cu" || fail "nvcc $p"
done
# cuBLAS: the toolkit's, else the one PyTorch ships.
CUBLAS_LIB=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null | head -1)" 2>/dev/null)
if [ -z "$CUBLAS_LIB" ] || [ "$CUBLAS_LIB" = . ]; then
    CUBLAS_LIB=$(dirname "$(find / -xdev -name 'libcublas.so.*' 2>/dev/null | head -1)")
fi
echo "cuBLAS from $CUBLAS_LIB: $(ls "$CUBLAS_LIB" | grep -i cublas | tr '\n' ' ')"
nvcc -O2 -o cublas_check "$B/gpu/cublas_check.c" -L"$CUBLAS_LIB" -lcublas -Xlinker -rpath="$CUBLAS_LIB" ||
    fail "nvcc cublas_check"
echo "cublas_check links: $(ldd ./cublas_check | awk '{print $1}' | tr '\n' ' ')"
# The driver entry points the cuBLAS libraries name (looked up at run time).
python3 - "$CUBLAS_LIB" >"$LOGDIR/cublas-driver-names.txt" <<'PY'
import glob, re, sys
names = set()
for f in glob.glob(sys.argv[1] + "/libcublas*.so*"):
    data = open(f, "rb").read()
    names.update(m.decode() for m in re.findall(rb"(?<=\x00)(cu[A-Z][A-Za-z0-9_]{2,60})(?=\x00)", data))
print("\n".join(sorted(names)))
PY
echo "cuBLAS libraries name $(wc -l <"$LOGDIR/cublas-driver-names.txt") driver entry points"
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
    timeout "$t" env LD_LIBRARY_PATH="${REMOTE_LIB:-$B/build/remote}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$vis" \
        DPU_SOCKET="$W/fab/node0/dpu0.sock" DPU_CUDA_REMOTE="$W/door" DPU_CUDA_REMOTE_MISSING="$W/missing.txt" \
        DPU_CUDA_REMOTE_PROCS="$W/procs.txt" \
        DPU_CUDA_REMOTE_TIMEOUT_S=120 "$@"
}

# ONLY=tables,programs,async,cublas,torch (default all) picks the sections to run.
want() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }

if want tables; then
section "the real driver's private export tables (etprobe), beside what the client serves"
# cudart interface, tools tls, tools callbacks, context storage, context checks,
# integrity, context identity, then three the client does not serve.
timeout 60 "$B/build/etprobe" 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 42d85a81-23f6-cb47-8298-f6e78a3aecdc \
    a094798c-2e74-2e74-93f2-0800200c0a66 c693336e-1121-df11-a8c3-68f355d89593 263e8860-7cd2-6143-92f6-bbd5006dfa7e \
    d4082055-bde6-704b-8d34-ba123c66e1f2 21318c60-9714-3248-8ca6-41ff7324c8f2 1734dc26-800d-4745-8726-c0f1e7dd8bca \
    69a28e9f-2449-8b47-b030-c5da330ea4e9 f8cff951-2146-8b4e-b9e2-fb469e7c0dd9 2>&1 | head -400
fi # tables
if want programs; then
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
    memset_dtod_wrong bw_roundtrip_ok launch_ex_wrong clusters_ok tensor_map_ok tensor_map_rank6_refused

section "overhead against local"
LL=$(kv "$W/rprobe.local" launch_us) LR=$(kv "$W/rprobe.remote" launch_us)
echo "driver API launch (2000 x empty kernel, then synchronize): local ${LL} us, remote ${LR} us per launch ($(ratio "$LR" "$LL")x)"
RL=$(kv "$W/streams.local" rt_launch_us) RR=$(kv "$W/streams.remote" rt_launch_us)
echo "runtime launch (<<<>>>, 2000 x empty kernel): local ${RL} us, remote ${RR} us per launch ($(ratio "$RR" "$RL")x)"
for d in htod dtoh; do
    L=$(kv "$W/rprobe.local" ${d}_MBps) R=$(kv "$W/rprobe.remote" ${d}_MBps)
    echo "$d 32 MiB pageable: local ${L} MB/s, remote ${R} MB/s ($(ratio "$R" "$L")x)"
done

fi # programs

if want async; then
section "asynchronous work: cuda-samples' asyncAPI and simpleMultiCopy (gpu/asyncapi.cu, gpu/multicopy.cu), local then remote"
for p in asyncapi multicopy; do
    timeout 120 "./$p" >"$W/$p.local" 2>&1
    echo "local rc=$?"
    cat "$W/$p.local"
    remote 300 stdbuf -oL "./$p" >"$W/$p.remote" 2>"$W/$p.remote.err"
    echo "remote rc=$?"
    cat "$W/$p.remote"
    grep -v '^$' "$W/$p.remote.err" | head -20
done
check "asyncAPI: right locally" eq "$(kv "$W/asyncapi.local" asyncapi_wrong)" 0
check "asyncAPI: right remotely" eq "$(kv "$W/asyncapi.remote" asyncapi_wrong)" 0
IT=$(kv "$W/asyncapi.remote" asyncapi_iterations)
check "asyncAPI: the CPU counted while the GPU worked, remotely ($IT iterations; locally $(kv "$W/asyncapi.local" asyncapi_iterations))" test "${IT:-0}" -gt 0
check "simpleMultiCopy: every frame right locally" eq "$(kv "$W/multicopy.local" multicopy_wrong_frames)" 0
check "simpleMultiCopy: every frame right remotely" eq "$(kv "$W/multicopy.remote" multicopy_wrong_frames)" 0
for k in multicopy_program_ms multicopy_serial_wall_ms multicopy_overlap_wall_ms multicopy_overlap_event_ms; do
    L=$(kv "$W/multicopy.local" $k) R=$(kv "$W/multicopy.remote" $k)
    echo "simpleMultiCopy $k: local $L, remote $R ($(ratio "$R" "$L")x)"
done
for k in asyncapi_gpu_ms asyncapi_cpu_calls_ms asyncapi_wait_ms; do
    echo "asyncAPI $k: local $(kv "$W/asyncapi.local" $k), remote $(kv "$W/asyncapi.remote" $k)"
done

if [ -x ./cublas_check ]; then
    timeout 120 ./cublas_check >"$W/cublas_plain.local" 2>&1
    remote 150 ./cublas_check >"$W/cublas_plain.remote" 2>"$W/cublas_plain.remote.err"
    L=$(kv "$W/cublas_plain.local" sgemm_256_us) R=$(kv "$W/cublas_plain.remote" sgemm_256_us)
    echo "cuBLAS SGEMM 256^3 (no tracing or logging; workspace set, 200 calls, then synchronize): local ${L} us, remote ${R} us per call ($(ratio "$R" "$L")x)"
    check "cuBLAS (no tracing): every result right remotely" eq "$(kv "$W/cublas_plain.remote" done)" 1
fi

section "launch cost and copy rate, against the fabric's raw rate in the same run"
timeout 120 "$B/build/rprobe" kernels.ptx -launches 2000 -bw 67108864 >"$W/rate.local" 2>&1
remote 300 "$B/build/rprobe" kernels.ptx -launches 2000 -bw 67108864 >"$W/rate.remote" 2>"$W/rate.remote.err"
head -5 "$W/rate.remote.err"
LL=$(kv "$W/rate.local" launch_us) LR=$(kv "$W/rate.remote" launch_us)
echo "driver API launch (2000 x empty kernel, then synchronize): local ${LL} us, remote ${LR} us per launch ($(ratio "$LR" "$LL")x)"
echo "TARGET remote launch <= 3x local and <= 15 us: $(awk -v l="$LL" -v r="$LR" 'BEGIN { print (r <= 3 * l && r <= 15) ? "met" : "missed" }')"
for d in htod dtoh; do
    L=$(kv "$W/rate.local" ${d}_MBps) R=$(kv "$W/rate.remote" ${d}_MBps)
    echo "$d 64 MiB pageable: local ${L} MB/s, remote ${R} MB/s"
done
timeout 200 "$B/build/fabbw" "$W/fab/node0/dpu0.sock" "$W/fab/node1/dpu0.sock" 67108864 8 >"$W/fabbw.txt" 2>&1
cat "$W/fabbw.txt"
F=$(kv "$W/fabbw.txt" fabric_raw_store_MBps) FL=$(kv "$W/fabbw.txt" fabric_raw_load_MBps)
echo "remote htod as a fraction of the fabric's raw bulk store (one dpu_store of 64 MiB): $(ratio "$(kv "$W/rate.remote" htod_MBps)" "$F")"
echo "remote dtoh as a fraction of the fabric's raw bulk load across (one dpu_load of 64 MiB): $(ratio "$(kv "$W/rate.remote" dtoh_MBps)" "$FL")"
for th in 16; do
    timeout 200 "$B/build/fabbw" "$W/fab/node0/dpu0.sock" "$W/fab/node1/dpu0.sock" 67108864 $th | grep -v '^fabric_bytes' | tr '\n' ' '
    echo
done
fi # async

if want cublas; then
section "cuBLAS (plain C: cublasCreate, SGEMM, BF16 GEMM against a CPU reference): local, then remote"
timeout 120 ./cublas_check >"$W/cublas.local" 2>&1
echo "rc=$?"
cat "$W/cublas.local"
# The trace build of the client logs every entry point called (a failure
# on an answer served in the client shows as the calls before it).
DPU_CUDA_REMOTE_TRACE=1 REMOTE_LIB=$B/build/trace DPU_CUDA_REMOTE_LOG=${CUBLAS_LOG:-3} remote 150 \
    env LD_PRELOAD="$B/build/trace/libcuda.so.1" CUBLASLT_LOG_LEVEL=5 CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stderr \
    stdbuf -oL ./cublas_check >"$W/cublas.remote" 2>"$W/cublas.remote.err"
echo "rc=$?"
cat "$W/cublas.remote"
grep -v 'cuGetProcAddress .*: served\|^libdpucuda-remote: op \|module image of\|: call \|storage get' "$W/cublas.remote.err" | grep -iv 'not served$' | head -60
echo "dlopen, and driver names dlsym did not find:"
grep ': dlopen \|: dlsym .*NOT FOUND' "$W/cublas.remote.err" | sort | uniq -c | head -40
echo "the last entry points called:"
grep -v 'cuGetProcAddress .*: served\|module image of\|storage get' "$W/cublas.remote.err" | grep -B60 'entry points asked for and not served' | head -60
gzip -c "$W/cublas.remote.err" >"$LOGDIR/cublas-remote.log.gz"
check "cuBLAS: every result right locally" eq "$(kv "$W/cublas.local" done)" 1
check "cuBLAS: every result right remotely" eq "$(kv "$W/cublas.remote" done)" 1
for k in sgemm_64x64x64_sum sgemm_513x257x129_sum bf16_1024x1024x1024_sum; do
    l=$(kv "$W/cublas.local" $k) r=$(kv "$W/cublas.remote" $k)
    if eq "$l" "$r"; then echo "cublas $k: identical ($r)"; else echo "cublas $k: local '$l', remote '${r:-not reached}'"; fi
done
echo "cuBLAS SGEMM 256^3 with cuBLAS's own workspace: status local $(kv "$W/cublas.local" sgemm_256_own_workspace_status), remote $(kv "$W/cublas.remote" sgemm_256_own_workspace_status)"
L=$(kv "$W/cublas.local" sgemm_256_us) R=$(kv "$W/cublas.remote" sgemm_256_us)
echo "cuBLAS SGEMM 256^3 (workspace set, 200 calls, then synchronize): local ${L} us, remote ${R} us per call ($(ratio "$R" "$L")x)"

fi # cublas

if want torch; then
section "PyTorch: CUDA init and a small tensor op, local then remote"
PYTHONUNBUFFERED=1 timeout 180 python3 "$B/gpu/torch_small.py" >"$W/torch.local" 2>&1
cat "$W/torch.local"
VISIBLE=keep PYTHONUNBUFFERED=1 DPU_CUDA_REMOTE_LOG=${TORCH_LOG:-2} remote 200 python3 "$B/gpu/torch_small.py" >"$W/torch.remote" 2>&1
echo "rc=$?"
grep -v '^libdpucuda-remote: op \|module image of\|export table: \(context storage\|tools tls\)' "$W/torch.remote" | tail -60
gzip -c "$W/torch.remote" >"$LOGDIR/torch-remote.log.gz"
for k in matmul_64_float32_ok matmul_1024_float32_ok matmul_1024_bfloat16_ok; do
    check "torch $k remotely (against the CPU)" eq "$(kv "$W/torch.remote" $k)" 1
done
for k in available count name elementwise_sum matmul_sum matmul_64_float32_relerr matmul_1024_float32_relerr \
    matmul_1024_bfloat16_relerr; do
    l=$(kv "$W/torch.local" $k) r=$(kv "$W/torch.remote" $k)
    if eq "$l" "$r"; then echo "torch $k: identical ($r)"; else echo "torch $k: local '$l', remote '${r:-not reached}'"; fi
done

fi # torch

section "entry points asked for (cuGetProcAddress) and not served, per process"
cat "$W/missing.txt" 2>/dev/null | tr ' ' '\n' | sort | uniq -c | sort -rn | awk '{print $2}' | tr '\n' ' '
echo

sort -u "$W/procs.txt" >"$LOGDIR/procs.txt" 2>/dev/null
echo "entry points looked up: $(wc -l <"$LOGDIR/procs.txt"), not served: $(grep -c ' missing$' "$LOGDIR/procs.txt")"

section "launcher log"
grep -v '^dpu-cuda-launcher: slot [0-9]*: op ' "$W/launcher.log" | tail -40
gzip -c "$W/launcher.log" >"$LOGDIR/launcher.log.gz"

section "summary"
if [ "$FAILS" -eq 0 ]; then echo "all checks passed"; else echo "$FAILS check(s) failed"; fi
exit $((FAILS > 0))
