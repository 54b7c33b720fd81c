# torch_small.py — PyTorch's CUDA initialisation and a small tensor op;
# prints what it reached as key=value lines.
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
print(f"seconds={time.time() - t0:.1f}", flush=True)
