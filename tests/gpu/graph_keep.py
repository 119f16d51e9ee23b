"""The classic growth bug (growth per step): an evaluation loop without
torch.no_grad() that keeps each step's output with .cpu() - the CPU copy
still references the autograd graph, so every step's saved activations
stay on the GPU. With --detach the output is detached first (the fix):
flat. No markers: the steps must be found from the allocations.

usage: python3 tests/gpu/graph_keep.py [--detach] [--steps N]
"""
import sys

import torch

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
detach = "--detach" in sys.argv
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 64)).cuda()
x = torch.randn(8, 64, device="cuda")
kept = []
for step in range(steps):
    out = model(x * (step + 1))  # SITE forward
    kept.append(out.detach().cpu() if detach else out.cpu())  # SITE keep
torch.cuda.synchronize()
print(f"ok {torch.cuda.memory_allocated()}")
