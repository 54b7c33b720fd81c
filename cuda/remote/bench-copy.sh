#!/usr/bin/env bash
# bench-copy.sh — remote copies over two agents on UDP loopback with the
# fake GPU, beside the fabric's raw bulk rate in the same run. Needs
# bin/dpu-agent, bin/dpu-fabric (make build) and this directory's build/.
#
#   bench-copy.sh [ROUNDS]
#
# Each round runs copyprobe (1 MiB and 64 MiB, best of 2 each way) with
# the bulk chunks, then with the page-by-page path (DPU_CUDA_REMOTE_XFER=
# paged), alternating; then fabbw for the same sizes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$HERE/../..
ROUNDS=${1:-2}
W=$(mktemp -d /tmp/bench-copy.XXXXXX)
cleanup() { [ -n "${LP:-}" ] && kill "$LP" 2>/dev/null; "$ROOT/bin/dpu-fabric" down --dir "$W/fab" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$ROOT/bin/dpu-fabric" up --nodes 2 --topo line --dir "$W/fab" --agent "$ROOT/bin/dpu-agent" >/dev/null
LD_LIBRARY_PATH=$HERE/build/fake "$HERE/build/dpu-cuda-launcher" -s "$W/fab/node1/dpu0.sock" -door-file "$W/door" \
    -slots 2 2>"$W/launcher.log" &
LP=$!
for _ in $(seq 100); do [ -s "$W/door" ] && break; sleep 0.1; done
for r in $(seq "$ROUNDS"); do
    for x in bulk paged; do
        LD_LIBRARY_PATH=$HERE/build/remote DPU_SOCKET=$W/fab/node0/dpu0.sock DPU_CUDA_REMOTE=$W/door \
            DPU_CUDA_REMOTE_XFER=$x timeout 300 "$HERE/build/copyprobe" -sizes 1048576,67108864 -iters 2 |
            grep -E 'MBps|wrong' | sed "s/^/round=$r xfer=$x /"
    done
done
for n in 1048576 67108864; do
    timeout 300 "$HERE/build/fabbw" "$W/fab/node0/dpu0.sock" "$W/fab/node1/dpu0.sock" $n 8 2 | grep -E 'raw|ok' | sed "s/^/bytes=$n /"
done
