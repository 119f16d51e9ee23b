"""Fill the card with 8 GiB tensors under PYTORCH_NO_CUDA_MEMORY_CACHING=1,
halving the size at each out-of-memory error down to 256 MiB, then free
them and allocate and fill 1 GiB and 3 GiB: prints one JSON line (errors
caught, tensors held, checksums) that must be the same with and without
the library (tests/gpu/gpu-validate.sh, oom_whole). Without the caching
allocator PyTorch raises AcceleratorError rather than OutOfMemoryError."""
import json

import torch

held, caught, size = [], 0, 8 << 30
while size >= (256 << 20):
    try:
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        t.fill_(len(held) % 251)
        held.append(t)
    except (torch.OutOfMemoryError, torch.AcceleratorError):
        caught += 1
        size //= 2
sums = [int(t[::4096].sum()) for t in held[:3]]
n = len(held)
del held, t
ok = torch.ones(1 << 28, device="cuda")
x = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
x.fill_(7)
print(json.dumps({"caught": caught, "held": n, "sums": sums, "after": float(ok.sum()),
                  "x": int(x[::65536].sum())}))
