"""torch_true_usage.py — PyTorch under libdpucuda with cuBLAS and cuDNN
loaded, for gpu-usage-test.sh.

Runs a matrix product (cuBLAS and its workspace) and a convolution with
cuDNN's autotuner (cuDNN, its kernels and workspaces), then allocates CHUNK
tensors on cuda:0 until PyTorch raises OutOfMemoryError, runs the product
and the convolution again, and holds everything for HOLD seconds while
the test reads the driver's figure. Output lines are key=value.
"""
import argparse
import os
import time

import torch


def work(dev):
    a = torch.randn(2048, 2048, device=dev)
    b = a @ a
    x = torch.randn(16, 64, 56, 56, device=dev)
    w = torch.randn(128, 64, 3, 3, device=dev)
    y = torch.nn.functional.conv2d(x, w, padding=1)
    h = torch.randn(64, 1024, device=dev, dtype=torch.float16)
    g = h @ h.t()
    torch.cuda.synchronize()
    return float(b.sum()) + float(y.sum()) + float(g.float().sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", type=int, default=64 << 20)
    ap.add_argument("--hold", type=float, default=10)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda:0")
    print(f"pid={os.getpid()}", flush=True)
    print(f"torch={torch.__version__} cudnn={torch.backends.cudnn.version()}", flush=True)
    work(dev)
    held, oom = [], ""
    try:
        while True:
            held.append(torch.empty(a.chunk, dtype=torch.uint8, device=dev))
    except torch.cuda.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
    print(f"tensors={len(held)}\nallocated={len(held) * a.chunk}\noom={oom!r}", flush=True)
    # Growth after the limit is reached: the libraries' kernels again, and a
    # fresh cuBLAS handle on another stream.
    s = torch.cuda.Stream()
    err = ""
    try:
        with torch.cuda.stream(s):
            work(dev)
        work(dev)
    except torch.cuda.OutOfMemoryError as e:
        err = str(e).splitlines()[0]
    except RuntimeError as e:
        err = str(e).splitlines()[0]
    print(f"after_err={err!r}", flush=True)
    free, total = torch.cuda.mem_get_info(0)
    print(f"mem_get_info_free={free}\nmem_get_info_total={total}", flush=True)
    print("holding=1", flush=True)
    time.sleep(a.hold)


if __name__ == "__main__":
    main()
