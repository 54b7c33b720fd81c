"""torch_alloc.py — PyTorch under libdpucuda, for gpu-test.sh.

Allocates 256 MiB tensors on cuda:0 until PyTorch raises OutOfMemoryError or
MAX bytes are held, reports what the device looks like from PyTorch, holds
the memory for HOLD seconds, frees it, then times MATMULS 4096x4096 fp32
matrix products. Output lines are key=value.
"""
import argparse
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=4 << 30)
    ap.add_argument("--hold", type=float, default=0)
    ap.add_argument("--matmuls", type=int, default=100)
    a = ap.parse_args()
    dev = torch.device("cuda:0")
    print(f"pid={os.getpid()}")
    print(f"torch={torch.__version__} cuda={torch.version.cuda} device={torch.cuda.get_device_name(0)}")
    free, total = torch.cuda.mem_get_info(0)
    print(f"mem_get_info_free={free}\nmem_get_info_total={total}")
    chunk = 256 << 20
    held, oom = [], ""
    try:
        while (len(held) + 1) * chunk <= a.max:
            held.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
    except torch.cuda.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:200]
    print(f"tensors={len(held)}\nallocated={len(held) * chunk}\nreserved={torch.cuda.memory_reserved(0)}")
    print(f"oom={oom!r}")
    free, total = torch.cuda.mem_get_info(0)
    print(f"mem_get_info_held_free={free}\nmem_get_info_held_total={total}")
    print(f"holding={a.hold}", flush=True)
    time.sleep(a.hold)
    del held
    torch.cuda.empty_cache()
    x = torch.randn(4096, 4096, device=dev)
    y = x @ x
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(a.matmuls):
        y = x @ x
    torch.cuda.synchronize()
    print(f"matmuls={a.matmuls}\nmatmul_wall_s={time.time() - t0:.3f}")
    print("done=1", flush=True)


if __name__ == "__main__":
    main()
