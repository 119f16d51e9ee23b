"""What one NVML per-process query costs (preload/nvml.c makes one per
device sample, every GPUMEMTRACE_SAMPLE_MS), and whether NVML lists this
process's pid at all (it does not in a pid namespace it cannot see).
Prints "nvml_cost us_per_query=X listed=yes|no own_bytes=N"."""
import ctypes
import os
import time

import torch

x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # a context and memory
nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0


class Proc(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]


h = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
procs = (Proc * 128)()
n = ctypes.c_uint(128)
N = 2000
t0 = time.perf_counter()
for _ in range(N):
    n.value = 128
    rc = nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), procs)
dt = (time.perf_counter() - t0) / N * 1e6
own = [p.used for p in procs[:n.value] if p.pid == os.getpid()]
print(f"nvml_cost us_per_query={dt:.1f} rc={rc} processes={n.value} "
      f"listed={'yes' if own else 'no'} own_bytes={own[0] if own else 0} "
      f"torch_reserved={torch.cuda.memory_reserved()}")
