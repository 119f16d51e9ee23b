"""A training loop for the retention captures at a step and on growth
(tests/e2e/test_retention_capture.py), over tests/e2e/py/optimhook's
stand-in for PyTorch's optimizer hook and memory_allocated().

Twelve steps; each allocates through the simulated CUDA runtime
(libpyalloc.so) and calls the optimizer's step(). Modes (argv[1]):
  leak   what the program holds grows by 1000 bytes every step
  clean  it stays the same
  late   as leak, but torch is imported only after the first CUDA call
         (the capture's bootstrap then finds no torch yet)
Prints "ok".
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "optimhook"))
lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = (ctypes.c_uint64,)
mode = sys.argv[1]
if mode == "late":
    lib.pyalloc_alloc(4096)
    for i in range(100000):  # the bootstrap runs at a safe point in here
        pass
import torch  # noqa: E402

opt = torch.optim.optimizer.Optimizer()
for step in range(12):
    lib.pyalloc_alloc(4096)
    if mode != "clean":
        torch.cuda.allocated[0] += 1000
    opt.step()
print("ok")
