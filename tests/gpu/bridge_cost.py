"""Drive bridge_cost.cpp: the cost of torch.empty + free on the GPU in a
Python loop, untraced or traced (run it under LD_PRELOAD for that), with
or without a no-op trace tracker of our own; and getDeviceStats alone.

usage: bridge_cost.py SO [--noop] [--n N]
"""
import ctypes
import json
import sys
import time

import torch

so = ctypes.CDLL(sys.argv[1])
so.stats_ns.restype = ctypes.c_double
so.stats_size.restype = ctypes.c_size_t
so.noop_events.restype = ctypes.c_uint64
n = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 200000
torch.empty(1, device="cuda")
if "--noop" in sys.argv:
    so.attach_noop()
for _ in range(10000):
    torch.empty(256, device="cuda")
t = time.perf_counter()
for _ in range(n):
    torch.empty(256, device="cuda")
dt = (time.perf_counter() - t) / n * 1e9
print(json.dumps({"alloc_free_ns": dt, "stats_ns": so.stats_ns(100000),
                  "stats_size": so.stats_size(), "noop_events": so.noop_events()}))
