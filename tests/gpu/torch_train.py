"""A PyTorch training loop for the GPU proofs.

usage: torch_train.py MODEL STEPS [--leak]

MODEL is "transformer" (nn.TransformerEncoder) or "mlp" (small MLP).
Prints one JSON line: the losses of every step and PyTorch's own memory
statistics (meaningful when its caching allocator is on). --leak keeps
every step's un-detached output in a list (the classic growth bug).
Deterministic settings, so two runs of the same configuration compute
the same losses.
"""
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # determinism
import torch
import torch.nn as nn


def build(kind, size):
    if kind == "transformer":
        d, heads, ffn, layers, batch, seq = size
        layer = nn.TransformerEncoderLayer(d_model=d, nhead=heads, dim_feedforward=ffn,
                                           batch_first=True, dropout=0.0)
        model = nn.TransformerEncoder(layer, num_layers=layers)
        x = torch.randn(batch, seq, d)
    else:
        blocks = []
        for _ in range(12):
            blocks += [nn.Linear(256, 256), nn.GELU(), nn.LayerNorm(256)]
        model = nn.Sequential(*blocks)
        x = torch.randn(64, 256)
    return model, x


def main():
    kind, steps = sys.argv[1], int(sys.argv[2])
    leak = "--leak" in sys.argv
    full = "--full" in sys.argv
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    size = (1024, 16, 4096, 6, 16, 512) if full else (256, 8, 1024, 2, 8, 128)
    model, x = build(kind, size)
    model, x = model.cuda(), x.cuda()
    opt = (torch.optim.AdamW if kind == "transformer" else torch.optim.Adam)(
        model.parameters(), lr=1e-4)
    kept, losses, times = [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = out.float().pow(2).mean()
        loss.backward()
        opt.step()
        if leak:
            kept.append(out)  # keeps this step's graph alive
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    stats = torch.cuda.memory_stats()
    print(json.dumps({
        "model": kind, "steps": steps, "losses": losses,
        "step_times": times,
        "caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") is None,
        "alloc_count": stats.get("allocation.all.allocated", 0),
        "free_count": stats.get("allocation.all.freed", 0),
        "requested_bytes": stats.get("requested_bytes.all.allocated", 0),
        "allocated_bytes": stats.get("allocated_bytes.all.allocated", 0),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        "segment_count": stats.get("segment.all.allocated", 0),
        "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
        "peak_requested": stats.get("requested_bytes.all.peak", 0),
        "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
    }))


if __name__ == "__main__":
    main()
