# torch_small.py — PyTorch's CUDA initialisation, a small tensor op and
# matrix products (cuBLAS) checked against the CPU; prints what it reached
# as key=value lines.
import sys
import time

t0 = time.time()
import torch

print(f"torch={torch.__version__}", flush=True)
print(f"available={int(torch.cuda.is_available())}", flush=True)
print(f"count={torch.cuda.device_count()}", flush=True)
print(f"name={torch.cuda.get_device_name(0)}", flush=True)
x = torch.arange(1024, dtype=torch.float32, device="cuda")
print("alloc_copy=1", flush=True)
y = (x * 2 + 1).sum().item()
print(f"elementwise_sum={y}", flush=True)
a = torch.ones(64, 64, device="cuda")
print(f"matmul_sum={(a @ a).sum().item()}", flush=True)
g = torch.Generator().manual_seed(14)
for n, dt, tol in ((64, torch.float32, 1e-3), (1024, torch.float32, 1e-2), (1024, torch.bfloat16, 5e-2)):
    p = torch.randn(n, n, generator=g)
    q = torch.randn(n, n, generator=g)
    got = (p.to("cuda", dt) @ q.to("cuda", dt)).double().cpu()
    pd, qd = p.to(dt).double(), q.to(dt).double()
    want = pd @ qd
    err = ((got - want).abs() / (1 + want.abs())).max().item()
    name = f"matmul_{n}_{str(dt).split('.')[-1]}"
    print(f"{name}_relerr={err:.3g}", flush=True)
    print(f"{name}_ok={int(err < tol)}", flush=True)
print(f"seconds={time.time() - t0:.1f}", flush=True)
