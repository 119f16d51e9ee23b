"""Small workloads of each framework for the driver observer's coverage
proof (tests/gpu/gpu-coverage.py). Prints one JSON line with the framework's
own memory figures.

usage: frameworks.py torch|torch-profiler|cupy|jax
"""
import json
import sys


def torch_run(profile=False):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                       batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, num_layers=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 256, 512, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.item()

    out = {}
    if profile:
        from torch.profiler import ProfilerActivity, profile as prof
        with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(3):
                step()
        kernels = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        out["cuda_kernel_events"] = len(kernels)
    else:
        for _ in range(5):
            out["loss"] = step()
    torch.cuda.synchronize()
    out["max_memory_allocated"] = torch.cuda.max_memory_allocated()  # 0 when uncached
    out["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    out["num_alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    return out


def cupy_run():
    import cupy
    pool = cupy.get_default_memory_pool()
    peak = 0
    keep = []
    for i in range(6):
        a = cupy.random.random((2048, 2048 + 256 * i))
        keep.append(a @ a.T)
        peak = max(peak, pool.total_bytes())
    cupy.cuda.Device().synchronize()
    return {"pool_total_bytes_peak": peak, "pool_used_bytes": pool.used_bytes(),
            "pool_total_bytes": pool.total_bytes()}


def jax_run():
    import jax
    import jax.numpy as jnp
    x = jnp.ones((8192, 8192), dtype=jnp.float32)
    y = (x @ x).block_until_ready()
    z = jnp.sin(y) + 1.0
    z.block_until_ready()
    st = jax.devices()[0].memory_stats() or {}
    return {k: st[k] for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_reserved",
                               "peak_bytes_reserved", "bytes_limit", "pool_bytes",
                               "peak_pool_bytes") if k in st}


if __name__ == "__main__":
    what = sys.argv[1]
    r = {"torch": torch_run, "torch-profiler": lambda: torch_run(True), "cupy": cupy_run,
         "jax": jax_run}[what]()
    print(json.dumps(r))
